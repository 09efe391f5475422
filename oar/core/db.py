"""The database: a deferred peewee database, bound to SQLite or PostgreSQL at start.

`database` is process-wide on purpose: peewee models name their database when their class is
defined, so every query goes through this one proxy, bound by `open_database(config)` at each
entry point (docs/architecture.md#configuration-and-what-stays-process-wide). No connection is
opened at import time (workers fork). SQLite runs in WAL mode with a
busy timeout, and every write transaction takes the write lock up front
(``BEGIN IMMEDIATE``) so that two writers queue instead of failing with "database is
locked" halfway through (`write_transaction`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import peewee
from playhouse.db_url import connect as connect_url
from playhouse.db_url import parse as parse_url
from playhouse.pool import MaxConnectionsExceeded, PooledSqliteDatabase

from oar.core import peewee_internals
from oar.core.config import Config
from oar.core.logs import hide_sql_parameters

database = peewee.DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "synchronous": "normal",  # durable across process crashes in WAL mode
    "cache_size": -16_000,  # KiB
    # Pages are read from a shared memory map instead of a read() into each connection's own
    # cache: a page another connection or process read is there without a system call. SQLite
    # still writes through write() and reads the WAL with read()
    # (docs/decisions.md#reads-from-a-memory-map-request-bodies-by-orjson-listings-in-an-indexs-order-issue-14).
    "mmap_size": 1 << 30,
    # The clock copies the WAL back into the database every second (`checkpoint`); a commit
    # does it only past this many pages (40 MB), should the clock not run.
    "wal_autocheckpoint": 10_000,
}


# PostgreSQL: connections per process, shared by its threads. Threads hold one only while
# they use it (waits and running turns give theirs back), so a few serve many threads; a
# thread that finds them all in use waits for one instead of failing. The default fits
# the default process group (4 web + 4 worker processes + the clock) under PostgreSQL's
# default limit of 100 connections.
POSTGRES_POOL = {"max_connections": 8, "timeout": 30, "stale_timeout": 300}

# SQLite: connections given back (a wait going to sleep, a turn between writes) are kept open
# for the next query of any thread of the process, up to this many, instead of being closed.
# Closing the last connection of a WAL database checkpoints the WAL first, and opening one
# again costs the open, the pragmas and SQLite reading the schema: milliseconds a woken wait
# spent between the signal and its answer, and a turn on its final write
# (docs/waiting.md#how-waiting-wakes). An idle SQLite connection holds no lock and no snapshot.
SQLITE_IDLE_KEPT = 8
SQLITE_STALE_SECONDS = 300


class SqlitePool(PooledSqliteDatabase):
    """SQLite with given-back connections kept for reuse, at most `SQLITE_IDLE_KEPT` of them;
    no limit on connections in use (each thread that queries has its own, as without a pool)."""

    busy_ms = 30_000  # every connection's busy timeout (`open_database` sets it from the config)

    def _close(self, conn: Any, close_conn: bool = False) -> None:
        # peewee's own hook (oar/core/peewee_internals.py lists it for upgrades).
        with peewee_internals.pool_lock(self):
            super()._close(conn, close_conn)
            peewee_internals.trim_idle(self, SQLITE_IDLE_KEPT, self._close_raw)

    def forget_inherited(self) -> None:
        """In a forked child: never use the parent's connections (SQLite forbids carrying one
        across fork); they are dropped unclosed, and this process opens its own."""
        _abandoned.extend(peewee_internals.take_all_connections(self))


# Kept referenced so that the child never closes (finalizes) what belongs to its parent.
_abandoned: list[Any] = []
_pools: weakref.WeakSet[SqlitePool] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _writers, _short_reads
    for pool in list(_pools):
        pool.forget_inherited()
    _writers = threading.Lock()  # a thread of the parent may have held it: none runs here
    _short_reads = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def open_database(config: Config) -> peewee.Database:
    """Create the database object for `config` and bind the proxy to it."""
    hide_sql_parameters()
    if config.database_url:
        url = config.database_url
        scheme, sep, rest = url.partition("://")
        pool: dict[str, int] = {}
        if sep and scheme.removesuffix("+pool") in ("postgres", "postgresql"):
            url = f"{scheme.removesuffix('+pool')}+pool://{rest}"
            given = parse_url(url)  # values in the URL's query win
            pool = {name: value for name, value in POSTGRES_POOL.items() if name not in given}
        db = connect_url(url, autoconnect=True, autorollback=True, **pool)
    else:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        busy = config.time("SQLITE_BUSY_SECONDS")
        db = SqlitePool(
            str(config.sqlite_path),
            # busy_timeout (ms): a writer waits for the lock instead of failing at once.
            pragmas={**SQLITE_PRAGMAS, "busy_timeout": int(busy * 1000)}, timeout=busy, autoconnect=True,
            max_connections=None, stale_timeout=SQLITE_STALE_SECONDS,
            check_same_thread=False,  # a kept connection serves the next thread; one thread at a time
        )
        db.busy_ms = int(busy * 1000)
        _pools.add(db)
    database.initialize(db)
    return db


@contextlib.contextmanager
def without_lock_wait() -> Iterator[None]:
    """Statements inside do not wait for SQLite's write lock: one that finds it taken fails at
    once with "database is locked" (see `is_busy`). For writes that may be skipped and made
    later, e.g. partial reply text; SQLite's busy handler sleeps in growing steps (up to 100 ms)
    and would hold the turn's thread meanwhile. Elsewhere (PostgreSQL) it changes nothing."""
    if not is_sqlite():
        yield
        return
    with database.connection_context(), _busy_timeout_off(database.connection()):
        yield


