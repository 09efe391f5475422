"""A task's folder is checked at every start and bound as the folder it was when checked
(docs/tasks.md#the-folder-a-task-runs-in): a folder that an agent's task swapped for a link runs
no task, a swap while a task runs or while its sandbox starts changes nothing, the data
directory is never a task's folder, and each session without a folder of its own works in one
of its own that no other session's task sees."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from oar.core.db import database
from oar.core.models import Session, Task
from oar.core.work_folders import RelayPlaces
from tests.support.clients import Agent, poll
from tests.support.relays import Relay, RelayStack, own_relay

MARKER = "the host's file outside every allowed root"


@dataclass
class Places:
    """An allowed root for the test's projects, and a folder outside every allowed root."""

    projects: Path
    outside: Path


@pytest.fixture
def places(relay: Relay, tmp_path: Path) -> Iterator[Places]:
    projects, outside = tmp_path / "projects", tmp_path / "outside"
    projects.mkdir()
    outside.mkdir()
    (outside / "marker.txt").write_text(MARKER + "\n")
    roots = relay.owner.get("/api/v1/owner/settings")["settings"]["allowed_roots"]
    relay.settings(allow_shell_tasks=True, allowed_roots=[*roots, str(projects)])
    yield Places(projects.resolve(), outside.resolve())


def finished(task_id: str) -> Task:
    def ended() -> Task | None:
        with database.connection_context():
            row = Task.get_by_id(task_id)
        return row if row.status != "running" else None

    return poll(f"task {task_id} to end", ended)


def run_task(agent: Agent, session: str, command: str) -> Task:
    """`!task command` in `session` (a prompt from `agent`), run to its end."""
    sent = agent.ok("send", relay="this", session=session, text=f"!task {command}", wait_seconds=30)
    assert sent["status"] == "done", sent
    task_id = sent["reply"]["text"].split("task ", 1)[1].split(" ", 1)[0]
    return finished(task_id)


def refused_task(agent: Agent, session: str, command: str) -> str:
    """`!task command` in `session`, refused before anything runs: the turn's error."""
    sent = agent.ok("send", relay="this", session=session, text=f"!task {command}", wait_seconds=30)
    assert sent["status"] == "failed", sent
    with database.connection_context():
        assert not Task.select().where(Task.session == session).exists()
    return str(sent["error"])


def output_of(task: Task) -> str:
    return Path(task.output_path).read_text(errors="replace") if Path(task.output_path).exists() else ""


def swap_command(folder: Path, target: Path) -> str:
    """A command that moves `folder` aside and puts a link to `target` in its place."""
    script = f"mv {shlex.quote(folder.name)} {shlex.quote(folder.name + '.real')} && ln -s {shlex.quote(str(target))} {shlex.quote(folder.name)}"
    return f"sh -c {shlex.quote(script)}"


PROBE = "sh -c " + shlex.quote("ls -A; cat marker.txt; echo planted > planted.txt; echo PROBE-END")


def test_a_folder_swapped_for_a_link_runs_no_task(relay: Relay, desk: Agent, places: Places) -> None:
    """The escape the review found: a task makes a folder, a session works there, a task swaps
    the folder for a link out of the allowed roots; the next task there must not follow it."""
    parent = desk.ok("create_session", relay="this", cwd=str(places.projects), text="hello", wait_seconds=30)["session"]
    made = run_task(desk, parent, "mkdir escproj")
    assert made.status == "completed", output_of(made)
    child = desk.ok("create_session", relay="this", cwd=str(places.projects / "escproj"), text="hello", wait_seconds=30)
    assert child["status"] == "done", child

    swapped = run_task(desk, parent, swap_command(places.projects / "escproj", places.outside))
    assert swapped.status == "completed", output_of(swapped)
    assert (places.projects / "escproj").is_symlink()

    error = refused_task(desk, child["session"], PROBE)
    escproj = places.projects / "escproj"
    assert error == (
        f"!task {PROBE}: The session's folder {escproj} has a link on its way ({escproj}), which the relay does "
        "not follow. Nothing was run."
    )
    assert not (places.outside / "planted.txt").exists()


def project(places: Places, name: str) -> Path:
    """A project folder under the allowed root, holding a file of its own."""
    folder = places.projects / name
    folder.mkdir()
    (folder / "original.txt").write_text("the project's own file\n")
    return folder


def swap(folder: Path, target: Path) -> None:
    """What a task in the folder above does: move `folder` aside, a link to `target` in its place."""
    folder.rename(folder.with_name(folder.name + ".real"))
    folder.symlink_to(target)


