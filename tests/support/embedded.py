"""`python app.py` as a user starts it (the embedded relay), its stdout read line by line."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import secrets
import threading
import time
from pathlib import Path

import psutil

from tests.support.processes import ManagedProcess

LISTENING = re.compile(r'^OAR relay "(?P<name>[^"]+)" listening on (?P<url>http://\S+)$')
OWNER_TOKEN = re.compile(r"^Owner token \(shown once; keep it\): (?P<token>\S+)$")


def embedded_environment(data_dir: Path, port: int, name: str, stale_seconds: int) -> dict[str, str]:
    """The user's environment without any relay setting, plus the few a test sets."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OAR_")}
    for key in ("REDIS_URL", "DATABASE_URL", "PORT", "WEB_CONCURRENCY"):
        env.pop(key, None)
    env.update(
        OAR_DATA_DIR=str(data_dir),
        PORT=str(port),
        OAR_RELAY_NAME=name,
        WEB_CONCURRENCY="2",
        OAR_LOG_LEVEL="WARNING",
        OAR_TURN_HEARTBEAT_SECONDS="0.5",
        OAR_TURN_STALE_SECONDS=str(stale_seconds),
        OAR_RECONCILE_SECONDS="0.5",
        OAR_STOP_POLL_SECONDS="0.5",
        PYTHONUNBUFFERED="1",
    )
    return env


class Launcher:
    """`python app.py` in its own process group, with its stdout read line by line."""

    def __init__(self, data_dir: Path, port: int, name: str, stale_seconds: int) -> None:
        self.managed = ManagedProcess(
            "app.py", ["app.py"], embedded_environment(data_dir, port, name, stale_seconds),
            log=data_dir / f"launcher-{secrets.token_hex(3)}.log", pipe_stdout=True,
        )
        self.process = self.managed.popen
        self.data_dir = data_dir
        self.lines: list[str] = []
        # Every child seen, so that cleanup reaches those that outlived a killed launcher.
        self.seen: list[psutil.Process] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def next_line(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        """The next stdout line matching `pattern` (others are kept in `lines`)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern.pattern!r} within {timeout} s; stdout: {self.lines}; {self.log()}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"app.py exited ({self.process.poll()}) before printing {pattern.pattern!r}; stdout: {self.lines}; {self.log()}")
            self.lines.append(line)
            match = pattern.match(line)
            if match:
                return match

    def rest_of_stdout(self, timeout: float) -> list[str]:
        """Every remaining stdout line, up to EOF (the launcher and its children have exited)."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "stdout stayed open: a child of app.py still holds it"
        while True:
            line = self._queue.get_nowait()
            if line is None:
                return self.lines
            self.lines.append(line)

    def log(self) -> str:
        return "stderr tail: " + self.managed.log()

    def descendants(self) -> list[psutil.Process]:
        """The launcher's children and theirs, plus the embedded redis-server (wherever it runs)."""
        found = self.managed.tree()[1:]
        sockets = set()
        for child in found:
            try:
                url = child.environ().get("REDIS_URL", "")
            except psutil.Error:
                continue
            if url.startswith("unix://"):
                sockets.add(url.removeprefix("unix://"))
        for candidate in psutil.process_iter(["cmdline"]):
            cmdline = candidate.info["cmdline"] or []
            if any(arg.startswith("unixsocket:") and arg.removeprefix("unixsocket:") in sockets for arg in cmdline):
                if candidate not in found:
                    found.append(candidate)
        self.seen.extend(p for p in found if p not in self.seen)
        return found

    def roles(self) -> dict[str, psutil.Process]:
        """The children the launcher started, by the names it records in launcher.json (web, worker,
        redis): the web and the worker are forks of the launcher, with its command line."""
        record = json.loads((self.data_dir / "launcher.json").read_text())
        return {child["name"]: psutil.Process(child["pid"]) for child in record["children"]}

    def kill_everything(self) -> None:
        """Last resort cleanup: the process group and every child seen, also those that outlived the launcher."""
        with contextlib.suppress(psutil.Error):
            self.descendants()
        leftovers = list(self.seen)
        self.managed.kill()
        for process in leftovers:
            with contextlib.suppress(psutil.Error):
                process.kill()
