"""The database: a deferred peewee database, bound to SQLite or PostgreSQL at start.

No connection is opened at import time (workers fork). SQLite runs in WAL mode with a
busy timeout, and every write transaction takes the write lock up front
(``BEGIN IMMEDIATE``) so that two writers queue instead of failing with "database is
locked" halfway through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import peewee
from playhouse.db_url import connect as connect_url
from playhouse.db_url import parse as parse_url
from playhouse.pool import PooledSqliteDatabase

from oar.core.config import Config

database = peewee.DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "busy_timeout": 30_000,  # ms: a writer waits for the lock instead of failing
    "foreign_keys": 1,
    "synchronous": "normal",  # durable across process crashes in WAL mode
    "cache_size": -16_000,  # KiB
}


# PostgreSQL: connections per process, shared by its threads. Threads hold one only while
# they use it (waits and running turns give theirs back), so a few serve many threads; a
# thread that finds them all in use waits for one instead of failing. The default fits
# the default process group (4 web + 2 worker processes + the clock) under PostgreSQL's
# default limit of 100 connections.
POSTGRES_POOL = {"max_connections": 8, "timeout": 30, "stale_timeout": 300}


# SQLite in the web processes: connections kept open between requests, one thread at a time
# each, instead of opening one (and setting its pragmas) for every request: that was a fifth
# of a read's time (docs/decisions.md#reads-at-scale). No upper bound, so a request never waits
# for one, as before; a connection unused for five minutes is closed when next taken.
SQLITE_POOL = {"max_connections": None, "stale_timeout": 300, "check_same_thread": False}


def open_database(config: Config, *, pooled: bool = False) -> peewee.Database:
    """Create the database object for `config` and bind the proxy to it.

    `pooled`: keep SQLite connections between uses (the web app). Not for processes that
    fork after using the database (an RQ worker's job process must not inherit them).
    """
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
        kind = PooledSqliteDatabase if pooled else peewee.SqliteDatabase
        extra: dict[str, Any] = SQLITE_POOL if pooled else {}
        db = kind(str(config.sqlite_path), pragmas=SQLITE_PRAGMAS, timeout=30, autoconnect=True, **extra)
    database.initialize(db)
    return db


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


def write_transaction() -> peewee._atomic:
    """A write transaction that takes the write lock up front on SQLite."""
    if is_sqlite():
        return database.atomic("IMMEDIATE")
    return database.atomic()


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
    if not database.in_transaction() and not database._state.ctx:
        database.close()
