"""A cheap, exact fingerprint of a relay's database: how many writes each table has had.

The harness (never the product) installs, for every table of the relay, triggers that append
one row to a test-only log table for each row inserted, deleted, or updated so that a value
changed. `fingerprint()` counts the log per table: equal before and after a call means the call
changed no row of any table. It replaces comparing every row of every table: one small query
instead of reading the whole database twice.

Why a log of rows, not a counter per table: on PostgreSQL a counter row would be locked by
every transaction that writes its table until it commits, so two workers writing two tables in
opposite orders could deadlock on the counters where the tables alone never would. Appending
rows takes no shared lock, and a rolled-back write leaves no row behind, as it leaves no change.

Why an update that changes nothing is not counted, nor one that moves only `heartbeat_at`: a
turn waiting on a question has a worker that moves its heartbeat on while the cases run; that
is the worker being alive, not a change a call made (the full snapshot left it out too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import peewee

from oar.core.db import database
from tests.support.all_models import ALL_MODELS

LOG = "oar_test_writes"
FUNCTION = "oar_test_count_write"
IGNORED_COLUMNS = frozenset({"heartbeat_at"})


def tables() -> list[str]:
    return [model._meta.table_name for model in ALL_MODELS]


def _is_postgres() -> bool:
    return isinstance(database.obj, peewee.PostgresqlDatabase)


def _trigger(table: str, event: str) -> str:
    return f"{LOG}_{table}_{event}"


def install() -> None:
    """Create the log table and every table's triggers (again, if they are there)."""

    def steps() -> None:
        uninstall_in_transaction()
        if _is_postgres():
            _install_postgres()
        else:
            _install_sqlite()

    _in_one_transaction(steps)


def uninstall() -> None:
    """Drop the triggers and the log: the relay's schema as migrations left it."""
    _in_one_transaction(uninstall_in_transaction)


def _in_one_transaction(steps: Callable[[], None], attempts: int = 5) -> None:
    """`steps` in one transaction. On PostgreSQL each CREATE or DROP TRIGGER locks its table in
    turn while the shared relay's workers write theirs: the server may end the one or the other
    in a deadlock. Ours rolls back whole, and runs again."""
    for attempt in range(1, attempts + 1):
        try:
            with database.connection_context(), database.atomic():
                steps()
            return
        except Exception as error:  # psycopg2's DeadlockDetected, which peewee passes on unwrapped
            if "deadlock detected" not in str(error) or attempt == attempts:
                raise


def uninstall_in_transaction() -> None:
    for table in tables():
        for event in ("insert", "update", "delete", "truncate"):
            if _is_postgres():
                database.execute_sql(f'DROP TRIGGER IF EXISTS {_trigger(table, event)} ON "{table}"')
            else:
                database.execute_sql(f"DROP TRIGGER IF EXISTS {_trigger(table, event)}")
    if _is_postgres():
        database.execute_sql(f"DROP FUNCTION IF EXISTS {FUNCTION}() CASCADE")
    database.execute_sql(f"DROP TABLE IF EXISTS {LOG}")


def _install_sqlite() -> None:
    database.execute_sql(f"CREATE TABLE {LOG} (table_name TEXT NOT NULL)")
    log_row = "INSERT INTO {log} (table_name) VALUES ('{table}');"
    for table in tables():
        columns = [c.name for c in database.get_columns(table) if c.name not in IGNORED_COLUMNS]
        changed = " OR ".join(f'OLD."{name}" IS NOT NEW."{name}"' for name in columns)
        append = log_row.format(log=LOG, table=table)
        database.execute_sql(f'CREATE TRIGGER {_trigger(table, "insert")} AFTER INSERT ON "{table}" BEGIN {append} END')
        database.execute_sql(f'CREATE TRIGGER {_trigger(table, "delete")} AFTER DELETE ON "{table}" BEGIN {append} END')
        database.execute_sql(
            f'CREATE TRIGGER {_trigger(table, "update")} AFTER UPDATE ON "{table}" FOR EACH ROW WHEN {changed} '
            f"BEGIN {append} END"
        )


def _install_postgres() -> None:
    database.execute_sql(f"CREATE TABLE {LOG} (table_name TEXT NOT NULL)")
    ignored = " - ".join(f"'{name}'" for name in sorted(IGNORED_COLUMNS))
    # Rows compared as JSON, so that columns of types without an equality operator (json) compare too.
    database.execute_sql(f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' THEN
                IF (to_jsonb(OLD) - {ignored}) = (to_jsonb(NEW) - {ignored}) THEN
                    RETURN NULL;
                END IF;
            END IF;
            INSERT INTO {LOG} (table_name) VALUES (TG_TABLE_NAME);
            RETURN NULL;
        END $$""")
    for table in tables():
        for event in ("insert", "update", "delete"):
            database.execute_sql(
                f'CREATE TRIGGER {_trigger(table, event)} AFTER {event.upper()} ON "{table}" '
                f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
            )
        database.execute_sql(
            f'CREATE TRIGGER {_trigger(table, "truncate")} AFTER TRUNCATE ON "{table}" '
            f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
        )


def fingerprint() -> dict[str, int]:
    """Writes per table since `install()`: equal before and after = no row of any table changed."""
    with database.connection_context():
        cursor = database.execute_sql(f"SELECT table_name, COUNT(*) FROM {LOG} GROUP BY table_name")
        return {name: count for name, count in cursor.fetchall()}


@contextmanager
def counting_writes() -> Iterator[None]:
    """The triggers while the block runs (a module of cases), and the plain schema afterwards."""
    install()
    try:
        yield
    finally:
        uninstall()
