"""Configuration: documented defaults, then the environment, then a caller's overrides.

Every setting has a default that gives a complete embedded relay with no configuration
(docs/operations.md#running-the-relay). Time constants of ``oar.core.defaults`` are read from ``OAR_<NAME>`` as well.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    "TASK_OUTPUT_COPY_SECONDS",
    "ALIVE_SECONDS",
    "ALIVE_STALE_SECONDS",
    "HEALTH_REUSE_SECONDS",
    "TASK_MINUTE_SECONDS",
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
    "DELIVERY_LINES_SHOWN",
    "SUBSCRIPTION_ENDED_LISTED_SECONDS",
    "PRUNE_EVERY_SECONDS",
    "PRUNE_PAUSE_SECONDS",
    "HELD_KEEP_SECONDS",
    "EVENT_KEEP_SECONDS",
    "PROVIDER_CONNECT_TIMEOUT_SECONDS",
    "PEER_CONNECT_TIMEOUT_SECONDS",
    "PEER_READ_MARGIN_SECONDS",
    "PEER_PING_TIMEOUT_SECONDS",
    "PEER_ASK_POLL_SECONDS",
    "PEER_ASK_RETRY_SECONDS",
    "PEER_EVENTS_POLL_SECONDS",
    "PEER_LINK_LOST_SECONDS",
    "PEER_OUTBOX_KEEP_SECONDS",
    "PROVIDER_READ_TIMEOUT_SECONDS",
    "CARD_EXPIRY_SECONDS",
    "CARD_WAITER_LEASE_SECONDS",
    "TEAM_THOUGHTS_KEEP_SECONDS",
    "MCP_MAX_WAIT_SECONDS",
    "MCP_TASK_TTL_SECONDS",
    "MCP_TASK_LEASE_SECONDS",
    "REQUEST_HEAD_TIMEOUT_SECONDS",
    "REQUEST_BODY_TIMEOUT_SECONDS",
    "WAIT_SLOT_LEASE_SECONDS",
    "SQLITE_BUSY_SECONDS",
    "SQLITE_CHECKPOINT_SECONDS",
    "NOTIFY_MERGE_SECONDS",
    "NOTIFY_RETRY_SECONDS",
    "NOTIFY_SEND_LEASE_SECONDS",
    "NOTIFY_SEND_TIMEOUT_SECONDS",
)


# What a program the relay starts for an agent (an agent's CLI, a task outside the sandbox) gets
# of the relay's own environment: where programs are, who and where the user is, the locale and
# the terminal. No secret lives in these; the relay's settings and keys (OAR_*, DATABASE_URL,
# REDIS_URL, provider keys) never pass (docs/providers.md#the-agents-environment).
KEPT_FOR_CHILDREN = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
KEPT_FOR_CHILDREN_PREFIXES = ("LC_",)


def environment_for_children(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of the relay's environment (`environ`: os.environ by default) that a program
    it starts for an agent may see: `KEPT_FOR_CHILDREN`, and `LC_*`."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in env.items() if name in KEPT_FOR_CHILDREN or name.startswith(KEPT_FOR_CHILDREN_PREFIXES)}


# An owner token set in the environment must be at least this long and hold at least this
# many different characters (docs/operations.md#security): "changeme" or "aaaa…" is refused.
OWNER_TOKEN_MIN_CHARS = 32
OWNER_TOKEN_MIN_DISTINCT = 10


# The checkout this package runs from: the folder that holds `app.py` beside `oar/`.
CHECKOUT = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path:
    """`var/` in the checkout the relay runs from, wherever it is started: the relay and its
    command line (`oar token`, `oar pair`, run from any folder) find the same database
    (docs/operations.md#environment). A package installed elsewhere has no checkout: `./var`."""
    return CHECKOUT / "var" if (CHECKOUT / "app.py").is_file() else Path("var")


# What OAR_METRICS may say (docs/operations.md#watching-it).
METRICS_CHOICES = ON_OFF = ("on", "off")


class ConfigError(ValueError):
    """A setting the relay refuses to start with; the message says which and what to do."""


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = field(default_factory=default_data_dir)
    database_url: str | None = None  # None: SQLite file in the data directory
    redis_url: str | None = None  # None: the embedded Redis (python app.py only)
    owner_token: str | None = None  # None: generated once, printed, stored hashed
    relay_name: str = field(default_factory=socket.gethostname)
    public_url: str | None = None
    # Proxies in front of the web server whose X-Forwarded-For/-Proto are believed (0: none):
    # only then does a request forwarded from https count as https (docs/operations.md#behind-a-proxy).
    trust_proxy: int = 0
    # Prefix of every Redis key and queue name, so several relays (or test runs) can
    # share one Redis server.
    namespace: str = "oar"
    # RQ worker processes of `oar worker`, and turns each runs at once (in threads): 64 turns at
    # once in one process, which idles at a quarter of four processes' memory; a relay whose
    # turns often end together runs 4 × 16, where a turn ending beside others waits for the GIL
    # behind 15 threads, not 63 (docs/decisions.md#one-worker-process).
    worker_processes: int = 1
    worker_threads: int = 64
    # "on": each worker process keeps to a core of its own while one is free, "off": where the
    # system puts it (docs/operations.md#a-worker-on-one-core).
    worker_own_core: str = "on"
    # Calls of one conversation waiting at once (0: no cap).
    max_waits_per_conversation: int = defaults.MAX_WAITS_PER_CONVERSATION
    times: Mapping[str, float] = field(default_factory=dict)
    # The bubblewrap binary tasks run under (docs/tasks.md#the-sandbox); None: `bwrap` on PATH.
    bwrap: str | None = None
    # `GET /metrics` and the figures behind it (docs/operations.md#watching-it): "on" or "off"
    # (OAR_METRICS, checked at start). Read by every process as it starts: counting needs a
    # folder of its own before the first figure is written, which an owner setting could not give.
    metrics: str = "off"
    # A bearer token for `/metrics` only, beside the owner token (None: the owner token only).
    metrics_token: str | None = None
    # Where the processes of this machine write their figures (PROMETHEUS_MULTIPROC_DIR);
    # None: `metrics/` in the data directory.
    metrics_dir: Path | None = None

    def time(self, name: str) -> float:
        """A time constant of ``oar.core.defaults``, as overridden by the environment."""
        return self.times.get(name, getattr(defaults, name))

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "oar.db"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def metrics_on(self) -> bool:
        return self.metrics == "on"

    @property
    def metrics_folder(self) -> Path:
        return self.metrics_dir or self.data_dir / "metrics"

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
        trust_proxy=int(env.get("OAR_TRUST_PROXY") or base.trust_proxy),
        namespace=env.get("OAR_NAMESPACE") or base.namespace,
        worker_processes=int(env.get("OAR_WORKER_PROCESSES") or base.worker_processes),
        worker_threads=int(env.get("OAR_WORKER_THREADS") or base.worker_threads),
        worker_own_core=(env.get("OAR_WORKER_OWN_CORE") or base.worker_own_core).strip().lower(),
        max_waits_per_conversation=int(env.get("OAR_MAX_WAITS_PER_CONVERSATION") or base.max_waits_per_conversation),
        times=times,
        bwrap=env.get("OAR_BWRAP") or None,
        metrics=(env.get("OAR_METRICS") or base.metrics).strip().lower(),
        metrics_token=env.get("OAR_METRICS_TOKEN") or None,
        metrics_dir=Path(env["PROMETHEUS_MULTIPROC_DIR"]) if env.get("PROMETHEUS_MULTIPROC_DIR") else None,
    )


