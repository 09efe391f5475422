"""SQLite's WAL is copied back into the database by the clock's checkpoints, not by the commit
that finds it long (docs/decisions.md#checkpoints-in-the-clock). Real SQLite files in a
temporary folder.

A complete checkpoint lets the next writer start the WAL over, which bumps the checkpoint
sequence number in the WAL's header (bytes 12–15): the number says whether one happened.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from oar.core.config import Config
from oar.core.db import checkpoint, database, open_database, wal_state, write_transaction
from oar.core.runtime import Runtime
from oar.engine.clock import checkpoint_loop
from tests.support.clients import poll

pytestmark = pytest.mark.usefixtures("own_database_binding")


def _wal_sequence(path: Path) -> int:
    return int(struct.unpack(">I", (path.parent / (path.name + "-wal")).read_bytes()[12:16])[0])


def _write(rows: int) -> None:
    with write_transaction():
        for number in range(rows):
            database.execute_sql("INSERT INTO note (text) VALUES (?)", [f"note {number} " * 50])


def test_commits_leave_the_wal_to_the_clock_which_checkpoints_it(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, times={"SQLITE_CHECKPOINT_SECONDS": 0.05})
    open_database(config)
    database.execute_sql("CREATE TABLE note (text TEXT)")
    path = tmp_path / "oar.db"
    first = _wal_sequence(path)
    for _ in range(60):  # some 1,600 pages: past SQLite's default of checkpointing at 1,000
        _write(200)
    _write(1)
    assert _wal_sequence(path) == first, "a commit checkpointed the WAL itself"

    stopping = threading.Event()
    clock = threading.Thread(target=checkpoint_loop, args=(Runtime(config, needs_redis=False), stopping), daemon=True)
    clock.start()
    try:
        def started_over() -> bool:
            _write(1)  # after a complete checkpoint, this write starts the WAL over
            return _wal_sequence(path) > first

        poll("the clock's checkpoint", started_over, seconds=30)
    finally:
        stopping.set()
        clock.join(timeout=10)


def test_the_wal_looks_the_same_until_the_next_commit_so_a_checkpoint_is_skipped_till_then(tmp_path: Path) -> None:
    open_database(Config(data_dir=tmp_path))
    database.execute_sql("CREATE TABLE note (text TEXT)")
    _write(10)
    assert checkpoint(), "nothing reads: every frame is copied"
    copied = wal_state()
    assert copied is not None
    assert checkpoint() and wal_state() == copied, "a checkpoint leaves the WAL file as it was"
    _write(1)
    assert wal_state() != copied
