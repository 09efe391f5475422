"""The running relay in one process: configuration, Redis, the wake-up hub and the queue.

Built once per process (web, worker, clock); nothing connects until first use, so a
worker can fork after building it.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from rq import Queue

from oar.core import keys, settings
from oar.core.config import Config
from oar.core.signals import WakeHub, publish


def _require_redis_url(config: Config) -> str:
    if not config.redis_url:
        raise RuntimeError(
            "REDIS_URL is not set. Start the embedded relay with `python app.py`, or set "
            "REDIS_URL (for example redis://127.0.0.1:6379/0)."
        )
    return config.redis_url


class Runtime:
    def __init__(self, config: Config, *, needs_redis: bool = True) -> None:
        """`needs_redis=False` is for a command that only touches the database (`oar token`
        beside an embedded relay, whose Redis URL is known only to the relay's own processes):
        such a runtime refuses when Redis is first asked for, not when it is built."""
        if needs_redis:
            _require_redis_url(config)
        self.config = config
        self._redis: redis.Redis | None = None
        self._hub: WakeHub | None = None
        self._lock = threading.Lock()
        self._settings = settings.Cached(config)

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(
                _require_redis_url(self.config), socket_connect_timeout=2, health_check_interval=30
            )
        return self._redis

    @property
    def hub(self) -> WakeHub:
        with self._lock:
            if self._hub is None:
                self._hub = WakeHub(self.redis, self.config.namespace)
            return self._hub

    @property
    def queue(self) -> Queue:
        return Queue(self.config.namespace, connection=self.redis)

    def time(self, name: str) -> float:
        return self.config.time(name)

    def settings(self, stored_version: Any = settings.UNREAD) -> dict[str, Any]:
        """The owner settings (`stored_version`: see `settings.Cached.get`)."""
        return self._settings.get(stored_version)

    def relay_name(self) -> str:
        return self.settings()["relay_name"]

    def open_url(self, session_id: str) -> str:
        return f"{self.config.base_url}/sessions/{session_id}"

    def signal_turn(self, message_id: str) -> None:
        publish(self.redis, keys.turn_channel(self.config.namespace, message_id))

    def signal_due(self) -> None:
        """A due time was written (after commit): the clock's timer may have to wake earlier
        than it planned (docs/schedules.md#when-a-schedule-fires)."""
        publish(self.redis, keys.due_channel(self.config.namespace))
