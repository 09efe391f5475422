"""Background tasks: shell commands a session runs beside its turns (SPEC §2, §5.4, §5.5, §11).

A task is a row (the truth) and a subprocess run by an RQ job (`workers.tasks.run_task`),
never by a turn: a turn that starts a task goes on and may end while the task runs. The
subprocess writes straight into `<data dir>/tasks/<id>.log`; its exit code is recorded,
and while it runs the job writes a heartbeat so that the reconciler can fail a task whose
worker died (and end its process).

Commands run as argument lists (`shlex.split`, no shell) unless the owner turned on
`shell_tasks_via_shell`; then the command is the single argument of `/bin/sh -c`, never
concatenated with anything. Nothing runs while the owner setting `allow_shell_tasks` is off.
The subprocess gets the worker's environment without the relay's own secrets
(`OAR_*`, `DATABASE_URL`, `REDIS_URL`).

A task an agent reports running itself (a cli agent's background command or subagent) is
recorded too, without a command: no worker claims, runs, kills or re-runs it, its output
file is the agent's (read, never deleted), and it ends when the agent says so or when the
turn that reported it is over (`record_reported`, `end_reported`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from oar.background import task_output
from oar.core import events, jobs, keys, settings
from oar.core.db import release_connection, write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.models import Message, Session, Task
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.timeutil import iso, utcnow

log = logging.getLogger(__name__)

TYPES = ("local_bash", "monitor", "subagent")
ENDED = ("completed", "failed", "killed")
MAX_COMMAND_CHARS = 10_000
# Task ids look like the SPEC's `b7k2m9q4`: 8 characters without look-alikes (40 bits).
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
# Environment variables a task's subprocess does not inherit from the worker.
_PRIVATE_ENV_PREFIXES = ("OAR_",)
_PRIVATE_ENV = ("DATABASE_URL", "REDIS_URL")

OFF_TEXT = (
    "Background tasks are off on this relay: the owner setting allow_shell_tasks is off. "
    "Ask the user to turn it on. Nothing was run."
)
ORPHANED_TEXT = (
    "The worker running this task stopped (no heartbeat for {seconds} s); the task's process was ended "
    "if it was still running."
)
AGENT_GONE_TEXT = (
    "The agent's turn ended without the agent reporting this task's end. The relay follows an agent's "
    "own task only while the turn that reported it runs, so its record ends here; the relay never ran "
    "or stopped the task."
)
AGENT_STOP_TEXT = "Stopped on the relay; the relay does not run the agent's own tasks, so only its record ended."
# What an agent may report about its task's end, in the relay's statuses.
REPORTED_STATUSES = {"completed": "completed", "failed": "failed", "killed": "killed", "stopped": "killed"}


def new_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


def output_dir(runtime: Runtime) -> Path:
    return runtime.config.data_dir / "tasks"


# Starting and stopping -------------------------------------------------------------------


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
    cwd = session.cwd or str(settings.default_cwd(runtime.config).resolve())
    task_id = new_id()
    now = utcnow()
    with write_transaction():
        task = Task.create(
            id=task_id,
            session=session.id,
            description=(description or command)[:500],
            type=type,
            command=command,
            shell=use_shell,
            cwd=cwd,
            status="running",
            output_path=str((output_dir(runtime) / f"{task_id}.log").resolve()),
            started_by_turn=turn_id,
            created_at=now,
            started_at=now,
            last_output_at=now,
        )
        Session.update(last_activity_at=now).where(Session.id == session.id).execute()
        events.record(session.id, "task_started", payload(task), now)
    enqueue(runtime, task.id)
    return task


def record_reported(
    runtime: Runtime, session_id: str, turn_id: str, *, description: str, type: str = "local_bash",
    output_file: str | None = None,
) -> Task:
    """Record a background task the session's agent runs itself (never run by the relay).

    Not gated by `allow_shell_tasks`: the relay runs nothing. The agent's output file is
    shown by read_task_output only when it lies in the temporary folder or the session's
    folder, so that a report cannot make the relay read an arbitrary file.
    """
    session = Session.get_by_id(session_id)
    now = utcnow()
    with write_transaction():
        task = Task.create(
            id=new_id(), session=session.id, description=(description.strip() or "background task")[:500],
            type=type if type in TYPES else "local_bash", command=None, shell=False, cwd=session.cwd,
            status="running", output_path=readable_output_file(output_file, session.cwd), started_by_turn=turn_id,
            created_at=now, started_at=now, last_output_at=now, host=socket.gethostname(),
        )
        Session.update(last_activity_at=now).where(Session.id == session.id).execute()
        events.record(session.id, "task_started", payload(task), now)
    return task


def readable_output_file(path: str | None, cwd: str | None) -> str | None:
    if not path or not os.path.isabs(path):
        return None
    real = os.path.realpath(path)
    roots = [tempfile.gettempdir()] + ([cwd] if cwd else [])
    for root in roots:
        real_root = os.path.realpath(root)
        if real.startswith(real_root.rstrip(os.sep) + os.sep):
            return real
    return None


def end_reported(runtime: Runtime, task_id: str, status: str, note: str | None = None) -> str:
    """The agent reported its task's end (`completed`, `failed`, `stopped`/`killed`)."""
    return finish(runtime, task_id, REPORTED_STATUSES.get(status, "completed"), None, (note or "")[:2000] or None)


