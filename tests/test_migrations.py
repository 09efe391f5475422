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
from playhouse.migrations import Runner
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


TEAM_ROWS = (
    ('INSERT INTO "session" ("id", "title", "provider", "mode", "archived", "deleted", "created_at", "last_activity_at", '
     '"message_count", "may_create_sessions", "loop_prompt_count", "created_by_session") '
     "VALUES ({p}, 't', 'echo', 'agent', {no}, {no}, {now}, {now}, 0, {no}, 0, {p})", [("root", None), ("child", "root")]),
    ('INSERT INTO "team_run" ("id", "started_by", "started_in_session", "created_at", "summary") '
     "VALUES ({p}, 'lead', {p}, {now}, {p})", [("2026-01-01-001-aaaa", "child", "12345"), ("2026-01-01-002-bbbb", None, None)]),
    ('INSERT INTO "team_message" ("id", "run_id", "from_agent", "content", "created_at") '
     "VALUES ({p}, '2026-01-01-001-aaaa', 'lead', {p}, {now})", [("m1", "abc")]),
    ('INSERT INTO "work_item" ("id", "run_id", "title", "description", "priority", "status", "created_by", "depth", '
     "\"created_at\", \"updated_at\") VALUES ({p}, '2026-01-01-001-aaaa', {p}, {p}, 'low', 'todo', 'lead', 0, {now}, {now})",
     [("t1", "Title", "desc")]),
    ("INSERT INTO \"team_memory\" (\"owner\", \"content\", \"updated_at\") VALUES ({p}, 'x', {now})", [("fe",)]),
)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_team_runs_made_before_teams_belong_to_their_starters_team(tmp_path: Path, kind: str) -> None:
    """0017: a run's team is the root of its starter's tree, its stored text is counted, and
    memory written before is nobody's."""
    url = None
    if kind == "postgresql":
        missing = postgres_unreachable()
        if missing:
            pytest.skip(missing)
        url = create_postgres_database()
    before = tmp_path / "before"
    before.mkdir()
    for name in MIGRATION_NAMES:
        if name < "0017":
            (before / f"{name}.py").write_text((MIGRATIONS / f"{name}.py").read_text(encoding="utf-8"), encoding="utf-8")
    try:
        db = open_database(Config(data_dir=tmp_path, database_url=url))
        with database.connection_context():
            Runner(db, str(before)).up()
            no = "0" if kind == "sqlite" else "FALSE"
            for statement, rows in TEAM_ROWS:
                for row in rows:
                    db.execute_sql(statement.format(p=db.param, no=no, now="CURRENT_TIMESTAMP"), row)
            assert Runner(db, str(MIGRATIONS)).up() == [name for name in MIGRATION_NAMES if name >= "0017"]
            runs = db.execute_sql('SELECT "id", "team_root", "text_chars" FROM "team_run" ORDER BY "id"').fetchall()
            # 3 (the message) + 5 + 4 (the task's title and description) + 5 (the summary).
            assert [tuple(row) for row in runs] == [("2026-01-01-001-aaaa", "root", 17), ("2026-01-01-002-bbbb", None, 0)]
            assert [tuple(row) for row in db.execute_sql('SELECT "owner", "team_root" FROM "team_memory"')] == [("fe", None)]
        if hasattr(db, "close_all"):
            db.close_all()
    finally:
        if url:
            drop_postgres_database(url)