def owner_token_problem(token: str) -> str | None:
    """Why `token` is too weak to be the owner token, or None when it will do."""
    if len(token) < OWNER_TOKEN_MIN_CHARS:
        return f"it is {len(token)} characters long; the relay needs at least {OWNER_TOKEN_MIN_CHARS}"
    if len(set(token)) < OWNER_TOKEN_MIN_DISTINCT:
        return f"it has only {len(set(token))} different characters; the relay needs at least {OWNER_TOKEN_MIN_DISTINCT}"
    return None


def check(config: Config) -> None:
    """Refuse to start with a guessable owner token (raises ConfigError saying what to do)."""
    problem = owner_token_problem(config.owner_token) if config.owner_token else None
    if problem:
        raise ConfigError(
            f"OAR_OWNER_TOKEN is too weak: {problem}. Set it to a random value, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`, or leave it unset and the relay "
            "generates one and prints it once. The relay did not start."
        )
    if config.metrics not in METRICS_CHOICES:
        raise ConfigError(f"OAR_METRICS must be on or off, not {config.metrics[:40]!r}. The relay did not start.")
    if config.worker_own_core not in ON_OFF:
        raise ConfigError(
            f"OAR_WORKER_OWN_CORE must be on or off, not {config.worker_own_core[:40]!r}. The relay did not start."
        )
    weak_metrics = owner_token_problem(config.metrics_token) if config.metrics_token else None
    if weak_metrics:
        raise ConfigError(
            f"OAR_METRICS_TOKEN is too weak: {weak_metrics}. Set it to a random value, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`. The relay did not start."
        )
    if config.trust_proxy < 0:
        raise ConfigError("OAR_TRUST_PROXY must be 0 (no proxy) or the number of proxies in front. The relay did not start.")

