"""The adapters over pinned libraries' internals (oar/core/peewee_internals.py,
oar/web/flask_internals.py, oar/engine/rq_internals.py, oar/providers/http_internals.py): each
function against the real library as installed, in this process. When a library upgrade moves an
internal, the test of the function that reads it fails here, before anything that relies on it.

peewee runs on an in-memory SQLite database of its own, Flask on an app of its own, the HTTP stack
against a local server; RQ needs Redis, so its tests run on the session's Redis on a queue of
their own.
"""

from __future__ import annotations

import http.server
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import peewee
import pytest
import requests
from flask import Flask
from playhouse.pool import PooledSqliteDatabase
from redis import Redis
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import JobStatus
from rq.scheduler import RQScheduler

from oar.core import peewee_internals
from oar.engine import rq_internals
from oar.providers import http_internals
from oar.web import flask_internals

# peewee -----------------------------------------------------------------------------------------

memory = peewee.SqliteDatabase(":memory:")


class Note(peewee.Model):
    title = peewee.CharField()
    stars = peewee.IntegerField(default=3)

    class Meta:
        database = memory


@pytest.fixture
def notes() -> Iterator[None]:
    with memory.bind_ctx([Note]), memory.connection_context():
        memory.create_tables([Note])
        Note.create(title="one", stars=1)
        Note.create(title="two", stars=2)
        yield
        memory.drop_tables([Note])


def test_it_reads_the_columns_a_query_selects(notes: None) -> None:
    assert peewee_internals.selected(Note.select(Note.title, Note.stars)) == [Note.title, Note.stars]
    flag = peewee.fn.EXISTS(Note.select()).alias("any")
    assert peewee_internals.selected(Note.select(Note.id, flag)) == [Note.id, flag]


def test_it_swaps_the_selected_columns_and_keeps_the_clauses(notes: None) -> None:
    query = Note.select().where(Note.stars > 1).order_by(Note.id)
    swapped = peewee_internals.selecting(query, [Note.title.alias("name")])
    assert swapped.tuples()[:] == [("two",)]
    assert peewee_internals.selected(query) == list(Note._meta.sorted_fields)  # the original is left as it was
    sql, _ = swapped.sql()
    assert sql.startswith('SELECT "t1"."title" AS "name" FROM "note"') and "WHERE" in sql and "ORDER BY" in sql


def test_it_reads_how_a_querys_rows_come_back(notes: None) -> None:
    assert peewee_internals.row_type(Note.select()) is None
    assert peewee_internals.row_type(Note.select().tuples()) == peewee.ROW.TUPLE
    assert peewee_internals.row_type(Note.select().namedtuples()) == peewee.ROW.NAMED_TUPLE
    assert peewee_internals.row_type(Note.select().dicts()) == peewee.ROW.DICT


def test_it_reads_an_aliases_name() -> None:
    assert peewee_internals.alias_name(peewee.fn.COUNT(Note.id).alias("how_many")) == "how_many"


def test_it_makes_rows_from_a_cursor_as_peewee_does(notes: None) -> None:
    query = Note.select().order_by(Note.id)
    cursor = memory.execute_sql(*query.sql())
    rows = list(peewee_internals.rows_from_cursor(query, cursor))
    assert [(type(row), row.title, row.stars) for row in rows] == [(Note, "one", 1), (Note, "two", 2)]


def test_it_reads_an_instances_stored_values(notes: None) -> None:
    row = Note.get(Note.title == "one")
    assert peewee_internals.stored_values(row) == {"id": row.id, "title": "one", "stars": 1}
    row.stars = 5
    assert peewee_internals.stored_values(row)["stars"] == 5


def test_it_makes_an_instance_as_read_from_the_database(notes: None) -> None:
    made = peewee_internals.instance_of(Note, {"id": 7, "title": "made"})
    assert isinstance(made, Note) and (made.id, made.title) == (7, "made")
    assert made.stars is None  # no default filled in: what was read is all it holds
    assert not made.is_dirty() and made.dirty_fields == []
    assert peewee_internals.stored_values(made) == {"id": 7, "title": "made"}


def test_it_says_whether_a_connection_context_holds_the_connection() -> None:
    local = peewee.SqliteDatabase(":memory:")
    assert not peewee_internals.in_connection_context(local)
    with local.connection_context():
        assert peewee_internals.in_connection_context(local)
    assert not peewee_internals.in_connection_context(local)


