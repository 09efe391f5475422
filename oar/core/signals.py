"""Wake-up signals over Redis pub/sub.

A waiting call registers interest in a channel and sleeps on a `threading.Event`; one
listener thread per process receives every wake-up of this relay's namespace and sets the
matching events. Signals only say "look again": the database holds what changed, so a
lost signal (Redis restarted) costs at most one re-check interval, never data.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import redis

from oar.core import keys

log = logging.getLogger(__name__)


def publish(connection: redis.Redis, channel: str) -> None:
    """Best effort: a waiter that misses this finds the change on its next re-check."""
    try:
        connection.publish(channel, b"1")
    except redis.RedisError as error:
        log.warning("wake-up signal %s not sent: %s", channel, error)


class WakeHub:
    """One pub/sub listener per process, fanning wake-ups out to waiting threads."""

    def __init__(self, connection: redis.Redis, namespace: str) -> None:
        self._connection = connection
        self._pattern = keys.wake_pattern(namespace)
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, *channels: str) -> Iterator[threading.Event]:
        """An event set whenever one of `channels` is signalled while the block runs."""
        self._ensure_listening()
        event = threading.Event()
        with self._lock:
            for channel in channels:
                self._waiters[channel].add(event)
        try:
            yield event
        finally:
            with self._lock:
                for channel in channels:
                    waiters = self._waiters.get(channel)
                    if waiters is not None:
                        waiters.discard(event)
                        if not waiters:
                            del self._waiters[channel]

    def _ensure_listening(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._listen_forever, name="oar-wake-hub", daemon=True)
                self._thread.start()
        # A signal sent before the subscription is active would be missed; waiters read
        # the database after registering, so only this first start needs to wait.
        self._subscribed.wait(timeout=2)

    def _listen_forever(self) -> None:
        failures = 0
        while True:
            try:
                pubsub = self._connection.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(self._pattern)
                self._subscribed.set()
                failures = 0
                self._wake_all()  # whatever happened while we were disconnected
                for message in pubsub.listen():
                    if message.get("type") == "pmessage":
                        self._wake(message["channel"].decode())
            except (redis.RedisError, OSError, ValueError) as error:
                # Said once per outage, not once a second while it lasts.
                (log.warning if failures == 0 else log.debug)("wake-up listener lost Redis (%s); reconnecting", error)
                failures += 1
                self._subscribed.set()  # waiters fall back to periodic re-checks
                time.sleep(1)

    def _wake(self, channel: str) -> None:
        with self._lock:
            events = list(self._waiters.get(channel, ()))
        for event in events:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            events = [event for waiters in self._waiters.values() for event in waiters]
        for event in events:
            event.set()
