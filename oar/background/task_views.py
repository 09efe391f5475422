"""How background tasks are shown: in list_sessions and read_session, and whether their output
is still readable."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from peewee import fn

from oar.background import output_files, output_store, task_output
from oar.background.masking import mask
from oar.core.models import Session, Task
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.core.statuses import TaskStatus
from oar.core.timeutil import iso


def readable_until(task: Task, runtime: Runtime) -> datetime | None:
    """When the output stops being readable (None while the task runs)."""
    if task.status == TaskStatus.RUNNING or task.ended_at is None:
        return None
    return task.ended_at + timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))


def is_readable(task: Task, runtime: Runtime, now: datetime) -> bool:
    until = readable_until(task, runtime)
    return until is None or now < until


def _shown(keep_since: Any) -> Any:
    return (Task.status == TaskStatus.RUNNING) | (Task.ended_at >= keep_since)


# Read by every list_sessions and read_session: its SQL built once (oar/core/prepared.py).
_SHOWN = Prepared(
    lambda session_ids, keep_since: Task.select()
    .where(Task.session.in_(session_ids) & _shown(keep_since))
    .order_by(Task.started_at.desc())
)


def keep_since(runtime: Runtime, now: datetime) -> datetime:
    """Tasks ended since then are still shown (their output is readable)."""
    return now - timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))


def shown_exists(since: Any) -> Any:
    """Whether the session of the enclosing query (its `Session.id`) has tasks `shown_for`
    shows, given `keep_since`, as one SQL expression: read_session asks it in the query that
    reads the session, and reads the tasks only when there are some."""
    return fn.EXISTS(Task.select(Task.id).where((Task.session == Session.id) & _shown(since)))


def shown_for(runtime: Runtime, session_ids: Iterable[str], now: datetime) -> dict[str, list[dict[str, Any]]]:
    """Tasks as `list_sessions`/`read_session` show them: running ones and those ended within
    the hour their output stays readable, newest first."""
    session_ids = list(session_ids)
    if not session_ids:
        return {}
    rows = _SHOWN.rows(session_ids, keep_since(runtime, now))
    quiet_after = None
    shown: dict[str, list[dict[str, Any]]] = {}
    for task in rows:
        if quiet_after is None:
            quiet_after = runtime.settings()["quiet_after_minutes"]
        shown.setdefault(task.session_id, []).append(entry(runtime, task, now, quiet_after))
    return shown


def shown_description(task: Task) -> str:
    """A task's description as agents and the page see it: masked like its output
    (docs/tasks.md#read_task_output), since it is the task's command unless the agent gave one."""
    return mask(task.description or "")


def entry(runtime: Runtime, task: Task, now: datetime, quiet_after_minutes: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "taskId": task.id,
        "description": shown_description(task),
        "type": task.type,
        "status": task.status,
        "exitCode": task.exit_code,
        "startedAt": iso(task.started_at),
        "output": "read_task_output",
    }
    if task.ended_at:
        item["endedAt"] = iso(task.ended_at)
    if task.status == TaskStatus.RUNNING and task.output_path:
        last_output = last_output_time(task)
        item["health"] = task_output.stall(last_output, now, quiet_after_minutes)
        with contextlib.suppress(OSError):
            window = _counted_window(runtime, task)
            counts = task_output.detect_counts(task_output.clean(window.text))
            if counts:
                item["counts"] = counts
    return item


# The end of a running task's output in which list_sessions and read_session look for test counts.
COUNTED_LINES = 200
COUNTED_BYTES = 256 * 1024


def _counted_window(runtime: Runtime, task: Task) -> task_output.Window:
    if output_store.in_database():
        return task_output.window_of(output_store.pieces_from_the_end(task.id), COUNTED_LINES, COUNTED_BYTES)
    return task_output.read_window(output_files.open_output(runtime, task), COUNTED_LINES, COUNTED_BYTES)


def last_output_time(task: Task) -> datetime:
    """When the task last wrote output, as a call on any node sees it: where the output is kept
    in the database, the row's (each copy and heartbeat writes it); else the file's."""
    if output_store.in_database():
        return task.last_output_at or task.started_at
    return output_file_time(task)


def output_file_time(task: Task) -> datetime:
    """The output file's modification time on this machine (the heartbeat copies it to the row),
    else the row's. A link is not followed (only its own time shows): docs/tasks.md#agent-output-files.
    An empty file has written nothing: its time is when the worker that claimed the task
    created it, which on a busy machine may be long after the start (a quiet spell would begin
    again there, and its stalls be reported twice)."""
    if task.output_path is not None:
        with contextlib.suppress(OSError):
            found = os.lstat(task.output_path)
            if found.st_size > 0:
                return _utc_from_timestamp(found.st_mtime)
    return task.last_output_at or task.started_at


def _utc_from_timestamp(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, UTC).replace(tzinfo=None)
