"""Background tasks: shell commands a session runs beside its turns (docs/concepts.md#background-tasks, docs/tasks.md#shown-where, docs/tasks.md#read_task_output, docs/providers.md).

A task is a row (the truth) and a subprocess run by an RQ job (`workers.tasks.run_task`, see
`oar.background.task_runner`), never by a turn: a turn that starts a task goes on and may end
while the task runs. This module keeps the records: starting a task (nothing runs while the
owner setting `allow_shell_tasks` is off), asking it to stop, and recording its end and events.

A task an agent reports running itself (a cli agent's background command or subagent) is
recorded too, without a command: no worker claims, runs, kills or re-runs it, its output
file is the agent's (read, never deleted; only inside the session's agent folder, see
`oar.background.output_files`), and it ends when the agent says so or when the turn that
reported it is over (`record_reported`, `end_reported`).
"""

from __future__ import annotations

import logging
import secrets
import shlex
import socket
from datetime import datetime
from typing import Any

from oar.background import output_files, output_store, sandbox, task_caps
from oar.core import events, jobs, keys, work_folders
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.fields import unstorable_text
from oar.core.models import Message, Session, Task
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import OPEN_TURN, TaskStatus
from oar.core.timeutil import utcnow

log = logging.getLogger(__name__)


TYPES = ("local_bash", "monitor", "subagent")
MAX_COMMAND_CHARS = 10_000
# Task ids look like the documented `b7k2m9q4`: 8 characters without look-alikes (40 bits).
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"

UNSTORABLE_TEXT = (
    "A task's command and description cannot hold a NUL character or a lone surrogate (such as \\ud800). "
    "Nothing was run."
)
OFF_TEXT = (
    "Background tasks are off on this relay: the owner setting allow_shell_tasks is off. "
    "Ask the user to turn it on. Nothing was run."
)
AGENT_GONE_TEXT = (
    "The agent's turn ended without the agent reporting this task's end. The relay follows an agent's "
    "own task only while the turn that reported it runs, so its record ends here; the relay never ran "
    "or stopped the task."
)
AGENT_STOP_TEXT = "Stopped on the relay; the relay does not run the agent's own tasks, so only its record ended."
# What an agent may report about its task's end, in the relay's statuses.
REPORTED_STATUSES = {
    "completed": TaskStatus.COMPLETED,
    "failed": TaskStatus.FAILED,
    "killed": TaskStatus.KILLED,
    "stopped": TaskStatus.KILLED,
}


def new_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


def start(
    runtime: Runtime,
    session: Session,
    command: str,
    *,
    description: str | None = None,
    type: str = "local_bash",
    turn_id: str | None = None,
) -> Task:
    """Record a task and hand it to a worker; raises ActionError when it may not run."""
    if unstorable_text([command, description]):
        # The command becomes the process's arguments, which cannot hold a NUL; neither is stored.
        raise invalid(UNSTORABLE_TEXT)
    values = runtime.settings()
    if not values["allow_shell_tasks"]:
        raise ActionError("REMOTE_RELAY_FORBIDDEN", OFF_TEXT)
    command = (command or "").strip()
    if not command:
        raise invalid("A task needs a command. Nothing was run.")
    if len(command) > MAX_COMMAND_CHARS:
        raise invalid(f"A task's command is limited to {MAX_COMMAND_CHARS:,} characters. Nothing was run.")
    if type not in TYPES:
        raise invalid(f"A task's type is one of {', '.join(TYPES)}. Nothing was run.")
    use_shell = bool(values.get("shell_tasks_via_shell"))
    if not use_shell:
        try:
            argv = shlex.split(command)
        except ValueError as error:
            raise invalid(f"The command could not be split into arguments ({error}). Nothing was run.") from None
        if not argv:
            raise invalid("A task needs a command. Nothing was run.")
    if session.archived or session.deleted:
        raise not_found(f"Session {session.id[:8]} is archived. Nothing was run.")
    if not values.get("tasks_without_sandbox"):
        # docs/tasks.md#the-sandbox: without one a task could read the relay's secrets.
        reason = sandbox.unavailable(runtime.config)
        if reason is not None:
            raise ActionError("REMOTE_RELAY_NO_SANDBOX", sandbox.unavailable_text(reason))
    cwd = _checked_folder(runtime, session, values["allowed_roots"])
    task_id = new_id()
    now = utcnow()
    with write_transaction():
        task_caps.refuse_over_caps(session.id, values)
        task = Task.create(
            id=task_id,
            session=session.id,
            description=(description or command)[:500],
            type=type,
            command=command,
            shell=use_shell,
            cwd=cwd,
            status=TaskStatus.RUNNING,
            started_by_turn=turn_id,  # its output file is named by the worker that claims it
            created_at=now,
            started_at=now,
            last_output_at=now,
        )
        Session.update(last_activity_at=now).where(Session.id == session.id).execute()
        events.record(session.id, "task_started", payload(task), now)
    enqueue(runtime, task.id)
    return task