def enqueue(runtime: Runtime, task_id: str) -> None:
    """Ask a worker to run the task; if Redis is down the reconciler enqueues it later."""
    try:
        runtime.queue.enqueue(jobs.RUN_TASK, task_id, job_timeout=-1, result_ttl=0, failure_ttl=86_400)
    except Exception as error:  # noqa: BLE001 - any Redis failure leaves it to the reconciler
        log.warning("task %s not enqueued yet: %s", task_id, error)


def request_stop(runtime: Runtime, task: Task) -> bool:
    """Ask a running task to end; False when it had already ended."""
    if Task.select().where((Task.id == task.id) & Task.command.is_null()).exists():
        # An agent's own task: nothing of the relay's runs it, so its record ends here.
        return finish(runtime, task.id, "killed", None, AGENT_STOP_TEXT) == "killed"
    changed = Task.update(stop_requested=True).where((Task.id == task.id) & (Task.status == "running")).execute()
    if changed:
        publish(runtime.redis, keys.task_stop_channel(runtime.config.namespace, task.id))
    return bool(changed)


def stop_all(runtime: Runtime, session_id: str) -> list[str]:
    """Stop every running task of a session (archive, delete); returns their ids."""
    running = [row.id for row in Task.select(Task.id).where((Task.session == session_id) & (Task.status == "running"))]
    for task_id in running:
        request_stop(runtime, Task(id=task_id))
    return running


def find(session: Session, task_id: str, relay_name: str, nothing: str = "") -> Task:
    task = Task.get_or_none((Task.id == (task_id or "").strip()) & (Task.session == session.id))
    if task is None:
        raise not_found(f'Session {session.id[:8]} on relay "{relay_name}" has no task "{task_id[:64]}". {nothing}'.strip())
    return task


# Running, inside an RQ worker ------------------------------------------------------------


def claim(task_id: str) -> Task | None:
    """Take the task for this worker (a conditional UPDATE: one worker wins)."""
    with write_transaction():
        claimed = (
            Task.update(heartbeat_at=utcnow(), host=socket.gethostname())
            .where(
                (Task.id == task_id) & (Task.status == "running") & Task.heartbeat_at.is_null()
                & Task.command.is_null(False)  # an agent's own task is never run here
            )
            .execute()
        )
    return Task.get_by_id(task_id) if claimed else None


def subprocess_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_PRIVATE_ENV_PREFIXES) and key not in _PRIVATE_ENV
    }


