"""Configuration: documented defaults, then the environment, then a caller's overrides.

Every setting has a default that gives a complete embedded relay with no configuration
(docs/operations.md#running-the-relay). Time constants of ``oar.defaults`` are read from ``OAR_<NAME>`` as well.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from oar.core import defaults

# Time constants that the environment may override (docs/limits.md#time-constants).
TUNABLE_TIMES = (
    "TURN_HEARTBEAT_SECONDS",
    "TURN_STALE_SECONDS",
    "RECONCILE_SECONDS",
    "PARTIAL_WRITE_SECONDS",
    "STOP_POLL_SECONDS",
    "WAIT_RECHECK_SECONDS",
    "RATE_WINDOW_SECONDS",
    "TASK_HEARTBEAT_SECONDS",
    "BACKGROUND_QUIET_SECONDS",
    "TASK_STALE_SECONDS",
    "TASK_KILL_GRACE_SECONDS",
    "TASK_OUTPUT_KEEP_SECONDS",
    "SCHEDULE_HOLD_RECHECK_SECONDS",
    "SCHEDULE_ENDED_LISTED_SECONDS",
    "SCHEDULE_MINUTE_SECONDS",
    "DELIVERY_WINDOW_SECONDS",
    "DELIVERY_CAP_HOUR_SECONDS",
    "DELIVERY_CAP_DIGEST_SECONDS",
    "DELIVERY_MINUTE_SECONDS",
    "STALLED_DEFAULT_MINUTES",
    "INGEST_PAUSE_SECONDS",
    "DELIVERY_LOCK_SECONDS",
    "SUBSCRIPTION_ENDED_LISTED_SECONDS",
    "PROVIDER_CONNECT_TIMEOUT_SECONDS",
    "PROVIDER_READ_TIMEOUT_SECONDS",
    "CARD_EXPIRY_SECONDS",
    "CARD_WAITER_LEASE_SECONDS",
    "MCP_MAX_WAIT_SECONDS",
    "SQLITE_BUSY_SECONDS",
)


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = Path("./var")
    database_url: str | None = None  # None: SQLite file in the data directory
    redis_url: str | None = None  # None: the embedded Redis (python app.py only)
    owner_token: str | None = None  # None: generated once, printed, stored hashed
    relay_name: str = field(default_factory=socket.gethostname)
    public_url: str | None = None
    # Prefix of every Redis key and queue name, so several relays (or test runs) can
    # share one Redis server.
    namespace: str = "oar"
    # RQ worker processes of `oar worker`, and turns each runs at once (in threads).
    worker_processes: int = 2
    worker_threads: int = 32
    times: Mapping[str, float] = field(default_factory=dict)

    def time(self, name: str) -> float:
        """A time constant of ``oar.defaults``, as overridden by the environment."""
        return self.times.get(name, getattr(defaults, name))

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "oar.db"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    def with_overrides(self, **overrides: Any) -> Config:
        return replace(self, **overrides)


def from_environment(environ: Mapping[str, str] | None = None) -> Config:
    env = os.environ if environ is None else environ
    times = {name: float(env[f"OAR_{name}"]) for name in TUNABLE_TIMES if env.get(f"OAR_{name}")}
    base = Config()
    return Config(
        host=env.get("OAR_HOST") or base.host,
        port=int(env.get("PORT") or base.port),
        data_dir=Path(env.get("OAR_DATA_DIR") or base.data_dir),
        database_url=env.get("DATABASE_URL") or None,
        redis_url=env.get("REDIS_URL") or None,
        owner_token=env.get("OAR_OWNER_TOKEN") or None,
        relay_name=env.get("OAR_RELAY_NAME") or base.relay_name,
        public_url=env.get("OAR_PUBLIC_URL") or None,
        namespace=env.get("OAR_NAMESPACE") or base.namespace,
        worker_processes=int(env.get("OAR_WORKER_PROCESSES") or base.worker_processes),
        worker_threads=int(env.get("OAR_WORKER_THREADS") or base.worker_threads),
        times=times,
    )


CONFIG_FIELDS = tuple(f.name for f in fields(Config))
