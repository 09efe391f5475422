"""A write transaction waits for SQLite's write lock in its process's queue, and the writer at
its front tries the lock again by itself, often, instead of by SQLite's busy handler, whose
sleeps grow to 100 ms (docs/decisions.md#write-lock-queue).

Real SQLite files in a temporary folder; another connection, or another thread, holds the lock.
"""

from __future__ import annotations

import gc
import linecache
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import peewee
import pytest

from oar.core import db
from oar.core.config import Config
from oar.core.db import database, is_busy, open_database, write_transaction
from tests.support.clients import poll

# These tests bind the process-wide database proxy themselves (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("own_database_binding")


def _sqlite(tmp_path: Path, busy_seconds: float = 30) -> Path:
    open_database(Config(data_dir=tmp_path, times={"SQLITE_BUSY_SECONDS": busy_seconds}))
    database.execute_sql("CREATE TABLE note (text TEXT)")
    return tmp_path / "oar.db"


def _waiting_in_queue(thread: threading.Thread) -> bool:
    """The thread is blocked taking its process's writer queue (`db._writers`), as its stack shows."""
    frame = _frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code is db._QueuedWrite.__enter__.__code__:
            return "_writers.acquire" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return False


def _frames() -> dict[int, Any]:
    """`sys._current_frames()` with the garbage collector off: in Python 3.11 a collection
    it triggers, while it holds the interpreter's list of threads, can wait for that same
    list in a finalizer and hang the process (CPython gh-106883, not fixed in 3.11; it hung
    a CI run here). From 3.12 the collector runs only between bytecodes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


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
            with write_transaction():
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
            with write_transaction():
                database.execute_sql("INSERT INTO note VALUES ('fired')")
        assert is_busy(raised.value)
        assert not database.in_transaction()
        assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with write_transaction():
        database.execute_sql("INSERT INTO note VALUES ('later')")
    assert database.execute_sql("SELECT text FROM note").fetchall() == [("later",)]


def test_threads_of_one_process_wait_their_turn_without_trying_the_lock(tmp_path: Path) -> None:
    _sqlite(tmp_path)
    holding, release = threading.Event(), threading.Event()
    begins: list[str] = []
    written = threading.Event()

    def hold() -> None:
        with write_transaction():
            database.execute_sql("INSERT INTO note VALUES ('first')")
            holding.set()
            release.wait(30)
        database.close()

    def write() -> None:
        _count_begins(begins)
        with write_transaction():
            database.execute_sql("INSERT INTO note VALUES ('second')")
        database.connection().set_trace_callback(None)
        database.close()
        written.set()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    writer = threading.Thread(target=write)
    writer.start()
    # Waiting behind the holder in the process's queue: not one try at SQLite's lock meanwhile
    # (the holder's own commit is what the writer waits for, and it is told at once).
    poll("the writer waits in its process's queue", lambda: _waiting_in_queue(writer))
    assert begins == [] and not written.is_set()
    release.set()
    assert written.wait(30)
    holder.join()
    writer.join()
    assert begins == ["BEGIN IMMEDIATE"]
    assert database.execute_sql("SELECT text FROM note ORDER BY rowid").fetchall() == [("first",), ("second",)]


def test_inside_a_transaction_it_is_a_savepoint_and_waits_for_nothing(tmp_path: Path) -> None:
    _sqlite(tmp_path)
    with write_transaction():
        database.execute_sql("INSERT INTO note VALUES ('outer')")
        with pytest.raises(RuntimeError):
            with write_transaction():  # the process's queue is held by this thread: not taken again
                database.execute_sql("INSERT INTO note VALUES ('inner')")
                raise RuntimeError("undo the savepoint only")
    assert database.execute_sql("SELECT text FROM note").fetchall() == [("outer",)]
