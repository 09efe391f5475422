"""`python app.py`: a complete relay in one command (docs/operations.md#running-the-relay).

Runs migrations, starts an embedded Redis (unless REDIS_URL is set), loads the code once and
forks from itself the RQ worker with the clock in its threads (as `oar worker --clock`; with
`OAR_WORKER_PROCESSES` above 1, a worker pool and the clock beside it) and the web server
(gunicorn with `gunicorn.conf.py`, the same settings as a bare `gunicorn wsgi:app`), so that they
share the pages of the modules (oar.engine.forked), prints where it listens and, the first time, the
owner token; stops its children on SIGINT/SIGTERM and restarts any that die.

Its children die with it even when it is killed (`oar.core.lifeline`), and it holds the
data directory's lock, stopping first whatever a previous launcher left running there
(`data_dir_lock`; docs/operations.md#when-the-launcher-dies).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import requests

from oar.core import lifeline, settings
from oar.core.config import Config, ConfigError, check, from_environment
from oar.core.db import database, open_database
from oar.engine import clock, embedded_web, worker
from oar.engine.data_dir_lock import AnotherLauncher, DataDirLock
from oar.engine.embedded_redis import EmbeddedRedis
from oar.engine.forked import ForkedChild, load_shared_code
from oar.owner.bootstrap import NewerSchema, ensure_owner_token, migrate

log = logging.getLogger("oar.launcher")
PROJECT = Path(__file__).resolve().parents[2]


class Child(Protocol):
    """What the launcher asks of a child: a program (`subprocess.Popen`) or a fork (`ForkedChild`)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, signum: int) -> None: ...


def main() -> int:
    config = from_environment()
    try:
        check(config)
    except ConfigError as error:
        print(f"oar serve: {error}", file=sys.stderr, flush=True)
        return 2
    config.data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(config.data_dir)
    try:
        lock.acquire()
    except AnotherLauncher as other:
        who = f"app.py, pid {other.pid}" if other.pid else "app.py"
        print(f"another relay ({who}) is running on the data directory {config.data_dir.resolve()}; "
              "stop it first, or give this one its own OAR_DATA_DIR", file=sys.stderr, flush=True)
        return 1
    try:
        return _run(config, lock)
    except NewerSchema as newer:
        print(f"oar serve: {newer}", file=sys.stderr, flush=True)
        return 1
    finally:
        lock.release()


def _run(config: Config, lock: DataDirLock) -> int:
    stopped = lock.stop_leftovers()
    if stopped:
        log.warning("stopped what a previous launcher left running: %s", ", ".join(stopped))
    if not _port_is_free(config.host, config.port):
        print(f"port {config.port} on {config.host} is in use by another program; "
              "stop it, or choose another PORT", file=sys.stderr, flush=True)
        return 1
    open_database(config)
    migrate()
    new_owner_token = ensure_owner_token(config)
    embedded = None if config.redis_url else EmbeddedRedis(config.data_dir)
    redis_url = embedded.url if embedded is not None else str(config.redis_url)
    # The children read their settings from the environment, as the Procfile's processes do.
    os.environ.update({
        "REDIS_URL": redis_url, "OAR_DATA_DIR": str(config.data_dir.resolve()),
        lifeline.LAUNCHER_PID_VARIABLE: str(os.getpid()),
    })
    load_shared_code()
    # The worker and the clock are given the relay's config as the children's environment now
    # says it; the web reads it from there (`wsgi:app`, as the Procfile's web does).
    launched = config.with_overrides(redis_url=redis_url, data_dir=config.data_dir.resolve())
    forks: dict[str, Callable[[], int | None]] = {
        "web": _serve_web, "worker": lambda: _work(launched, with_clock=True),
    }
    if config.worker_processes > 1:
        # A pool forks its workers, which a running clock thread must not be in (oar.engine.worker).
        forks.update(worker=lambda: _work(launched, with_clock=False), clock=lambda: _tick(launched))
    names = ["redis", *forks] if embedded is not None else list(forks)
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    children: dict[str, Child] = {}
    folders = [embedded.folder] if embedded is not None else []

    def start(name: str) -> Child:
        # Each child leads its own process group, so that stopping can reach all of it. It is
        # started from this (the main) thread: the kernel's parent-death signal follows the
        # thread that forked, and this one lives as long as the launcher; no other thread runs
        # at the fork.
        child: Child
        if name == "redis" and embedded is not None:
            child = subprocess.Popen(
                embedded.command, cwd=PROJECT, start_new_session=True,
                preexec_fn=lifeline.die_with_parent,  # no other thread runs at fork
                stdout=subprocess.DEVNULL,
            )
        else:
            held = lock.fileno()
            child = ForkedChild(forks[name], close=(held,) if held is not None else ())
        children[name] = child
        lock.record([(n, c.pid) for n, c in children.items()], folders)
        return child

    try:
        for name in names:
            child = start(name)
            if name == "redis" and embedded is not None and isinstance(child, subprocess.Popen):
                embedded.wait_until_ready(child)
        if _wait_until_healthy(config.host, config.port, stopping):
            with database.connection_context():
                name = settings.load(config)["relay_name"]
            print(f'OAR relay "{name}" listening on http://{config.host}:{config.port}', flush=True)
            if new_owner_token:
                print(f"Owner token (shown once; keep it): {new_owner_token}", flush=True)
        while not stopping.wait(1):
            for name, child in list(children.items()):
                if child.poll() is not None:
                    log.warning("%s exited with %s; restarting it", name, child.returncode)
                    start(name)
    finally:
        # Redis last: the worker and the clock stop more cleanly while it still answers.
        _stop_children([c for n, c in children.items() if n != "redis"])
        _stop_children([c for n, c in children.items() if n == "redis"])
        if embedded is not None:
            embedded.remove_folder()
    return 0


def _serve_web() -> int:
    return embedded_web.serve()


def _work(config: Config, with_clock: bool) -> int:
    worker.main(config, with_clock=with_clock)
    return 0


def _tick(config: Config) -> int:
    clock.main(config)
    return 0


def _port_is_free(host: str, port: int) -> bool:
    """Whether gunicorn can listen there (it binds with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _stop_children(children: list[Child]) -> None:
    """SIGTERM, then SIGTERM again, then SIGKILL to each child's process group.

    The first SIGTERM is a graceful stop: gunicorn finishes requests and an RQ worker lets
    running turns finish, each for up to 10 s (gunicorn's `graceful_timeout`, the worker's
    `SHUTDOWN_GRACE_SECONDS`). The second makes RQ workers shut down cold; turns still
    running then are failed by the reconciler once their heartbeat stops. Whatever is left
    after that is killed, with everything in its process group.
    """
    for step, grace in ((signal.SIGTERM, 12.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        running = [child for child in children if child.poll() is None]
        if not running:
            return
        for child in running:
            try:
                if step == signal.SIGKILL:
                    os.killpg(child.pid, step)
                else:
                    child.send_signal(step)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for child in running:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _wait_until_healthy(host: str, port: int, stopping: threading.Event) -> bool:
    url = f"http://{host}:{port}/healthz"
    while not stopping.is_set():
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        stopping.wait(0.2)
    return False
