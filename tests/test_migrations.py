"""Migrations (docs/operations.md#durability-and-recovery): a migrated database has exactly the models' schema, on SQLite and on
PostgreSQL; `oar migrate` is idempotent; SQLite runs in WAL mode with a busy timeout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import peewee
import pytest
from playhouse.schema_diff import diff_models

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.owner.bootstrap import MIGRATIONS
from tests.support.all_models import ALL_MODELS as MODELS
from tests.support.processes import PROJECT
from tests.support.servers import create_postgres_database, drop_postgres_database, postgres_unreachable

MIGRATION_NAMES = sorted(path.stem for path in MIGRATIONS.glob("[0-9]*.py"))


# These tests bind the process-wide database proxy themselves (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("own_database_binding")


def oar_migrate(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def clean_environment(**values: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OAR_")}
    env.pop("DATABASE_URL", None)
    env.update(values)
    return env


def assert_schema_matches_the_models(db: peewee.Database) -> None:
    diff = diff_models(db, list(MODELS))
    assert not diff, f"migrated schema differs from oar.core.models:\n{diff}"
    # schema_diff does not look at nullability, primary keys or foreign keys; check those too.
    for model in MODELS:
        table = model._meta.table_name
        columns = {column.name: column for column in db.get_columns(table)}
        for field in model._meta.sorted_fields:
            column = columns[field.column_name]
            assert column.null == field.null, f"{table}.{field.column_name}: null={column.null}, model says {field.null}"
            assert column.primary_key == field.primary_key, f"{table}.{field.column_name}: primary key differs"
        wanted = {
            (field.column_name, field.rel_model._meta.table_name, field.rel_field.column_name)
            for field in model._meta.sorted_fields
            if isinstance(field, peewee.ForeignKeyField)
        }
        found = {(fk.column, fk.dest_table, fk.dest_column) for fk in db.get_foreign_keys(table)}
        assert found == wanted, f"{table}: foreign keys {found}, models say {wanted}"


def test_a_fresh_sqlite_database_migrates_to_the_models_schema_once(tmp_path: Path) -> None:
    env = clean_environment(OAR_DATA_DIR=str(tmp_path))
    first = oar_migrate(env)
    assert first == f"applied {len(MIGRATION_NAMES)} migrations: {', '.join(MIGRATION_NAMES)}"
    assert oar_migrate(env) == "database is up to date"

    db = open_database(Config(data_dir=tmp_path))
    with database.connection_context():
        assert_schema_matches_the_models(db)
        # The relay's connections: WAL, a busy timeout, and the other pragmas it asks for.
        assert db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == defaults.SQLITE_BUSY_SECONDS * 1000 > 0
        assert db.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert db.execute_sql("PRAGMA mmap_size").fetchone()[0] == 1 << 30  # pages read from a memory map
    # WAL is a property of the file: any connection, not only the relay's, finds it.
    raw = sqlite3.connect(tmp_path / "oar.db")
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_a_fresh_postgresql_database_migrates_to_the_models_schema_once(tmp_path: Path) -> None:
    missing = postgres_unreachable()
    if missing:
        pytest.skip(missing)
    url = create_postgres_database()
    try:
        env = clean_environment(OAR_DATA_DIR=str(tmp_path), DATABASE_URL=url)
        first = oar_migrate(env)
        assert first == f"applied {len(MIGRATION_NAMES)} migrations: {', '.join(MIGRATION_NAMES)}"
        assert oar_migrate(env) == "database is up to date"
        db = open_database(Config(data_dir=tmp_path, database_url=url))
        with database.connection_context():
            assert isinstance(db, peewee.PostgresqlDatabase)
            assert_schema_matches_the_models(db)
        if hasattr(db, "close_all"):
            db.close_all()
    finally:
        drop_postgres_database(url)