def run(runtime: Runtime, task_id: str) -> str | None:
    """Run a claimed task's subprocess to its end; returns the final status (None: not ours)."""
    task = claim(task_id)
    if task is None:
        return None
    path = Path(task.output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["/bin/sh", "-c", task.command] if task.shell else shlex.split(task.command)
    with open(path, "ab") as output:
        try:
            process = subprocess.Popen(
                argv, cwd=task.cwd, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=subprocess_env(),
            )
        except OSError as error:
            output.write(f"{error}\n".encode())
            return finish(runtime, task.id, "failed", None, f"The command could not be started: {error}.")
    Task.update(pid=process.pid).where(Task.id == task.id).execute()
    release_connection()
    killed = _watch(runtime, task, process)
    code = process.returncode
    if killed:
        status = "killed"
    else:
        status = "completed" if code == 0 else "failed"
    return finish(runtime, task.id, status, code, None)


def _watch(runtime: Runtime, task: Task, process: subprocess.Popen[bytes]) -> bool:
    """Heartbeat, output time and stop requests until the process exits; True if it was killed."""
    channel = keys.task_stop_channel(runtime.config.namespace, task.id)
    exited = threading.Event()

    def wait_for_exit() -> None:
        process.wait()
        exited.set()
        publish(runtime.redis, channel)  # wakes the loop below at once

    threading.Thread(target=wait_for_exit, name=f"oar-task-{task.id}", daemon=True).start()
    pubsub = _subscribe(runtime, channel)
    heartbeat_every = runtime.time("TASK_HEARTBEAT_SECONDS")
    poll_every = runtime.time("STOP_POLL_SECONDS")
    next_heartbeat = time.monotonic() + heartbeat_every
    try:
        while not exited.is_set():
            _wait(pubsub, exited, min(poll_every, heartbeat_every))
            if exited.is_set():
                break
            row = Task.get_or_none(Task.id == task.id)
            if row is None or row.stop_requested or row.status != "running":
                kill(process, runtime.time("TASK_KILL_GRACE_SECONDS"))
                exited.wait(runtime.time("TASK_KILL_GRACE_SECONDS") + 5)
                return True
            if time.monotonic() >= next_heartbeat:
                _beat(runtime, row)
                next_heartbeat = time.monotonic() + heartbeat_every
            release_connection()
    finally:
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                pubsub.close()
    return False


def _beat(runtime: Runtime, task: Task) -> None:
    """Heartbeat; the last output time from the file; a `stalled` event once per quiet spell."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now}
    last_output = task.last_output_at or task.started_at
    file_time = last_output_time(task)
    if file_time > last_output:
        last_output = file_time
        values.update(last_output_at=file_time, stall_reported=False)
    quiet_for = now - last_output
    quiet_after = runtime.settings()["quiet_after_minutes"]
    with write_transaction():
        if "last_output_at" not in values and not task.stall_reported and quiet_for >= timedelta(minutes=quiet_after):
            values["stall_reported"] = True
            events.record(
                task.session_id, "stalled",
                {"taskId": task.id, "description": task.description,
                 "minutesSinceOutput": int(quiet_for.total_seconds() // 60)},
                now,
            )
        Task.update(**values).where((Task.id == task.id) & (Task.status == "running")).execute()


def _utc_from_timestamp(stamp: float) -> datetime:
    from datetime import UTC

    return datetime.fromtimestamp(stamp, UTC).replace(tzinfo=None)


def _subscribe(runtime: Runtime, channel: str) -> Any:
    try:
        pubsub = runtime.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(channel)
        return pubsub
    except redis.RedisError:
        return None


def _wait(pubsub: Any, exited: threading.Event, seconds: float) -> None:
    if pubsub is None:
        exited.wait(seconds)
        return
    try:
        pubsub.get_message(timeout=seconds)
    except redis.RedisError:
        exited.wait(seconds)


def kill(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the task's process group, SIGKILL what is left after `grace` seconds."""
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def finish(runtime: Runtime, task_id: str, status: str, exit_code: int | None, error: str | None) -> str:
    """Record a task's end and its events; wakes waiters on the turn that started it."""
    now = utcnow()
    with write_transaction():
        ended = (
            Task.update(status=status, exit_code=exit_code, error=error, ended_at=now)
            .where((Task.id == task_id) & (Task.status == "running"))
            .execute()
        )
        task = Task.get_by_id(task_id)
        if ended:
            record_end_events(task, now)
    release_connection()
    if ended and task.started_by_turn:
        runtime.signal_turn(task.started_by_turn)
    return task.status


def record_end_events(task: Task, now: datetime) -> None:
    """`task_finished`, `task_failed` when it failed, `session_idle` when nothing runs any more."""
    events.record(task.session_id, "task_finished", payload(task), now)
    if task.status == "failed" or (task.exit_code not in (None, 0)):
        events.record(task.session_id, "task_failed", payload(task), now)
    still_running = Task.select().where((Task.session == task.session_id) & (Task.status == "running")).exists()
    turn_open = (
        Message.select()
        .where((Message.session == task.session_id) & Message.status.in_(("queued", "running", "waiting_for_answer")))
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


# Recovery (the clock's reconciler) -------------------------------------------------------


def reconcile(runtime: Runtime, now: datetime) -> dict[str, int]:
    """Fail tasks whose worker died, re-enqueue tasks no worker took, drop expired output."""
    outcome = {"failed": 0, "enqueued": 0, "expired": 0}
    stale_seconds = runtime.time("TASK_STALE_SECONDS")
    stale_before = now - timedelta(seconds=stale_seconds)
    for task in Task.select().where(
        (Task.status == "running") & (Task.heartbeat_at < stale_before) & Task.command.is_null(False)
    ):
        with write_transaction():
            failed = (
                Task.update(status="failed", error=ORPHANED_TEXT.format(seconds=int(stale_seconds)), ended_at=now)
                .where((Task.id == task.id) & (Task.status == "running") & (Task.heartbeat_at < stale_before))
                .execute()
            )
            if failed:
                record_end_events(Task.get_by_id(task.id), now)
        if failed:
            outcome["failed"] += 1
            if task.pid and task.host == socket.gethostname():
                _signal_group(task.pid, signal.SIGKILL)
            if task.started_by_turn:
                runtime.signal_turn(task.started_by_turn)
            log.warning("task %s of session %s failed: its worker stopped", task.id, task.session_id)
    grace_before = now - timedelta(seconds=runtime.time("RECONCILE_SECONDS"))
    open_turns = Message.select(Message.id).where(Message.status.in_(("queued", "running", "waiting_for_answer")))
    for task in Task.select(Task.id).where(
        (Task.status == "running") & Task.command.is_null() & Task.started_by_turn.not_in(open_turns)
    ):
        finish(runtime, task.id, "killed", None, AGENT_GONE_TEXT)
        outcome["failed"] += 1
    for task in Task.select(Task.id).where(
        (Task.status == "running") & Task.heartbeat_at.is_null() & (Task.created_at < grace_before)
        & Task.command.is_null(False)
    ):
        if _first_nudge_in_a_while(runtime, task.id):
            enqueue(runtime, task.id)
            outcome["enqueued"] += 1
    keep_before = now - timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))
    for task in Task.select(Task.id, Task.output_path, Task.command).where(
        (Task.status.in_(ENDED)) & (Task.ended_at < keep_before) & Task.output_path.is_null(False)
    ):
        if task.command is not None:  # an agent's own output file is the agent's to delete
            with contextlib.suppress(OSError):
                os.unlink(task.output_path)
        Task.update(output_path=None, output_tail=None).where(Task.id == task.id).execute()
        outcome["expired"] += 1
    return outcome