@contextlib.contextmanager
def _busy_timeout_off(connection: Any) -> Iterator[None]:
    """Statements on `connection` inside find SQLite's write lock taken at once instead of
    waiting for it; then the pool's busy timeout again. On the driver's connection: peewee's
    own statement path costs more than the pragma."""
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        yield
    finally:
        connection.execute(f"PRAGMA busy_timeout = {database.obj.busy_ms}")


def is_busy(error: BaseException) -> bool:
    """The database could not be had in time: SQLite's write lock still held by another writer
    after the busy timeout ("database is locked"), or every pooled PostgreSQL connection in use.
    Not a bug: the call is answered 503 with Retry-After (docs/errors.md)."""
    if isinstance(error, MaxConnectionsExceeded):
        return True
    return isinstance(error, peewee.OperationalError) and any(
        words in str(error) for words in ("database is locked", "database is busy", "database table is locked")
    )


def is_sqlite() -> bool:
    return isinstance(database.obj, peewee.SqliteDatabase)


def lock_rows(query: peewee.ModelSelect[Any]) -> None:
    """Lock the selected rows for this transaction (PostgreSQL), before changing others.

    Transactions that change a session and its messages lock the session row first, so two
    of them never wait on each other in opposite orders (a deadlock). SQLite's write
    transactions hold the whole database already.
    """
    if not is_sqlite():
        list(query.for_update())


# How long the writer at the front of its process's queue sleeps between its tries at
# SQLite's write lock.
WRITE_LOCK_RETRY_SECONDS = 0.001

# The threads of one process that write queue here for SQLite's write lock, each woken as the
# one before it commits (docs/decisions.md#write-lock-queue).
_writers = threading.Lock()

# The short reads of one process's threads (`short_read`) run one at a time.
_short_reads = threading.Lock()


def short_read() -> contextlib.AbstractContextManager[Any]:
    """On SQLite, a few indexed queries of a call that does nothing else (no wait, no peer, no
    write: read_session, list_sessions) run one at a time per process.

    Python's sqlite3 module lets go of the GIL at each statement step. With several such reads
    at once in one process, each step handed the GIL to another request thread and back, a
    futex wake-up and a context switch each: four threads reading at once spent half as much
    CPU again per call as one (docs/decisions.md#short-reads-one-at-a-time-issue-14). Queued here they
    wait once each; the other processes keep the cores busy. On PostgreSQL the queries run in
    the server's processes, and the threads' waits on them overlap: nothing is queued."""
    if not is_sqlite():
        return contextlib.nullcontext()
    return _short_reads


