"""The database: a deferred peewee database, bound to SQLite or PostgreSQL at start.

No connection is opened at import time (workers fork). SQLite runs in WAL mode with a
busy timeout, and every write transaction takes the write lock up front
(``BEGIN IMMEDIATE``) so that two writers queue instead of failing with "database is
locked" halfway through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import peewee
from playhouse.db_url import connect as connect_url

from oar.config import Config

database = peewee.DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "busy_timeout": 30_000,  # ms: a writer waits for the lock instead of failing
    "foreign_keys": 1,
    "synchronous": "normal",  # durable across process crashes in WAL mode
    "cache_size": -16_000,  # KiB
}


def open_database(config: Config) -> peewee.Database:
    """Create the database object for `config` and bind the proxy to it."""
    if config.database_url:
        db = connect_url(config.database_url, autoconnect=True, autorollback=True)
    else:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        db = peewee.SqliteDatabase(
            str(config.sqlite_path), pragmas=SQLITE_PRAGMAS, timeout=30, autoconnect=True
        )
    database.initialize(db)
    return db


def is_sqlite() -> bool:
    return isinstance(database.obj, peewee.SqliteDatabase)


def write_transaction() -> peewee._atomic:
    """A write transaction that takes the write lock up front on SQLite."""
    if is_sqlite():
        return database.atomic("IMMEDIATE")
    return database.atomic()


@contextlib.contextmanager
def released_connection() -> Iterator[None]:
    """Give this thread's connection back while it waits for something else.

    Long waits must not hold a database connection (SPEC §7); the next query reopens it.
    Inside a transaction or an explicit `connection_context()` the connection is kept,
    since closing it there would end what the caller opened.
    """
    if not database.in_transaction() and not database._state.ctx:
        database.close()
    yield
