"""read_task_output (docs/tasks.md#read_task_output): the tail of a task's output as the task console shows it."""

from __future__ import annotations

from typing import Any

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.background import output_files, output_store, task_output, task_views, tasks
from oar.core import defaults
from oar.core.errors import not_found
from oar.core.fields import Param
from oar.core.models import Task
from oar.core.runtime import Runtime
from oar.core.shapes import RELAY, SESSION
from oar.core.statuses import TaskStatus
from oar.core.timeutil import iso

NOTE_TAIL_ONLY = "Only the last lines of this task's output were kept by the agent that ran it; earlier output is not available."
NOTE_GONE = "The task's output file is gone (removed or never written); only the task's status is known."
NOTE_STARTING = "The task is starting and has written no output yet; call read_task_output again in a few seconds."
# docs/tasks.md#agent-output-files
NOTE_REFUSED = (
    "The task's output file is not a regular file inside the relay's folder for this session's agent tasks "
    "(a link, or something other than a file), so the relay does not read it."
)
NOTE_AGENT_NO_FILE = (
    "The agent named no output file inside the relay's folder for this session's agent tasks (or its output is "
    "past the time it is kept); the relay reads no file elsewhere, so only the task's status is known."
)


@action("read_task_output",
    params={
        "relay": RELAY,
        "session": SESSION,
        "task_id": Param("str", required=True, max_length=64, description="a task id from list_sessions or read_session"),
        "lines": Param(
            "int", minimum=1, maximum=defaults.TASK_OUTPUT_LINES_MAX,
            description=f"how many of the last lines (default {defaults.TASK_OUTPUT_LINES_DEFAULT})",
        ),
    },
    level="read",
)
def read_task_output(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """The tail of a background task's output, while it runs and for an hour after it ends."""
    session = ctx.session(args["session"])
    task = tasks.find(session, args["task_id"], ctx.relay_name)
    if not task_views.is_readable(task, ctx.runtime, ctx.now):
        raise not_found(
            f"The output of task {task.id} ended at {iso(task.ended_at)} and is kept for "
            f"{int(ctx.runtime.time('TASK_OUTPUT_KEEP_SECONDS') // 60)} minutes after a task ends; it is gone."
        )
    lines = args.get("lines", defaults.TASK_OUTPUT_LINES_DEFAULT)
    result: dict[str, Any] = {
        "session": session.id,
        "task": {
            "id": task.id,
            "description": task_views.shown_description(task),
            "type": task.type,
            "status": task.status,
            "exitCode": task.exit_code,
            "startedAt": iso(task.started_at),
        },
        "tail": [],
        "truncated": False,
    }
    if task.ended_at:
        result["task"]["endedAt"] = iso(task.ended_at)
    if task.error:
        result["task"]["error"] = task.error
    tail = _tail(ctx.runtime, task, lines, result)
    if tail is not None:
        result["tail"] = tail.lines
        result["truncated"] = tail.truncated
        if tail.counts:
            result["counts"] = tail.counts
    if task.status == TaskStatus.RUNNING:
        quiet_after = ctx.settings["quiet_after_minutes"]
        result["stall"] = task_output.stall(task_views.last_output_time(task), ctx.now, quiet_after)
    result["summary"] = _summary(ctx, session.id, task, result)
    return result


def _tail(runtime: Runtime, task: Task, lines: int, result: dict[str, Any]) -> task_output.Tail | None:
    """The console lines of the output, or of the kept tail; sets `note` when partial."""
    if task.command is not None and task.status == TaskStatus.RUNNING and task.heartbeat_at is None:
        result["note"] = NOTE_STARTING  # no worker took it yet: it has no output file
        return None
    if task.output_path and output_store.in_database():
        return _stored_tail(task, lines, result)
    if task.output_path:
        try:
            return task_output.render(task_output.read_window(output_files.open_output(runtime, task), lines), lines)
        except output_files.OutputRefused:
            result["note"] = NOTE_REFUSED
            return None
        except FileNotFoundError:
            pass
    return _kept_tail(task, lines, result)


def _stored_tail(task: Task, lines: int, result: dict[str, Any]) -> task_output.Tail | None:
    """The output as the database keeps it, the same on every node (docs/tasks.md#where-the-output-is-kept)."""
    if task.output_refused:
        result["note"] = NOTE_REFUSED
        return None
    window = task_output.window_of(output_store.pieces_from_the_end(task.id), lines)
    if window.size == 0 and task.output_tail is not None:
        return _kept_tail(task, lines, result)
    return task_output.render(window, lines)


def _kept_tail(task: Task, lines: int, result: dict[str, Any]) -> task_output.Tail | None:
    if task.output_tail is not None:
        result["note"] = NOTE_TAIL_ONLY
        window = task_output.Window(text=task.output_tail, at_start=False, size=len(task.output_tail))
        return task_output.render(window, lines)
    result["note"] = NOTE_AGENT_NO_FILE if task.command is None else NOTE_GONE
    return None


def _summary(ctx: CallContext, session_id: str, task: Task, result: dict[str, Any]) -> str:
    parts = [f"{len(result['tail'])} lines", task.status]
    if task.exit_code is not None:
        parts[-1] += f" (exit {task.exit_code})"
    counts = result.get("counts")
    if counts:
        parts.append(
            f"{counts['runner']} {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
            + ("" if counts["final"] else " so far")
        )
    stall = result.get("stall")
    if stall:
        parts.append(f"quiet {stall['minutesSinceOutput']} min" if stall["quiet"] else f"last output {stall['minutesSinceOutput']} min ago")
    if result["truncated"]:
        parts.append("earlier lines left out")
    return f"read_task_output → {ctx.relay_name} session {session_id[:8]} task {task.id}: {', '.join(parts)}"
