"""A lock in Redis that one process holds at a time, for a lease it renews while it works.

Ingesting events and delivering them (docs/events.md) each run in one relay process at a
time: a second caller finds the lock taken and returns, since the holder goes on until
nothing is left. The lock is a key set only if absent, holding a random token, with an
expiry: a process killed while holding it loses it when its lease runs out. Renewing and
giving it back compare the token first, in one step in Redis (a script), so that a process
whose lease ran out never extends or deletes the next holder's lock.

Redis carries no truth here (the database's conditional claims keep every event held and
delivered once): when Redis cannot be reached the work goes on without the lock.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import redis

# Each: the key still holds this token → act on it (1), else leave it (0).
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass
class Lease:
    """One holding of a lease lock; `held` is False when Redis could not be asked (the holder
    works unlocked, and renewing or giving it back does nothing)."""

    connection: redis.Redis
    key: str
    seconds: int
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    held: bool = True

    def renew(self) -> bool:
        """Extend the lease by `seconds` from now; False if it was lost (expired, another took it)."""
        if not self.held:
            return False
        try:
            return bool(self.connection.eval(_RENEW, 1, self.key, self.token, self.seconds))
        except redis.RedisError:
            return False

    def release(self) -> None:
        """Give the lock back, if this holding still has it."""
        if not self.held:
            return
        try:
            self.connection.eval(_RELEASE, 1, self.key, self.token)
        except redis.RedisError:
            pass
        self.held = False


def take(connection: redis.Redis, key: str, seconds: float) -> Lease | None:
    """The lock `key` for `seconds` (at least one), or None when another process holds it.
    Without Redis, a Lease that is not held: the caller goes on unlocked."""
    lease = Lease(connection, key, max(1, int(seconds)))
    try:
        if not connection.set(key, lease.token, nx=True, ex=lease.seconds):
            return None
    except redis.RedisError:
        lease.held = False
    return lease
