"""Which kinds of process are running, for readiness (docs/operations.md#health-check).

Every worker process and every clock, on whichever node, says it is there every
`ALIVE_SECONDS` (`Beacon`): its `host:pid` in a sorted set of its kind in Redis, scored by
Redis's own clock, so that nodes whose clocks differ agree. A process that stops takes itself
out; one that dies drops out once its last word is `ALIVE_STALE_SECONDS` old. `/readyz` asks
whether a kind has anyone (`present`). Nothing here is data: a flushed Redis is filled again
within `ALIVE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading

import redis

from oar.core import keys

log = logging.getLogger(__name__)

WORKER = "worker"
CLOCK = "clock"


def _now(connection: redis.Redis) -> float:
    seconds, microseconds = connection.time()
    return float(seconds) + microseconds / 1e6


def announce(connection: redis.Redis, namespace: str, kind: str, member: str, stale_seconds: float) -> None:
    """`member` is there now; members silent for `stale_seconds` are dropped."""
    now = _now(connection)
    key = keys.presence(namespace, kind)
    with connection.pipeline(transaction=False) as pipe:
        pipe.zadd(key, {member: now})
        pipe.zremrangebyscore(key, "-inf", now - stale_seconds)
        pipe.expire(key, max(1, int(stale_seconds * 2)))
        pipe.execute()


def withdraw(connection: redis.Redis, namespace: str, kind: str, member: str) -> None:
    connection.zrem(keys.presence(namespace, kind), member)


def present(connection: redis.Redis, namespace: str, kind: str, stale_seconds: float) -> bool:
    """Whether a process of `kind` said it was there within `stale_seconds`."""
    return connection.zcount(keys.presence(namespace, kind), _now(connection) - stale_seconds, "+inf") > 0


class Beacon(threading.Thread):
    """A thread that announces this process as `kind` every `every` seconds until `stop()`,
    which withdraws it. A Redis that does not answer is tried again at the next beat."""

    def __init__(self, connection: redis.Redis, namespace: str, kind: str, every: float, stale_seconds: float) -> None:
        super().__init__(name=f"oar-presence-{kind}", daemon=True)
        self.connection, self.namespace, self.kind = connection, namespace, kind
        self.every, self.stale_seconds = every, stale_seconds
        self.member = f"{socket.gethostname()}:{os.getpid()}"
        self._stopping = threading.Event()

    def run(self) -> None:
        while True:
            try:
                announce(self.connection, self.namespace, self.kind, self.member, self.stale_seconds)
            except redis.RedisError as error:
                log.debug("presence of %s not written: %s", self.kind, error)
            if self._stopping.wait(self.every):
                return

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)  # an announcement under way lands before the withdrawal
        with contextlib.suppress(redis.RedisError):
            withdraw(self.connection, self.namespace, self.kind, self.member)