def test_a_swap_while_a_task_runs_leaves_it_in_its_folder(relay: Relay, desk: Agent, places: Places) -> None:
    folder = project(places, "running")
    session = desk.ok("create_session", relay="this", cwd=str(folder), text="hello", wait_seconds=30)["session"]
    waiting = "sh -c " + shlex.quote(
        "echo READY; while [ ! -e go ]; do sleep 0.05; done; ls -A; cat marker.txt; echo planted > planted.txt"
    )
    sent = desk.ok("send", relay="this", session=session, text=f"!task {waiting}", wait_seconds=30)
    task_id = sent["reply"]["text"].split("task ", 1)[1].split(" ", 1)[0]
    with database.connection_context():
        output = Path(Task.get_by_id(task_id).output_path)
    poll("the task to run in its sandbox", lambda: output.exists() and "READY" in output.read_text())

    swap(folder, places.outside)
    (folder.with_name("running.real") / "go").touch()
    task = finished(task_id)
    assert MARKER not in output_of(task) and "original.txt" in output_of(task), output_of(task)
    assert (folder.with_name("running.real") / "planted.txt").exists()
    assert not (places.outside / "planted.txt").exists()


@pytest.mark.parametrize("where", ["data dir", "a folder in the data dir", "the work folder"])
def test_the_data_dir_is_no_sessions_folder(relay: Relay, desk: Agent, places: Places, where: str) -> None:
    data_dir = relay.config.data_dir.resolve()
    relay.settings(allowed_roots=[str(data_dir.parent)])  # a root that holds the data dir
    folder = {"data dir": data_dir, "a folder in the data dir": data_dir / "tasks", "the work folder": data_dir / "work"}[where]
    reason = "holds every session's own folder" if where == "the work folder" else "is in the relay's data directory"
    body = desk.refused("create_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", cwd=str(folder), text="hi")
    assert body["error"] == f'The relay may not use folder "{folder}": it {reason}. Nothing was created.'
    status, body = relay.owner.request("POST", "/api/v1/owner/sessions", {"title": "x", "cwd": str(folder)})
    assert status == 400 and body["error"] == f'The relay may not use folder "{folder}": it {reason}. Nothing was created.'

    if where == "the work folder":
        return  # a session stored with it moves to its own (the test below)
    # A session that has such a folder (stored before these rules) runs no task there.
    with database.connection_context():
        Session.update(cwd=str(folder)).where(Session.id == desk.session_id).execute()
    status, body = desk.request("POST", "/api/v1/tasks", {"command": "ls -A"})
    assert status == 400 and body["code"] == "REMOTE_RELAY_INVALID_INPUT", body
    assert body["error"] == f"The session's folder {folder} {reason}. Nothing was run."
    with database.connection_context():
        assert Task.select().count() == 0


def test_no_sessions_folder_holds_the_folder_of_the_relays_redis_socket(relay: Relay, desk: Agent) -> None:
    """The relay's Redis listens on a unix socket in the machine's temporary folder (the embedded
    launcher's, as this relay's); a sandbox shares no network but reaches every socket it sees, and
    Redis runs jobs. An owner's root that holds that folder gives no session a folder holding it."""
    temp = Path(tempfile.gettempdir()).resolve()
    redis = urlsplit(relay.config.redis_url or "")
    sockets = Path(redis.path).parent if redis.scheme == "unix" else temp
    # The embedded Redis's socket is in a folder of its own in the temporary folder; a Redis
    # reached over TCP (the run on the machine's servers) has no socket, and the rule still holds.
    assert sockets.parent == temp or redis.scheme != "unix", relay.config.redis_url
    relay.settings(allow_shell_tasks=True, allowed_roots=[str(temp)])
    for folder, held in ((temp, temp), (sockets, sockets)):
        reason = f"it holds {held}, where the machine's services keep their sockets (the relay's Redis among them)"
        body = desk.refused("create_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", cwd=str(folder), text="hi")
        assert body["error"] == f'The relay may not use folder "{folder}": {reason}. Nothing was created.'
        status, body = relay.owner.request("POST", "/api/v1/owner/sessions", {"title": "x", "cwd": str(folder)})
        assert status == 400 and body["error"] == f'The relay may not use folder "{folder}": {reason}. Nothing was created.'
    # A session that has such a folder (stored before this rule) runs no task there.
    with database.connection_context():
        Session.update(cwd=str(temp)).where(Session.id == desk.session_id).execute()
    ping = "python -c " + shlex.quote(f"import socket; socket.socket(socket.AF_UNIX).connect({str(sockets / 'redis.socket')!r})")
    status, body = desk.request("POST", "/api/v1/tasks", {"command": ping})
    assert status == 400 and body["error"] == (
        f"The session's folder {temp} holds {temp}, where the machine's services keep their sockets "
        "(the relay's Redis among them). Nothing was run."
    ), body
    with database.connection_context():
        assert Task.select().count() == 0


