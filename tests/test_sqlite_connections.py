"""SQLite connections given back are kept for the next query (docs/waiting.md#how-waiting-wakes).

A wait gives its connection back while it sleeps; the query it makes when woken takes a kept
one instead of opening the file again (open, pragmas, schema) and, being the last connection,
closing it would have checkpointed the WAL first. Real SQLite files in a temporary folder.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from oar.core.config import Config
from oar.core.db import SQLITE_IDLE_KEPT, database, open_database, release_connection, released_connection

# These tests bind the process-wide database proxy themselves (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("own_database_binding")


@pytest.fixture
def sqlite(tmp_path: Path) -> Path:
    open_database(Config(data_dir=tmp_path))
    database.execute_sql("CREATE TABLE note (text TEXT)")
    database.execute_sql("INSERT INTO note VALUES ('one')")
    release_connection()
    return tmp_path / "oar.db"


def _connection() -> Any:
    database.execute_sql("SELECT count(*) FROM note").fetchone()
    return database.connection()


def test_a_connection_given_back_serves_the_next_query_of_any_thread(sqlite: Path) -> None:
    first = _connection()
    with released_connection():
        pass
    assert _connection() is first
    release_connection()
    other: list[Any] = []
    thread = threading.Thread(target=lambda: (other.append(_connection()), release_connection()))
    thread.start()
    thread.join()
    assert other == [first]
    # Given back, the last connection was not closed: closing it would have checkpointed and
    # removed the WAL, work a woken wait would do before its answer.
    assert Path(f"{sqlite}-wal").exists()


def test_at_most_a_few_given_back_connections_stay_open(sqlite: Path) -> None:
    threads = SQLITE_IDLE_KEPT + 4
    together = threading.Barrier(threads)
    seen: list[Any] = []

    def query() -> None:
        seen.append(_connection())
        together.wait(timeout=30)  # all hold one at once
        release_connection()

    workers = [threading.Thread(target=query) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len({id(conn) for conn in seen}) == threads
    kept = database.obj._connections
    assert len(kept) == SQLITE_IDLE_KEPT
    closed = [conn for conn in seen if all(conn is not k for _, _, k in kept)]
    for conn in closed:
        with pytest.raises(Exception, match="closed"):
            conn.execute("SELECT 1")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_opens_its_own_connections(sqlite: Path) -> None:
    parents = _connection()
    release_connection()
    child = os.fork()
    if child == 0:  # the child: exit status 0 only if it used a connection of its own
        try:
            mine = _connection()
            os._exit(0 if mine is not parents and database.execute_sql("SELECT 1").fetchone() == (1,) else 3)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit status
            os._exit(4)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _connection() is parents  # still the parent's, and still usable
