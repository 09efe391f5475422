"""Task output kept in the database, so that any node of a relay reads it (docs/tasks.md#where-the-output-is-kept).

On PostgreSQL a relay may run on several machines that share nothing but the database and
Redis: the worker that runs a task writes its output to a file on its own machine, and a call
reading it may arrive at any other. So, there, the end of each output is copied into
`TaskOutputChunk` rows as it grows (`mirror`: by the running task's job every
`TASK_OUTPUT_COPY_SECONDS` and once more when it ends; for an agent's own task by its turn),
and `read_task_output` reads those rows on every node, the one that runs the task included.
A node that dies then loses at most the last second of output.

Only the last `task_output.WINDOW_MAX_BYTES` (4 MiB) are kept, the most a tail read looks at,
in pieces of `task_output.BLOCK_BYTES` (64 KiB): a 1 GB output holds 4 MiB of rows, a tail
read fetches its last piece or few by the `(task, start)` index, and both cost what a 1 MB
output's do. Output that arrives faster than that between two copies skips to its end.

SQLite is one machine's database, so an embedded relay has one node, and its calls read the
file itself (`in_database()` is False there): no write per second per running task on
SQLite's one write lock, and the tail the moment it is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import BinaryIO

from oar.background import output_files
from oar.background.task_output import BLOCK_BYTES, WINDOW_MAX_BYTES
from oar.core.db import is_sqlite, lock_rows, write_transaction
from oar.core.models import Task, TaskOutputChunk
from oar.core.runtime import Runtime
from oar.core.statuses import TaskStatus
from oar.core.timeutil import utcnow

# Pieces fetched by a tail read's first query; each further query fetches four times more.
FIRST_FETCH = 1
LARGEST_FETCH = 16


def in_database() -> bool:
    """Whether tasks' output is read from the database (PostgreSQL) rather than from files."""
    return not is_sqlite()


def mirror(runtime: Runtime, task: Task) -> None:
    """Copy what the task's output file on this machine holds beyond what is stored. Nothing
    when the file is another machine's (the task ran on another node) or gone; a file the relay
    may not read (docs/tasks.md#agent-output-files) is marked refused, not copied."""
    if not output_files.kept_here(runtime, task):
        return
    try:
        handle = output_files.open_output(runtime, task)
    except output_files.OutputRefused:
        Task.update(output_refused=True).where((Task.id == task.id) & ~Task.output_refused).execute()
        return
    except FileNotFoundError:
        return
    with handle, write_transaction():
        # Two copies of one task at once (its job, and the reconciler on the same machine)
        # take turns here instead of storing the same bytes twice.
        lock_rows(Task.select(Task.id).where(Task.id == task.id))
        copy_new_bytes(task.id, handle)


def mirror_reported(runtime: Runtime, turn_id: str) -> None:
    """`mirror` the running tasks an agent reported in this turn (their files are on the
    machine that runs the turn)."""
    for task in Task.select().where(
        (Task.started_by_turn == turn_id) & Task.command.is_null() & (Task.status == TaskStatus.RUNNING)
        & Task.output_path.is_null(False)
    ):
        mirror(runtime, task)


def copy_new_bytes(task_id: str, handle: BinaryIO) -> bool:
    """Store the bytes of `handle` past the stored end (inside a write transaction); True when
    any were stored. A file shorter than what is stored was replaced: it is stored anew."""
    size = os.fstat(handle.fileno()).st_size
    end, last = _stored_end(task_id)
    if size == end:
        return False
    if size < end:
        TaskOutputChunk.delete().where(TaskOutputChunk.task == task_id).execute()
        end, last = 0, None
    start = max(end, size - WINDOW_MAX_BYTES)
    if start > end:  # more arrived than is kept: only its end is
        TaskOutputChunk.delete().where(TaskOutputChunk.task == task_id).execute()
        last = None
    handle.seek(start)
    written_at = datetime.fromtimestamp(os.fstat(handle.fileno()).st_mtime, UTC).replace(tzinfo=None)
    append(task_id, start, handle.read(size - start), last, written_at)
    return True


def append(
    task_id: str, start: int, data: bytes, last: TaskOutputChunk | None = None, written_at: datetime | None = None,
) -> None:
    """Store `data` as the output's bytes from `start` on (inside a write transaction): the last
    piece filled up to `BLOCK_BYTES` (`last`, when it ends at `start`), then new pieces; pieces
    no tail read reaches any more are removed. The task's last output time becomes `written_at`
    (the file's), else now."""
    if last is not None and len(last.data) < BLOCK_BYTES:
        room = BLOCK_BYTES - len(last.data)
        TaskOutputChunk.update(data=bytes(last.data) + data[:room]).where(TaskOutputChunk.id == last.id).execute()
        start, data = start + min(room, len(data)), data[room:]
    rows = [
        {"task": task_id, "start": start + offset, "data": data[offset : offset + BLOCK_BYTES]}
        for offset in range(0, len(data), BLOCK_BYTES)
    ]
    if rows:
        TaskOutputChunk.insert_many(rows).execute()
    end = start + len(data)
    # Every piece but the last is full: one that ends before the kept window is not needed.
    TaskOutputChunk.delete().where(
        (TaskOutputChunk.task == task_id) & (TaskOutputChunk.start + BLOCK_BYTES <= end - WINDOW_MAX_BYTES)
    ).execute()
    Task.update(last_output_at=written_at or utcnow(), stall_reported=False).where(Task.id == task_id).execute()


def _stored_end(task_id: str) -> tuple[int, TaskOutputChunk | None]:
    """The offset after the last stored byte, and the last piece (None when nothing is stored)."""
    last = (
        TaskOutputChunk.select().where(TaskOutputChunk.task == task_id)
        .order_by(TaskOutputChunk.start.desc()).first()
    )
    return (0, None) if last is None else (last.start + len(last.data), last)


def pieces_from_the_end(task_id: str) -> Iterator[tuple[int, bytes]]:
    """The stored pieces `(start, data)`, last first, fetched a few at a time as a tail read
    asks for more: most reads need the last one only."""
    batch = FIRST_FETCH
    before: int | None = None
    while True:
        query = TaskOutputChunk.select(TaskOutputChunk.start, TaskOutputChunk.data).where(TaskOutputChunk.task == task_id)
        if before is not None:
            query = query.where(TaskOutputChunk.start < before)
        rows = list(query.order_by(TaskOutputChunk.start.desc()).limit(batch))
        for row in rows:
            yield row.start, bytes(row.data)
        if len(rows) < batch:
            return
        before = rows[-1].start
        batch = min(batch * 4, LARGEST_FETCH)


def forget(task_ids: list[str]) -> None:
    """Remove the stored output of these tasks (past the hour it stays readable)."""
    if task_ids:
        TaskOutputChunk.delete().where(TaskOutputChunk.task.in_(task_ids)).execute()