def _idle_connections(pool: PooledSqliteDatabase, count: int) -> None:
    """Make `count` connections at once (each thread takes its own), then give them all back."""
    together = threading.Barrier(count)

    def hold() -> None:
        pool.connect()
        together.wait(timeout=10)
        pool.close()

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)


def test_it_trims_a_pools_idle_connections_and_empties_a_pool(tmp_path: Path) -> None:
    # Connections made in other threads are closed here at the end.
    pool = PooledSqliteDatabase(str(tmp_path / "pool.db"), max_connections=None, check_same_thread=False)
    assert isinstance(peewee_internals.pool_lock(pool), type(threading.RLock()))
    _idle_connections(pool, 3)
    closed: list[object] = []
    with peewee_internals.pool_lock(pool):
        peewee_internals.trim_idle(pool, 1, closed.append)
    assert len(closed) == 2
    pool.connect()  # in use, by this thread: the one idle connection
    taken = peewee_internals.take_all_connections(pool)
    assert len(taken) == 1 and pool.is_closed()  # this thread's state was reset with the pool
    pool.connect()  # a new connection, the pool's records being empty
    pool.close()
    for connection in [*closed, *(getattr(record, "connection", record) for record in taken)]:
        connection.close()  # type: ignore[attr-defined]


# Flask ------------------------------------------------------------------------------------------


def test_it_reads_what_jsonify_was_given() -> None:
    app = Flask(__name__)
    provider = app.json
    assert flask_internals.response_value(provider, ({"a": 1},), {}) == {"a": 1}
    assert flask_internals.response_value(provider, (1, 2), {}) == (1, 2)
    assert flask_internals.response_value(provider, (), {"b": 2}) == {"b": 2}
    assert flask_internals.response_value(provider, (), {}) is None
    with pytest.raises(TypeError):
        flask_internals.response_value(provider, (1,), {"b": 2})


def test_it_finds_the_app_of_a_json_provider() -> None:
    app = Flask(__name__)
    found = flask_internals.app_of(app.json)
    assert found == app and found.response_class is app.response_class  # a weak proxy of the app


# The HTTP stack under requests ------------------------------------------------------------------


class Streaming(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"data: one\n\n")
        self.wfile.flush()
        self.server.done.wait(timeout=10)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_it_finds_the_socket_a_streamed_response_reads_from() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Streaming)
    server.done = threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        response = requests.get(f"http://127.0.0.1:{server.server_port}/", stream=True, timeout=10)
        sock = http_internals.socket_of(response)
        assert isinstance(sock, socket.socket) and sock.getpeername()[1] == server.server_port
        # Shutting it down is what wakes a read blocked on it (oar/providers/sse.py).
        sock.shutdown(socket.SHUT_RDWR)
        try:
            read = b"".join(response.iter_content(chunk_size=None))
        except requests.exceptions.ChunkedEncodingError:  # or the connection reads as reset: woken all the same
            read = b""
        assert read in (b"", b"data: one\n\n")
        response.close()
        assert http_internals.socket_of(response) is None
    finally:
        server.done.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


# RQ ---------------------------------------------------------------------------------------------


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    connection = Redis.from_url(redis_url)
    own = Queue(f"adapter-{uuid.uuid4().hex[:12]}", connection=connection)
    yield own
    own.empty()
    own.delete(delete_jobs=True)
    connection.close()


def test_it_prepares_and_performs_a_job_as_rq_does(queue: Queue) -> None:
    job = queue.enqueue("operator.add", 2, 3, result_ttl=60)
    worker = SimpleWorker([queue], connection=queue.connection)
    dequeued = worker.dequeue_job_and_maintain_ttl(timeout=1)
    assert dequeued is not None and dequeued[0].id == job.id
    execution = rq_internals.prepare_execution(worker, dequeued[0])
    assert isinstance(execution, Execution) and execution.job_id == job.id
    assert rq_internals.perform_job(worker, dequeued[0], dequeued[1], execution) is True
    job.refresh()
    assert job.get_status() == JobStatus.FINISHED and job.return_value() == 5


def test_it_records_a_schedulers_thread_where_rq_looks_for_it(queue: Queue) -> None:
    scheduler = RQScheduler([queue], connection=queue.connection)
    assert rq_internals.scheduler_thread(scheduler) is None
    thread = threading.Thread(target=lambda: None)
    rq_internals.scheduler_running_in(scheduler, thread)
    assert scheduler.status == scheduler.Status.STARTED
    assert rq_internals.scheduler_thread(scheduler) is thread
    # RQ's worker asks the scheduler's process whether it is alive, to restart a dead one.
    assert scheduler._process.is_alive() is False
