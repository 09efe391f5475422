"""Task output kept in the database (docs/tasks.md#where-the-output-is-kept): what is stored reads as
the file reads, only the end a tail read can reach is kept, and a tail read fetches the last
pieces only, whatever the output's size. On the suite's database (SQLite or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from oar.background import output_files, output_store, task_recovery
from oar.background.task_output import BLOCK_BYTES, WINDOW_MAX_BYTES, Window, read_window, render, window_of
from oar.core.db import database, write_transaction
from oar.core.models import Task, TaskOutputChunk
from oar.core.timeutil import utcnow
from tests.support.clients import Agent
from tests.support.product_probes import has_output
from tests.support.relays import Relay

MB = 1024 * 1024


@pytest.fixture
def task_id(relay: Relay, desk: Agent) -> Iterator[str]:
    with database.connection_context():
        Task.create(id="tstore01", session=desk.session_id, description="store", command="true", status="running",
                    output_path="/nonexistent", started_at=utcnow())
        yield "tstore01"


def copy(task_id: str, path: Path) -> bool:
    with open(path, "rb") as handle, write_transaction():
        return output_store.copy_new_bytes(task_id, handle)


def stored_window(task_id: str, lines: int, max_bytes: int = WINDOW_MAX_BYTES) -> Window:
    return window_of(output_store.pieces_from_the_end(task_id), lines, max_bytes)


def stored_bytes(task_id: str) -> int:
    return sum(len(row.data) for row in TaskOutputChunk.select().where(TaskOutputChunk.task == task_id))


def test_output_copied_as_it_grows_reads_as_the_file_does(task_id: str, tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    written = b""
    with database.connection_context():
        # Writes of every size: within a piece, across pieces, more than the kept end at once.
        for step, size in enumerate([10, 3, BLOCK_BYTES - 20, 1, 5 * BLOCK_BYTES + 7, 2, WINDOW_MAX_BYTES + 3 * BLOCK_BYTES, 100]):
            written += b"".join(b"step %d line %d\n" % (step, n) for n in range(size // 16 + 1))[:size]
            path.write_bytes(written)
            assert copy(task_id, path) is True
            assert copy(task_id, path) is False  # nothing new: nothing written
            for lines in (1, 5, 50, 500):
                # Read in pieces of other bounds than the file's blocks, the same console lines.
                stored, from_file = render(stored_window(task_id, lines), lines), render(read_window(path, lines), lines)
                assert (stored.lines, stored.truncated) == (from_file.lines, from_file.truncated), (step, lines)
            assert stored_bytes(task_id) <= WINDOW_MAX_BYTES + BLOCK_BYTES
        assert stored_window(task_id, 50).at_start is False and stored_window(task_id, 50).size == len(written)


def test_a_file_replaced_by_a_shorter_one_is_stored_anew(task_id: str, tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    with database.connection_context():
        path.write_bytes(b"first run\n" * 1000)
        copy(task_id, path)
        path.write_bytes(b"second run\n")
        copy(task_id, path)
        assert render(stored_window(task_id, 50), 50).lines == ["second run"]
        assert stored_window(task_id, 50).at_start is True


def test_a_gigabyte_of_output_keeps_its_last_four_mebibytes_and_a_tail_fetches_one_piece(task_id: str, tmp_path: Path) -> None:
    """A sparse 1 GB file (the test writes little) with lines at its end: copying reads and
    stores the kept end only, and a 50-line tail takes the last stored piece alone."""
    path = tmp_path / "big.log"
    with open(path, "wb") as handle:
        handle.truncate(1024 * MB)
        handle.seek(0, 2)
        handle.write(b"\n" + b"".join(b"tail %d\n" % n for n in range(100)))
    with database.connection_context():
        copy(task_id, path)
        rows = TaskOutputChunk.select().where(TaskOutputChunk.task == task_id).count()
        assert rows == WINDOW_MAX_BYTES // BLOCK_BYTES
        taken = []

        def counted() -> Iterator[tuple[int, bytes]]:
            for piece in output_store.pieces_from_the_end(task_id):
                taken.append(piece[0])
                yield piece

        tail = render(window_of(counted(), 50), 50)
        assert tail.lines[-1] == "tail 99" and tail.truncated is True
        assert len(taken) == 1


def test_forgetting_removes_the_stored_output(task_id: str, tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_bytes(b"x\n" * 100_000)
    with database.connection_context():
        copy(task_id, path)
        assert has_output(task_id)
        output_store.forget([task_id])
        assert not has_output(task_id)
        assert stored_window(task_id, 50).size == 0


def test_each_machines_clock_removes_its_own_files_once_their_output_has_expired(relay: Relay, desk: Agent) -> None:
    """On PostgreSQL the clock that expires a task's output may run on another machine than the
    file: each machine removes its own files of tasks no longer readable, or no longer known."""
    folder = output_files.relay_folder(relay.runtime)
    folder.mkdir(parents=True, exist_ok=True)
    now = utcnow()
    with database.connection_context():
        for task_id, status, ended_at in (("trunning", "running", None), ("trecent1", "completed", now - timedelta(minutes=5)),
                                          ("texpired", "completed", now - timedelta(hours=2))):
            Task.create(id=task_id, session=desk.session_id, description="x", command="true", status=status,
                        started_at=now - timedelta(hours=3), ended_at=ended_at, output_path=str(folder / f"{task_id}.log"))
            (folder / f"{task_id}.log").write_text("output\n")
        (folder / "tunknown.log").write_text("a task deleted with its session\n")
        assert task_recovery.remove_expired_local_files(relay.runtime, now - timedelta(hours=1)) >= 2
    kept = {name: (folder / f"{name}.log").exists() for name in ("trunning", "trecent1", "texpired", "tunknown")}
    assert kept == {"trunning": True, "trecent1": True, "texpired": False, "tunknown": False}