def _checked_folder(runtime: Runtime, session: Session, roots: list[str]) -> str:
    """The session's folder, if a task may run there now (the worker checks it again at the start)."""
    try:
        with work_folders.opened(runtime.config, session, roots) as (folder, _):
            return folder
    except work_folders.FolderRefused as refused:
        raise invalid(f"The session's folder {session.cwd} {refused.reason}. Nothing was run.") from None


def record_reported(
    runtime: Runtime, session_id: str, turn_id: str, *, description: str, type: str = "local_bash",
    output_file: str | None = None,
) -> Task:
    """Record a background task the session's agent runs itself (never run by the relay).

    Not gated by `allow_shell_tasks`: the relay runs nothing. The agent's output file is
    kept only when it lies in the session's agent folder (docs/tasks.md#agent-output-files),
    so that a report cannot make the relay read an arbitrary file; elsewhere the task is
    recorded without one and read_task_output says why.
    """
    session = Session.get_by_id(session_id)
    now = utcnow()
    with write_transaction():
        task = Task.create(
            id=new_id(), session=session.id, description=(description.strip() or "background task")[:500],
            type=type if type in TYPES else "local_bash", command=None, shell=False, cwd=session.cwd,
            status=TaskStatus.RUNNING, output_path=output_files.accepted_agent_file(runtime, session.id, output_file), started_by_turn=turn_id,
            created_at=now, started_at=now, last_output_at=now, host=socket.gethostname(),
        )
        Session.update(last_activity_at=now).where(Session.id == session.id).execute()
        events.record(session.id, "task_started", payload(task), now)
    return task


def end_reported(runtime: Runtime, task_id: str, status: str, note: str | None = None, output_file: str | None = None) -> str:
    """The agent reported its task's end (`completed`, `failed`, `stopped`/`killed`), naming its
    output file perhaps only now (kept under the same rule as in `record_reported`)."""
    task = Task.get_or_none(Task.id == task_id)
    if output_file and task is not None and task.output_path is None and task.command is None:
        accepted = output_files.accepted_agent_file(runtime, task.session_id, output_file)
        if accepted:
            Task.update(output_path=accepted).where((Task.id == task_id) & Task.output_path.is_null()).execute()
    return finish(runtime, task_id, REPORTED_STATUSES.get(status, TaskStatus.COMPLETED), None, (note or "")[:2000] or None)


def enqueue(runtime: Runtime, task_id: str) -> None:
    """Ask a worker to run the task; if Redis is down the reconciler enqueues it later.

    No RQ timeout: the runner ends a task at `max_task_minutes` itself. RQ's would interrupt the
    job's thread and leave the task's process running, its row `running`."""
    try:
        runtime.queue.enqueue(jobs.RUN_TASK, task_id, job_timeout=-1, result_ttl=0, failure_ttl=86_400)
    except Exception as error:  # noqa: BLE001 - any Redis failure leaves it to the reconciler
        log.warning("task %s not enqueued yet: %s", task_id, error)