def test_a_root_a_task_can_replace_moves_no_root(relay: Relay, desk: Agent, places: Places) -> None:
    """A root inside another root is a folder agents write in: replaced by a link, it must not
    make the link's target an allowed root."""
    inner = places.projects / "inner"
    inner.mkdir()
    roots = relay.owner.get("/api/v1/owner/settings")["settings"]["allowed_roots"]
    relay.settings(allowed_roots=[*roots, str(inner)])
    parent = desk.ok("create_session", relay="this", cwd=str(places.projects), text="hello", wait_seconds=30)["session"]
    assert run_task(desk, parent, swap_command(inner, places.outside)).status == "completed"
    assert inner.is_symlink()
    for folder in (places.outside, inner):
        body = desk.refused("create_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", cwd=str(folder), text="hi")
        assert body["error"] == f'The relay may not use folder "{folder}". Nothing was created.'


def test_each_session_works_in_a_folder_of_its_own(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    other = relay.conversation("other")
    work = relay.config.data_dir.resolve() / "work"
    listed = {entry["id"]: entry["cwd"] for entry in relay.owner.get("/api/v1/owner/sessions")["sessions"]}
    assert listed == {desk.session_id: str(work / desk.session_id), other.session_id: str(work / other.session_id)}

    wrote = other.post("/api/v1/tasks", {"command": "sh -c 'echo the other conversation > secret.txt; pwd'"})["task"]
    assert finished(wrote["taskId"]).status == "completed"
    own = work / other.session_id
    assert (own / "secret.txt").read_text() == "the other conversation\n"
    assert own.stat().st_mode & 0o777 == 0o700

    peek = f"sh -c 'pwd; ls -A ..; cat {own / 'secret.txt'} ../{other.session_id}/secret.txt'"
    read = finished(desk.post("/api/v1/tasks", {"command": peek})["task"]["taskId"])
    assert output_of(read).splitlines()[:2] == [str(work / desk.session_id), desk.session_id], output_of(read)
    assert "the other conversation" not in output_of(read)

    # Nobody names another session's own folder; a session a conversation starts gets its own.
    body = desk.refused("create_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", cwd=str(own), text="hi")
    assert body["error"] == (
        f'The relay may not use folder "{own}": it is a session\'s own folder, which only that session uses. '
        "Nothing was created."
    )
    child = desk.ok("create_session", relay="this", text="hi", wait_seconds=30)
    started = desk.ok("read_session", relay="this", session=child["session"])["session"]["settings"]
    assert started["cwd"] == str(work / child["session"]) and (work / child["session"]).is_dir()

    # A session that has another's own folder (stored before these rules) runs no task there.
    with database.connection_context():
        Session.update(cwd=str(own)).where(Session.id == desk.session_id).execute()
    status, body = desk.request("POST", "/api/v1/tasks", {"command": "cat secret.txt"})
    assert status == 400 and body["error"] == (
        f"The session's folder {own} is a session's own folder, which only that session uses. Nothing was run."
    )


def test_a_session_of_the_shared_work_folder_moves_to_its_own(relay: Relay, desk: Agent) -> None:
    """Before each session had its own folder, sessions given none shared `work/`: such a session
    works in its own from its next task or turn, and its agent session starts anew there."""
    relay.settings(allow_shell_tasks=True)
    work = relay.config.data_dir.resolve() / "work"
    with database.connection_context():
        Session.update(cwd=str(work), agent_session_id="agent-session-in-work").where(Session.id == desk.session_id).execute()
    task = finished(desk.post("/api/v1/tasks", {"command": "pwd"})["task"]["taskId"])
    assert output_of(task) == f"{work / desk.session_id}\n" and task.cwd == str(work / desk.session_id)
    with database.connection_context():
        moved = Session.get_by_id(desk.session_id)
    assert (moved.cwd, moved.agent_session_id) == (str(work / desk.session_id), None)


def test_a_sessions_own_folder_as_another_node_named_it_is_this_nodes() -> None:
    """Each node keeps a session's own folder under its own data directory (docs/operations.md#several-nodes):
    the path stored by the node that made the session is read as this node's; nothing else is."""
    here = RelayPlaces(data_dir="/srv/south", work="/srv/south/work")
    mine, other = "0123456789abcdef", "fedcba9876543210"
    assert here.here(mine, f"/var/north/work/{mine}") == f"/srv/south/work/{mine}"
    assert here.here(mine, f"/srv/south/work/{mine}") == f"/srv/south/work/{mine}"
    assert here.here(mine, f"/var/north/work/{other}") == f"/var/north/work/{other}"  # another session's stays its own
    assert here.here(mine, "/srv/projects/app") == "/srv/projects/app"


@pytest.fixture
def own_places(tmp_path: Path) -> Places:
    projects, outside = tmp_path / "projects", tmp_path / "outside"
    (projects / "escproj").mkdir(parents=True)
    (projects / "escproj" / "original.txt").write_text("the project's own file\n")
    outside.mkdir()
    (outside / "marker.txt").write_text(MARKER + "\n")
    return Places(projects.resolve(), outside.resolve())


def ended_in(stack: RelayStack, task_id: str) -> Task:
    def ended() -> Task | None:
        with database.connection_context():
            row = Task.get_by_id(task_id)
        return row if row.status != "running" else None

    stack.bind_database()
    return poll(f"task {task_id} to end", ended)


def test_a_swap_after_the_check_before_the_sandbox_binds_changes_nothing(tmp_path: Path, own_places: Places) -> None:
    """The window between the worker's check and bwrap's mounts: a bwrap that swaps the folder for
    a link just before it starts (as a task in the folder above could) still binds the folder
    that was checked."""
    folder, trigger = own_places.projects / "escproj", tmp_path / "swap-once"
    wrapper = tmp_path / "bwrap-that-swaps"
    q = shlex.quote
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --chdir "*) if mv {q(str(trigger))} {q(str(trigger))}.taken 2>/dev/null; then '
        f"mv {q(str(folder))} {q(str(folder))}.real && ln -s {q(str(own_places.outside))} {q(str(folder))}; fi;; esac\n"
        f'exec {q(str(shutil.which("bwrap")))} "$@"\n'
    )
    wrapper.chmod(0o755)
    with own_relay(tmp_path / "relay", worker=False) as stack:
        assert stack.relay is not None
        stack.relay.settings(allow_shell_tasks=True, allowed_roots=[str(own_places.projects)])
        agent = stack.relay.conversation("desk", cwd=str(folder))
        stack.start_worker(OAR_BWRAP=str(wrapper))
        trigger.touch()
        task = ended_in(stack, agent.post("/api/v1/tasks", {"command": PROBE})["task"]["taskId"])
    assert folder.is_symlink() and not trigger.exists()  # the swap happened, between check and mount
    assert MARKER not in output_of(task) and "original.txt" in output_of(task), output_of(task)
    assert (own_places.projects / "escproj.real" / "planted.txt").exists()
    assert not (own_places.outside / "planted.txt").exists()


