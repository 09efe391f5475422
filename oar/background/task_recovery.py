"""Recovering background tasks, run by the clock's reconciler (docs/operations.md#durability-and-recovery): a task whose worker
died is failed (and its process ended), one no worker took is enqueued again, an agent's own
task outlived by its turn ends, and output past the hour it stays readable is removed (its file,
its copy in the database, and on PostgreSQL the files this machine keeps of tasks whose output
another machine's clock expired)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from datetime import datetime, timedelta

from oar.background import output_files, output_store, tasks
from oar.background.task_runner import signal_group
from oar.core import jobs, keys
from oar.core.db import write_transaction
from oar.core.models import Message, Task
from oar.core.runtime import Runtime
from oar.core.statuses import OPEN_TURN, TASK_ENDED, TaskStatus

log = logging.getLogger(__name__)

ORPHANED_TEXT = (
    "The worker running this task stopped (no heartbeat for {seconds} s); the task's process was ended "
    "if it was still running."
)


def reconcile(runtime: Runtime, now: datetime) -> dict[str, int]:
    """Fail tasks whose worker died, re-enqueue tasks no worker took, drop expired output."""
    outcome = {"failed": 0, "enqueued": 0, "expired": 0}
    stale_seconds = runtime.time("TASK_STALE_SECONDS")
    stale_before = now - timedelta(seconds=stale_seconds)
    for task in Task.select().where(
        (Task.status == TaskStatus.RUNNING) & (Task.heartbeat_at < stale_before) & Task.command.is_null(False)
    ):
        if output_store.in_database():
            output_store.mirror(runtime, task)  # what its worker wrote last, if it ran on this machine
        with write_transaction():
            failed = (
                Task.update(status=TaskStatus.FAILED, error=ORPHANED_TEXT.format(seconds=int(stale_seconds)), ended_at=now)
                .where((Task.id == task.id) & (Task.status == TaskStatus.RUNNING) & (Task.heartbeat_at < stale_before))
                .execute()
            )
            if failed:
                tasks.record_end_events(Task.get_by_id(task.id), now)
        if failed:
            outcome["failed"] += 1
            if task.pid and task.host == socket.gethostname():
                signal_group(task.pid, signal.SIGKILL)
            if task.started_by_turn:
                runtime.signal_turn(task.started_by_turn)
            log.warning("task %s of session %s failed: its worker stopped", task.id, task.session_id)
    grace_before = now - timedelta(seconds=runtime.time("RECONCILE_SECONDS"))
    open_turns = Message.select(Message.id).where(Message.status.in_(OPEN_TURN))
    for task in Task.select(Task.id).where(
        (Task.status == TaskStatus.RUNNING) & Task.command.is_null() & Task.started_by_turn.not_in(open_turns)
    ):
        tasks.finish(runtime, task.id, TaskStatus.KILLED, None, tasks.AGENT_GONE_TEXT)
        outcome["failed"] += 1
    for task in Task.select(Task.id).where(
        (Task.status == TaskStatus.RUNNING) & Task.heartbeat_at.is_null() & (Task.created_at < grace_before)
        & Task.command.is_null(False)
    ):
        if jobs.first_nudge_in_a_while(runtime, keys.task_nudge(runtime.config.namespace, task.id)):
            tasks.enqueue(runtime, task.id)
            outcome["enqueued"] += 1
    keep_before = now - timedelta(seconds=runtime.time("TASK_OUTPUT_KEEP_SECONDS"))
    for task in Task.select(Task.id, Task.output_path, Task.command).where(
        (Task.status.in_(TASK_ENDED)) & (Task.ended_at < keep_before) & Task.output_path.is_null(False)
    ):
        if task.command is not None and task.output_path is not None:  # an agent's own output file is the agent's to delete
            with contextlib.suppress(OSError):
                os.unlink(task.output_path)
        with write_transaction():
            output_store.forget([task.id])
            Task.update(output_path=None, output_tail=None).where(Task.id == task.id).execute()
        outcome["expired"] += 1
    if output_store.in_database():
        outcome["expired"] += remove_expired_local_files(runtime, keep_before)
    return outcome


def remove_expired_local_files(runtime: Runtime, keep_before: datetime) -> int:
    """Where output is kept in the database, the files behind it lie on the machines that ran the
    tasks, and the clock that expired a task's output may run on another: each machine's clock
    removes its own files once their task's output is no longer readable (or the task is gone)."""
    folder = output_files.relay_folder(runtime)
    try:
        names = [name for name in os.listdir(folder) if name.endswith(".log")]
    except FileNotFoundError:
        return 0
    if not names:
        return 0
    ids = [name.removesuffix(".log") for name in names]
    readable = {
        row.id for row in Task.select(Task.id).where(
            Task.id.in_(ids) & ((Task.status == TaskStatus.RUNNING) | (Task.ended_at >= keep_before))
        )
    }
    removed = 0
    for task_id in ids:
        if task_id not in readable:
            with contextlib.suppress(OSError):
                os.unlink(folder / f"{task_id}.log")
                removed += 1
    return removed
