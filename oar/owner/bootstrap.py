"""Bringing a relay's database up to date and making sure it has an owner token.

Several nodes of one relay may start at once on one database (docs/operations.md#upgrading):
the migrations run under a lock, so one node applies them and the others find them applied.
A node whose code is older than the database (it holds a migration this code does not know)
refuses to start, saying so, rather than run on a schema it was not written for.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import weakref
from collections.abc import Iterator
from pathlib import Path

import peewee
from playhouse.migrations import Migration, Runner

from oar import __version__, providers
from oar.core import ids, settings
from oar.core.config import Config
from oar.core.db import database, is_sqlite, write_transaction

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
# The PostgreSQL advisory lock the migrations run under ("oarmigra" in ASCII, as a bigint).
MIGRATION_LOCK = 0x6F61726D69677261


class NewerSchema(Exception):
    """The database holds migrations this code does not know: a newer version migrated it."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        named = ", ".join(unknown)
        super().__init__(
            f"The database was migrated by a newer version of the relay: it has "
            f"{'migration' if len(unknown) == 1 else 'migrations'} {named}, which this relay (version "
            f"{__version__}) does not know. Upgrade this node to the version the other nodes run (or a newer "
            "one); it did not start, and the database was not changed."
        )


def migrate() -> list[str]:
    """Apply pending migrations, one process at a time; returns their names. Raises NewerSchema
    (and applies nothing) when the database is newer than this code."""
    with _migrating():
        runner = Runner(database.obj, str(MIGRATIONS))
        _refuse_unknown(runner)
        applied = runner.up()
        with write_transaction():
            providers.ensure_builtin()
    return applied


def pending_migrations() -> list[str]:
    runner = Runner(database.obj, str(MIGRATIONS))
    return [m.name for m in runner.status() if m.applied is None and m.path is not None]


def unknown_migrations() -> list[str]:
    """Migrations the database records that this code has no file for."""
    return [m.name for m in Runner(database.obj, str(MIGRATIONS)).status() if m.path is None]


# The history table playhouse's Runner keeps (its default name).
HISTORY_TABLE = "schema_migration"


@functools.cache
def _migration_files() -> frozenset[str]:
    """The migrations this code has, read once per process: they change only with the code."""
    return frozenset(m.name for m in Migration.load_directory(str(MIGRATIONS)))


# The databases this process has found with every migration of its code applied.
_up_to_date: weakref.WeakSet[peewee.Database] = weakref.WeakSet()


def pending_for_health() -> list[str]:
    """The migrations not applied, for `/healthz`, which probes ask many times a second: once this
    process has found none, it does not ask again. Migrations are only ever applied, never taken
    back, so none can become pending for this code; a newer node's are `/readyz`'s to report."""
    if database.obj in _up_to_date:
        return []
    pending, _unknown = migration_state()
    if not pending:
        _up_to_date.add(database.obj)
    return pending


def migration_state() -> tuple[list[str], list[str]]:
    """(pending, unknown): the migrations this code has and the database has not applied, and
    those the database records that this code has no file for. One query of the history table,
    for the health checks that ask on every probe (a Runner builds a model class, asks whether
    the table exists, reads it and lists the folder each time). A database without the table
    (never migrated) is asked the long way, which knows that case."""
    try:
        rows = database.execute_sql(f'SELECT "name" FROM "{HISTORY_TABLE}"').fetchall()
    except peewee.DatabaseError:
        if not database.is_closed() and not is_sqlite():
            database.rollback()  # PostgreSQL refuses the transaction's next statement otherwise
        return pending_migrations(), unknown_migrations()
    applied = {row[0] for row in rows}
    known = _migration_files()
    return sorted(known - applied), sorted(applied - known)


def refuse_newer_schema() -> None:
    """Raise NewerSchema when the bound database is newer than this code; a web, worker or clock
    checks at its start. A database that does not answer is not checked here (logged): the
    process starts, and its health check says so. No connection is kept (processes fork after)."""
    try:
        with database.connection_context():
            _refuse_unknown(Runner(database.obj, str(MIGRATIONS)))
    except peewee.PeeweeException as error:
        log.warning("the database's migrations were not checked at start: %s: %s", type(error).__name__, error)
    finally:
        close_idle = getattr(database.obj, "close_idle", None)
        if close_idle is not None:
            close_idle()


def _refuse_unknown(runner: Runner) -> None:
    unknown = [m.name for m in runner.status() if m.path is None]
    if unknown:
        raise NewerSchema(unknown)


@contextlib.contextmanager
def _migrating() -> Iterator[None]:
    """A connection held under the migration lock, so one process at a time migrates. On
    PostgreSQL an advisory lock of the connection's session (released when it ends, however the
    process does). On SQLite, whose file only one machine opens, a lock on a file beside it, taken
    before the connection opens: opening sets the WAL journal mode, and a second process doing so
    while the first writes the new database gets "database is locked" without its busy timeout."""
    if is_sqlite():
        with open(f"{database.obj.database}.migrate-lock", "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            with database.connection_context():
                yield
        return
    with database.connection_context():
        database.execute_sql("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            yield
        finally:
            database.execute_sql("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def ensure_owner_token(config: Config) -> str | None:
    """The owner token: from OAR_OWNER_TOKEN, or generated once and stored hashed.

    Returns a newly generated token (to print once), else None.
    """
    if config.owner_token:
        return None
    with database.connection_context():
        if settings.get_value(settings.OWNER_TOKEN_HASH_KEY):
            return None
        token = ids.new_token("o")
        settings.set_value(settings.OWNER_TOKEN_HASH_KEY, ids.hash_token(token))
    return token


def reset_owner_token() -> str:
    """A new owner token, replacing the stored one (`oar token --owner`)."""
    token = ids.new_token("o")
    with database.connection_context():
        settings.set_value(settings.OWNER_TOKEN_HASH_KEY, ids.hash_token(token))
    return token