def test_a_swap_before_the_worker_starts_the_task_runs_nothing(tmp_path: Path, own_places: Places) -> None:
    """The task was recorded while its folder was a folder; by the time a worker takes it, a link:
    the worker's own check refuses it."""
    folder = own_places.projects / "escproj"
    with own_relay(tmp_path / "relay", worker=False) as stack:
        assert stack.relay is not None
        stack.relay.settings(allow_shell_tasks=True, allowed_roots=[str(own_places.projects)])
        agent = stack.relay.conversation("desk", cwd=str(folder))
        task_id = agent.post("/api/v1/tasks", {"command": PROBE})["task"]["taskId"]
        swap(folder, own_places.outside)
        stack.start_worker()
        task = ended_in(stack, task_id)
    assert task.status == "failed" and task.error == (
        f"The command could not be started: the session's folder {folder} has a link on its way ({folder}), "
        "which the relay does not follow. Nothing was run."
    )
    assert MARKER not in output_of(task)
    assert not (own_places.outside / "planted.txt").exists()


def test_a_task_above_the_data_dir_cannot_move_it(tmp_path: Path) -> None:
    """A session whose folder holds the data dir further down: the folders on the way to it are
    pinned, so a task can neither see the data dir nor move it (and a link in its place would
    carry the cover elsewhere)."""
    with own_relay(tmp_path / "deep") as stack:
        assert stack.relay is not None
        data_dir = stack.relay.config.data_dir.resolve()
        assert data_dir.parent.parent == tmp_path.resolve()
        stack.relay.settings(allow_shell_tasks=True, allowed_roots=[str(tmp_path)])
        agent = stack.relay.conversation("desk", cwd=str(tmp_path))
        move = "sh -c " + shlex.quote(f"ls -A deep/{data_dir.name}; mv deep moved; echo moved=$?; mv deep/{data_dir.name} deep/gone; echo gone=$?")
        task = ended_in(stack, agent.post("/api/v1/tasks", {"command": move})["task"]["taskId"])
        assert data_dir.is_dir() and not (tmp_path / "moved").exists() and not (data_dir.parent / "gone").exists()
        lines = output_of(task).splitlines()
        assert "moved=1" in lines and "gone=1" in lines, lines
        assert lines[0].startswith("mv:"), lines  # the data dir is covered: nothing listed
