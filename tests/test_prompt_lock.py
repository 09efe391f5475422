"""A firing's write transaction tries SQLite's write lock again by itself, often, instead of by
SQLite's busy handler, whose sleeps grow to 100 ms (docs/decisions.md#prompt-lock-for-firings).

Real SQLite files in a temporary folder; another connection holds the write lock.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import peewee
import pytest

from oar.core.config import Config
from oar.core.db import database, is_busy, open_database, prompt_write_transaction
from tests.support.clients import poll

# These tests bind the process-wide database proxy themselves (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("own_database_binding")


def _sqlite(tmp_path: Path, busy_seconds: float = 30) -> Path:
    open_database(Config(data_dir=tmp_path, times={"SQLITE_BUSY_SECONDS": busy_seconds}))
    database.execute_sql("CREATE TABLE note (text TEXT)")
    return tmp_path / "oar.db"


def _count_begins(begins: list[str]) -> None:
    database.connection().set_trace_callback(
        lambda statement: begins.append(statement) if statement.startswith("BEGIN") else None
    )


def test_the_writer_tries_the_lock_again_itself_and_writes_once_it_is_free(tmp_path: Path) -> None:
    path = _sqlite(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    begins: list[str] = []
    done = threading.Event()
    failed: list[peewee.PeeweeException] = []

    def write() -> None:
        try:
            _count_begins(begins)  # on this thread's connection
            with prompt_write_transaction():
                database.execute_sql("INSERT INTO note VALUES ('fired')")
            database.connection().set_trace_callback(None)
        except peewee.PeeweeException as error:  # reported below, in the test's thread
            failed.append(error)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    # Tried again and again while the lock is held (SQLite's own handler would retry inside
    # one BEGIN statement, sleeping up to 100 ms between its tries).
    poll("the writer tried the lock several times", lambda: len(begins) >= 3)
    assert not done.is_set()
    holder.execute("COMMIT")
    assert done.wait(30) and not failed, failed
    writer.join()
    assert database.execute_sql("SELECT text FROM note").fetchall() == [("fired",)]
    # The busy timeout is back for the transaction's statements and everything else.
    assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 30_000
    holder.close()


def test_a_lock_held_past_the_busy_timeout_fails_as_busy_and_writes_nothing(tmp_path: Path) -> None:
    path = _sqlite(tmp_path, busy_seconds=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(peewee.OperationalError) as raised:
            with prompt_write_transaction():
                database.execute_sql("INSERT INTO note VALUES ('fired')")
        assert is_busy(raised.value)
        assert not database.in_transaction()
        assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with prompt_write_transaction():
        database.execute_sql("INSERT INTO note VALUES ('later')")
    assert database.execute_sql("SELECT text FROM note").fetchall() == [("later",)]