def request_stop(runtime: Runtime, task: Task) -> bool:
    """Ask a running task to end; False when it had already ended."""
    if Task.select().where((Task.id == task.id) & Task.command.is_null()).exists():
        # An agent's own task: nothing of the relay's runs it, so its record ends here.
        return finish(runtime, task.id, TaskStatus.KILLED, None, AGENT_STOP_TEXT) == TaskStatus.KILLED
    changed = Task.update(stop_requested=True).where((Task.id == task.id) & (Task.status == TaskStatus.RUNNING)).execute()
    if changed:
        publish(runtime.redis, keys.task_stop_channel(runtime.config.namespace, task.id))
    return bool(changed)


def stop_all(runtime: Runtime, session_id: str) -> list[str]:
    """Stop every running task of a session (archive, delete); returns their ids."""
    running = [row.id for row in Task.select(Task.id).where((Task.session == session_id) & (Task.status == TaskStatus.RUNNING))]
    for task_id in running:
        request_stop(runtime, Task(id=task_id))
    return running


def find(session: Session, task_id: str, relay_name: str) -> Task:
    """The session's task, or NOT_FOUND without saying what was not done (its caller adds that)."""
    task = Task.get_or_none((Task.id == (task_id or "").strip()) & (Task.session == session.id))
    if task is None:
        raise not_found(f'Session {session.id[:8]} on relay "{relay_name}" has no task "{task_id[:64]}".')
    return task


def finish(runtime: Runtime, task_id: str, status: TaskStatus, exit_code: int | None, error: str | None) -> str:
    """Record a task's end and its events; wakes waiters on the turn that started it. Where the
    output is kept in the database, what this machine has of it is stored first, so that whoever
    sees the end reads the whole tail."""
    if output_store.in_database():
        running = Task.get_or_none((Task.id == task_id) & (Task.status == TaskStatus.RUNNING))
        if running is not None:
            output_store.mirror(runtime, running)
    now = utcnow()
    with write_transaction():
        ended = (
            Task.update(status=status, exit_code=exit_code, error=error, ended_at=now)
            .where((Task.id == task_id) & (Task.status == TaskStatus.RUNNING))
            .execute()
        )
        task = Task.get_or_none(Task.id == task_id)
        if ended and task is not None:
            record_end_events(task, now)
    if task is None:  # its row went with its session's while it ran: nothing is left to record
        log.warning("task %s ended %s; its record is gone", task_id, status)
        return status
    if ended and task.started_by_turn:
        runtime.signal_turn(task.started_by_turn)
    return task.status


def record_end_events(task: Task, now: datetime) -> None:
    """`task_finished`, `task_failed` when it failed, `session_idle` when nothing runs any more."""
    events.record(task.session_id, "task_finished", payload(task), now)
    if task.status == TaskStatus.FAILED or (task.exit_code not in (None, 0)):
        events.record(task.session_id, "task_failed", payload(task), now)
    still_running = Task.select().where((Task.session == task.session_id) & (Task.status == TaskStatus.RUNNING)).exists()
    turn_open = (
        Message.select()
        .where((Message.session == task.session_id) & Message.status.in_(OPEN_TURN))
        .exists()
    )
    if not still_running and not turn_open:
        events.record(task.session_id, "session_idle", {"after": "task", "taskId": task.id}, now)


def payload(task: Task) -> dict[str, Any]:
    return {
        "taskId": task.id,
        "description": task.description,
        "type": task.type,
        "status": task.status,
        "exitCode": task.exit_code,
    }


def status_now(task_id: str) -> str:
    """A task's status as stored now (it may have moved since its row was read)."""
    return Task.get_by_id(task_id).status
