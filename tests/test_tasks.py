"""Background tasks over the real stack (docs/concepts.md#background-tasks, docs/tasks.md#shown-where, docs/tasks.md#read_task_output, docs/providers.md `!task`): echo's `!task`,
the agent API for an agent's own tasks, read_task_output, states, events, stop and archive,
and a task whose worker died."""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from oar.background.task_recovery import ORPHANED_TEXT
from oar.core.db import database
from oar.core.models import Event, Session, Task
from oar.core.settings import default_cwd
from oar.core.timeutil import utcnow
from oar.engine.reconciler import reconcile
from tests.support.clients import Agent, poll
from tests.support.relays import FAST_TIMES, Relay

NOT_FOUND = "REMOTE_RELAY_NOT_FOUND"


def task_in(desk: Agent, session: str) -> dict[str, Any]:
    return desk.ok("read_session", relay="this", session=session)["tasks"][0]


def ended(desk: Agent, session: str, task_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body = desk.ok("read_task_output", relay="this", session=session, task_id=task_id)
        return body if body["task"]["status"] != "running" else None

    return poll(f"task {task_id} to end", check)


def events_of(session: str) -> list[tuple[str, dict[str, Any]]]:
    """The session's task events and its idle transitions, in order (turn events left out)."""
    with database.connection_context():
        rows = Event.select().where((Event.session == session) & (Event.kind != "turn_end")).order_by(Event.seq)
        return [(e.kind, e.payload) for e in rows]


def test_with_the_setting_off_task_fails_the_turn_and_runs_nothing(relay: Relay, desk: Agent, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    body = desk.ok("create_session", relay="this", text=f"!task touch {marker}", wait_seconds=30)
    assert body["status"] == "failed"
    assert "allow_shell_tasks is off" in body["error"] and "Nothing was run." in body["error"]
    assert not marker.exists()
    with database.connection_context():
        assert Task.select().count() == 0


def session_folder(relay: Relay, name: str) -> Path:
    """A fresh folder in the sessions' default folder, the one place a task can see and write."""
    folder = default_cwd(relay.config).resolve() / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_echo_task_runs_in_the_background_and_the_output_is_read_as_the_console_shows_it(
    relay: Relay, desk: Agent
) -> None:
    relay.settings(allow_shell_tasks=True)
    folder = session_folder(relay, "echo-task")
    gate = folder / "go"
    script = folder / "job.py"
    script.write_text(
        "import pathlib, sys, time\n"
        "print('\\x1b[32mstarting\\x1b[0m', flush=True)\n"
        "for _ in range(3):\n    print('same line', flush=True)\n"
        "print('token=abc123secret password: hunter2 sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA', flush=True)\n"
        f"while not pathlib.Path({str(gate)!r}).exists():\n    time.sleep(0.05)\n"
        "print('4 passed, 1 failed', flush=True)\n"
        "sys.exit(3)\n"
    )
    import sys

    created = desk.ok(
        "create_session", relay="this", cwd=str(folder), text=f"build it\n!task {sys.executable} {script}", wait_seconds=30
    )
    assert created["status"] == "done", created
    session = created["session"]
    task_id = created["reply"]["text"].split("task ", 1)[1].split(" ", 1)[0]
    assert created["reply"]["text"] == f"echo: build it\ntask {task_id} started: {sys.executable} {script}"

    # The turn is done; the task goes on: the session is background_only.
    listed = desk.ok("list_sessions", relay="this")["sessions"]
    entry = next(s for s in listed if s["id"] == session)
    assert entry["state"] == "background_only"
    assert entry["tasks"][0]["taskId"] == task_id and entry["tasks"][0]["status"] == "running"
    assert entry["tasks"][0]["type"] == "local_bash" and entry["tasks"][0]["output"] == "read_task_output"
    assert set(entry["tasks"][0]["health"]) == {"minutesSinceOutput", "since", "quiet", "quietAfterMinutes"}

    def masked_tail() -> dict[str, Any] | None:
        body = desk.ok("read_task_output", relay="this", session=session, task_id=task_id)
        return body if any("password" in line for line in body["tail"]) else None

    running = poll("the task's output", masked_tail)
    assert running["tail"] == [
        "starting",
        "same line [×3]",
        "token=**** password: **** sk-ant-****",
    ]
    assert running["truncated"] is False and running["task"]["status"] == "running"
    assert running["stall"]["quiet"] is False and running["stall"]["quietAfterMinutes"] == 10
    assert running["summary"].startswith(f"read_task_output → desk session {session[:8]} task {task_id}: 3 lines, running")
    assert desk.ok("read_session", relay="this", session=session)["state"] == "background_only"

    gate.touch()
    done = ended(desk, session, task_id)
    assert done["task"]["status"] == "failed" and done["task"]["exitCode"] == 3
    assert done["counts"] == {"runner": "plain", "passed": 4, "failed": 1, "skipped": 0, "final": True}
    assert "stall" not in done
    assert done["summary"].endswith("4 lines, failed (exit 3), plain 4 passed, 1 failed, 0 skipped")
    assert desk.ok("read_session", relay="this", session=session)["state"] == "idle"
    kinds = [kind for kind, _ in events_of(session)]
    assert kinds == ["task_started", "task_finished", "task_failed", "session_idle"]
    assert events_of(session)[2][1] == {
        "taskId": task_id, "description": f"{sys.executable} {script}", "type": "local_bash",
        "status": "failed", "exitCode": 3,
    }


def test_a_successful_task_finishes_without_task_failed_and_runs_in_the_sessions_folder(
    relay: Relay, desk: Agent
) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task pwd", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    done = ended(desk, session, task_id)
    assert done["task"]["status"] == "completed" and done["task"]["exitCode"] == 0
    cwd = desk.ok("read_session", relay="this", session=session)["session"]["settings"]["cwd"]
    assert done["tail"] == [str(default_cwd(relay.config).resolve() / session)] == [cwd]
    assert [kind for kind, _ in events_of(session)] == ["task_started", "task_finished", "session_idle"]


def test_commands_are_argument_lists_unless_the_owner_allows_a_shell(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    marker = session_folder(relay, "argument-lists") / "injected"
    created = desk.ok("create_session", relay="this", text=f"!task echo hi; touch {marker}", wait_seconds=30)
    session = created["session"]
    done = ended(desk, session, task_in(desk, session)["taskId"])
    assert done["tail"] == [f"hi; touch {marker}"] and not marker.exists()

    relay.settings(shell_tasks_via_shell=True)
    shelled = desk.ok("send", relay="this", session=session, text="!task echo one && echo two | tr a-z A-Z", wait_seconds=30)
    assert shelled["status"] == "done"
    task_id = next(t["taskId"] for t in desk.ok("read_session", relay="this", session=session)["tasks"] if t["status"] == "running" or t["description"].startswith("echo one"))
    assert ended(desk, session, task_id)["tail"] == ["one", "TWO"]


def test_an_agent_starts_and_stops_its_own_tasks_through_the_api(relay: Relay, desk: Agent) -> None:
    status, refused = desk.request("POST", "/api/v1/tasks", {"command": "sleep 30"})
    assert status == 403 and refused["code"] == "REMOTE_RELAY_FORBIDDEN" and "allow_shell_tasks" in refused["error"]
    relay.settings(allow_shell_tasks=True)
    status, bad = desk.request("POST", "/api/v1/tasks", {"command": "sleep 30", "shell": True})
    assert status == 400 and bad["code"] == "REMOTE_RELAY_INVALID_INPUT"
    with database.connection_context():
        assert Task.select().count() == 0

    started = desk.post("/api/v1/tasks", {"command": "sleep 30", "description": "a long wait", "type": "monitor"})
    task = started["task"]
    assert task["status"] == "running" and task["description"] == "a long wait" and task["type"] == "monitor"
    poll("the task to start", lambda: _pid_of(task["taskId"]))
    pid = _pid_of(task["taskId"])
    assert desk.ok("read_session", relay="this", session=desk.session_id)["state"] == "background_only"

    other = relay.conversation("other")
    status, body = other.request("POST", f"/api/v1/tasks/{task['taskId']}/stop")
    assert status == 404 and body["code"] == NOT_FOUND
    stopped = desk.post(f"/api/v1/tasks/{task['taskId']}/stop")
    assert stopped["stopRequested"] is True
    done = ended(desk, desk.session_id, task["taskId"])
    assert done["task"]["status"] == "killed"
    poll("the process to be gone", lambda: not _alive(pid))
    assert desk.post(f"/api/v1/tasks/{task['taskId']}/stop")["stopRequested"] is False


def test_archiving_a_session_kills_its_tasks(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task sleep 60", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    pid = poll("the task to start", lambda: _pid_of(task_id))
    desk.ok("archive", relay="this", session=session)
    assert ended(desk, session, task_id)["task"]["status"] == "killed"
    poll("the process to be gone", lambda: not _alive(pid))


def test_output_stays_readable_for_an_hour_after_the_task_ends(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task echo kept", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    assert ended(desk, session, task_id)["tail"] == ["kept"]
    with database.connection_context():
        Task.update(ended_at=utcnow() - timedelta(minutes=59)).where(Task.id == task_id).execute()
    assert desk.ok("read_task_output", relay="this", session=session, task_id=task_id)["tail"] == ["kept"]
    with database.connection_context():
        Task.update(ended_at=utcnow() - timedelta(minutes=61)).where(Task.id == task_id).execute()
    refused = desk.refused("read_task_output", NOT_FOUND, relay="this", session=session, task_id=task_id)
    assert "is kept for 60 minutes after a task ends" in refused["error"]
    assert desk.ok("read_session", relay="this", session=session)["tasks"] == []
    # The reconciler removes the file of an expired output.
    path = _output_path(task_id)
    with database.connection_context():
        reconcile(relay.runtime, utcnow())
    assert not Path(path).exists()


def test_a_missing_output_file_is_said_in_a_note(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task echo gone soon", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    ended(desk, session, task_id)
    Path(_output_path(task_id)).unlink()
    body = desk.ok("read_task_output", relay="this", session=session, task_id=task_id)
    if relay.config.database_url:  # PostgreSQL: every node reads the output from the database, not the file
        assert body["tail"] == ["gone soon"] and "note" not in body
    else:
        assert body["tail"] == [] and "output file is gone" in body["note"]


def test_a_task_whose_worker_died_is_failed_by_the_reconciler(recovery: Any) -> None:
    stack, relay, _redis = recovery
    relay.settings(allow_shell_tasks=True)
    desk = relay.conversation("desk")
    created = desk.ok("create_session", relay="this", text="!task sleep 120", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    pid = poll("the task to start", lambda: _pid_of(task_id))
    stack.kill("worker")
    assert desk.ok("read_task_output", relay="this", session=session, task_id=task_id)["task"]["status"] == "running"

    def reconciled() -> int:
        with database.connection_context():
            return reconcile(relay.runtime, utcnow()).failed_tasks

    assert poll("the reconciler to fail the orphaned task", reconciled, seconds=30) == 1
    body = desk.ok("read_task_output", relay="this", session=session, task_id=task_id)
    stale = int(float(FAST_TIMES["TASK_STALE_SECONDS"]))
    assert body["task"]["status"] == "failed" and body["task"]["error"] == ORPHANED_TEXT.format(seconds=stale)
    poll("the orphaned process to be gone", lambda: not _alive(pid))
    assert desk.ok("read_session", relay="this", session=session)["state"] == "idle"


def _pid_of(task_id: str) -> int | None:
    with database.connection_context():
        return Task.get_by_id(task_id).pid


def _output_path(task_id: str) -> str:
    with database.connection_context():
        return Task.get_by_id(task_id).output_path


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("field", "value"),
    [("command", "echo a\u0000b"), ("description", "a\u0000b"), ("command", "echo \ud800")],
    ids=["nul-command", "nul-description", "lone-surrogate-command"],
)
def test_text_no_process_takes_is_refused_at_the_call(relay: Relay, desk: Agent, field: str, value: str) -> None:
    """A NUL in a command was recorded, and the worker, which cannot pass it as an argument,
    left the task `running` until the stale sweep: it is refused before anything is written."""
    relay.settings(allow_shell_tasks=True)
    status, body = desk.request("POST", "/api/v1/tasks", {"command": "true", field: value})
    assert status == 400 and body["code"] == "REMOTE_RELAY_INVALID_INPUT", body
    assert body["error"] == (
        "A task's command and description cannot hold a NUL character or a lone surrogate (such as \\ud800). "
        "Nothing was run."
    )
    with database.connection_context():
        assert Task.select().count() == 0


def test_a_task_whose_record_went_with_its_session_ends_quietly(relay: Relay, desk: Agent, logged: Any) -> None:
    """A task's row removed while it runs (its session's rows deleted, as emptying the database
    does): its end records nothing, and the worker raises nothing."""
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task sleep 60", wait_seconds=30)
    session, task_id = created["session"], task_in(desk, created["session"])["taskId"]
    pid = poll("the task to start", lambda: _pid_of(task_id))
    with database.connection_context():
        Session.delete().where(Session.id == session).execute()
        assert Task.get_or_none(Task.id == task_id) is None
    os.kill(pid, signal.SIGKILL)
    poll("the worker to see the task end", lambda: f"task {task_id} ended" in logged.text())
