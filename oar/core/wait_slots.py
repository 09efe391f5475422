"""At most so many waits of one conversation at once, across every web process (docs/limits.md#waits-at-once).

A waiting call holds a web thread for as long as it waits, so one conversation's waits could
take every thread of the relay. Each waiting call holds a slot instead: a member of a Redis
sorted set per conversation, scored by the end of its lease. The wait renews its lease while it
waits (on the `CallerWatch` pulse of `oar.core.waiting`) and gives the slot back when it ends;
a process killed mid-wait cannot give its slots back, and they lapse with their lease.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import replace

import redis

from oar.core import keys
from oar.core.errors import ActionError
from oar.core.runtime import Runtime
from oar.core.waiting import CallerWatch, current_watch, watched_by

# Drops the lapsed slots, then takes one when fewer than the cap are held: one step, so that two
# processes never both take the last one.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

# Whether this thread's call holds a slot already.
_holding: ContextVar[bool] = ContextVar("oar_holding_wait_slot", default=False)


class WaitSlots:
    """The slots of one relay (its Redis namespace), each held for `lease` seconds unless renewed."""

    def __init__(self, connection: redis.Redis, namespace: str, lease: float) -> None:
        self.connection = connection
        self.namespace = namespace
        self.lease = lease

    def take(self, conversation: str, cap: int) -> str | None:
        """A new slot's id, or None when the conversation holds `cap` live slots already.

        Without Redis every wait is let through (an empty id): the relay still serves, it only
        stops counting."""
        slot = secrets.token_hex(8)
        now = time.time()
        try:
            taken = self.connection.eval(
                _TAKE, 1, keys.wait_slots(self.namespace, conversation), now, cap, now + self.lease, slot,
                int(self.lease) + 1,
            )
        except redis.RedisError:
            return ""
        return slot if taken else None

    def renew(self, conversation: str, slot: str) -> None:
        key = keys.wait_slots(self.namespace, conversation)
        with contextlib.suppress(redis.RedisError):
            pipe = self.connection.pipeline()
            pipe.zadd(key, {slot: time.time() + self.lease}, xx=True)
            pipe.expire(key, int(self.lease) + 1)
            pipe.execute()

    def give_back(self, conversation: str, slot: str) -> None:
        with contextlib.suppress(redis.RedisError):
            self.connection.zrem(keys.wait_slots(self.namespace, conversation), slot)


@contextlib.contextmanager
def wait_slot(runtime: Runtime, conversation: str, nothing: str) -> Iterator[None]:
    """Holds one of the conversation's wait slots for the block, or refuses with
    `REMOTE_RELAY_TOO_MANY_WAITS` before the block runs (so the refused call changes nothing).

    Waits inside the block renew the lease on their caller watch's pulse (the watch already set,
    if any, still pulses and is still asked whether the caller went away). A call holds one slot:
    inside a block of its own (a `send` that waits, then asks the owner for a card), it takes no other."""
    cap = runtime.config.max_waits_per_conversation
    if cap <= 0 or _holding.get():
        yield
        return
    slots = WaitSlots(runtime.redis, runtime.config.namespace, runtime.time("WAIT_SLOT_LEASE_SECONDS"))
    slot = slots.take(conversation, cap)
    if slot is None:
        raise ActionError(
            "REMOTE_RELAY_TOO_MANY_WAITS",
            f"This conversation already has {cap} calls waiting, the most it may have at once. Call again once "
            f"one of them answered, or without a wait (wait_seconds 0). {nothing or 'Nothing was done.'}",
            maxWaits=cap,
        )
    if not slot:
        yield
        return
    outer = current_watch() or CallerWatch()
    renewed = time.monotonic()

    def pulse() -> None:
        nonlocal renewed
        outer.pulse()
        if time.monotonic() - renewed >= slots.lease / 3:
            slots.renew(conversation, slot)
            renewed = time.monotonic()

    held = _holding.set(True)
    try:
        # The outer watch as it is (its gone, wake channels and hooks), with the slot renewed at each pulse.
        with watched_by(replace(outer, pulse=pulse, every_seconds=min(outer.every_seconds, slots.lease / 3))):
            yield
    finally:
        _holding.reset(held)
        slots.give_back(conversation, slot)