def _first_nudge_in_a_while(runtime: Runtime, task_id: str) -> bool:
    key = keys.task_nudge(runtime.config.namespace, task_id)
    seconds = max(1, int(12 * runtime.time("RECONCILE_SECONDS")))
    try:
        return bool(runtime.redis.set(key, b"1", nx=True, ex=seconds))
    except redis.RedisError:
        return False


# How tasks are shown ---------------------------------------------------------------------


def readable_until(task: Task, runtime: Runtime) -> datetime | None:
    """When the output stops being readable (None while the task runs)."""
    if task.status == "running" or task.ended_at is None:
        return None
    return task.ended_at + timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))


def is_readable(task: Task, runtime: Runtime, now: datetime) -> bool:
    until = readable_until(task, runtime)
    return until is None or now < until


def shown_for(runtime: Runtime, session_ids: Iterable[str], now: datetime) -> dict[str, list[dict[str, Any]]]:
    """Tasks as `list_sessions`/`read_session` show them: running ones and those ended within
    the hour their output stays readable, newest first."""
    session_ids = list(session_ids)
    if not session_ids:
        return {}
    keep_since = now - timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))
    rows = (
        Task.select()
        .where(Task.session.in_(session_ids) & ((Task.status == "running") | (Task.ended_at >= keep_since)))
        .order_by(Task.started_at.desc())
    )
    quiet_after = None
    shown: dict[str, list[dict[str, Any]]] = {}
    for task in rows:
        if quiet_after is None:
            quiet_after = runtime.settings()["quiet_after_minutes"]
        shown.setdefault(task.session_id, []).append(entry(task, now, quiet_after))
    return shown


def entry(task: Task, now: datetime, quiet_after_minutes: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "taskId": task.id,
        "description": task.description,
        "type": task.type,
        "status": task.status,
        "exitCode": task.exit_code,
        "startedAt": iso(task.started_at),
        "output": "read_task_output",
    }
    if task.ended_at:
        item["endedAt"] = iso(task.ended_at)
    if task.status == "running" and task.output_path:
        last_output = last_output_time(task)
        item["health"] = task_output.stall(last_output, now, quiet_after_minutes)
        with contextlib.suppress(OSError):
            window = task_output.read_window(task.output_path, 200, max_bytes=256 * 1024)
            counts = task_output.detect_counts(task_output.clean(window.text))
            if counts:
                item["counts"] = counts
    return item


def last_output_time(task: Task) -> datetime:
    """The output file's modification time (the heartbeat copies it to the row), else the row's."""
    try:
        return _utc_from_timestamp(os.stat(task.output_path).st_mtime)
    except (OSError, TypeError):
        return task.last_output_at or task.started_at