def write_transaction() -> contextlib.AbstractContextManager[Any]:
    """A write transaction; inside another, a savepoint.

    On SQLite it takes the write lock up front (`BEGIN IMMEDIATE`), so that two writers queue
    instead of failing with "database is locked" halfway through. How they queue:
    - the threads of one process wait for their turn on a lock of the process's own, and the
      thread whose turn it is tries SQLite's lock, which only other processes can hold then;
    - it tries every `WRITE_LOCK_RETRY_SECONDS`, not by SQLite's busy handler, whose sleeps
      grow to 100 ms: a writer would wait up to 100 ms after the lock came free.
    Both waits together are bounded by the busy timeout; past it the transaction fails as
    busy (`is_busy`) and writes nothing. Once it holds the lock, its statements run with the
    busy timeout as before (docs/decisions.md#write-lock-queue).
    """
    if not is_sqlite() or database.in_transaction():
        return database.atomic()
    return _QueuedWrite()


class _QueuedWrite:
    """`write_transaction` on SQLite outside a transaction (a class: it is on every write's path)."""

    def __enter__(self) -> None:
        busy_seconds = database.obj.busy_ms / 1000
        if not _writers.acquire(timeout=busy_seconds):
            raise peewee.OperationalError("database is locked (other writers of this process held it past the busy timeout)")
        try:
            deadline = time.monotonic() + busy_seconds
            with _busy_timeout_off(database.connection()):
                while True:
                    transaction = database.atomic("IMMEDIATE")
                    try:
                        # A failed BEGIN leaves no transaction behind (peewee pushes it only after).
                        transaction.__enter__()
                        break
                    except peewee.OperationalError as error:
                        if not is_busy(error) or time.monotonic() >= deadline:
                            raise
                    time.sleep(WRITE_LOCK_RETRY_SECONDS)
        except BaseException:
            _writers.release()
            raise
        self._transaction = transaction

    def __exit__(self, *exc: Any) -> None:
        try:
            self._transaction.__exit__(*exc)
        finally:
            _writers.release()


def checkpoint() -> bool:
    """Copy SQLite's WAL back into the database (PASSIVE: it waits for nobody and blocks nobody).

    The clock does it every `SQLITE_CHECKPOINT_SECONDS`. By SQLite's default the commit that
    finds the WAL over 1,000 pages does it, in the committing thread: a turn's final write,
    with a caller waiting on it, then took milliseconds longer (the wake latency's p99 was
    these, docs/decisions.md#checkpoints-in-the-clock).

    Returns whether every frame of the WAL is in the database now (readers of older
    snapshots may keep some back until they finish)."""
    if not is_sqlite():
        return True
    _busy, frames, copied = database.execute_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return bool(copied >= frames)


def wal_state() -> tuple[int, int] | None:
    """The size and modification time of SQLite's WAL file, read without a connection: it
    changes with every commit, so a checkpoint after the last complete one has nothing to copy
    while it stays the same (the clock looks every second, an idle relay's most frequent
    wake-up). None where there is no such file."""
    if not is_sqlite():
        return None
    try:
        found = os.stat(f"{database.obj.database}-wal")
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


@contextlib.contextmanager
def released_connection() -> Iterator[None]:
    """Give this thread's connection back while it waits for something else.

    Long waits must not hold a database connection (docs/waiting.md#how-waiting-wakes); the next query reopens it.
    Inside a transaction or an explicit `connection_context()` the connection is kept,
    since closing it there would end what the caller opened.
    """
    release_connection()
    yield


def release_connection() -> None:
    """Give this thread's connection back (to the pool on PostgreSQL) between uses.

    Kept inside a transaction or an explicit `connection_context()`; the next query takes
    a connection again.
    """
    if not database.in_transaction() and not peewee_internals.in_connection_context(database):
        database.close()
