"""Migrations with several nodes (docs/operations.md#upgrading): nodes starting at once migrate
once, and a node older than the database refuses to start, saying so, with status non-zero and
no traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playhouse.migrations import Runner

from oar.core.config import Config
from oar.core.db import database, open_database
from oar.owner.bootstrap import MIGRATIONS
from tests.support.clients import poll
from tests.support.processes import PROJECT
from tests.support.servers import (
    create_postgres_database,
    drop_postgres_database,
    free_port,
    postgres_database,
    postgres_unreachable,
)
from tests.test_migrations import MIGRATION_NAMES, clean_environment

pytestmark = pytest.mark.usefixtures("own_database_binding")

FUTURE = "9999_from_a_newer_version"
OWNER_TOKEN = "oar_o_upgrade-test-token-0123456789abcdefghij"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    missing = postgres_unreachable()
    if missing:
        pytest.skip(missing)
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def node_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A node's environment on an empty database of either kind."""
    env = clean_environment(OAR_DATA_DIR=str(tmp_path / "data"), OAR_OWNER_TOKEN=OWNER_TOKEN,
                            REDIS_URL="redis://127.0.0.1:1/0")
    if request.param == "sqlite":
        yield env
        return
    missing = postgres_unreachable()
    if missing:
        pytest.skip(missing)
    url = create_postgres_database()
    try:
        yield {**env, "DATABASE_URL": url}
    finally:
        drop_postgres_database(url)


def start_migrate(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out.strip(), err


def recorded_migrations(env: dict[str, str]) -> list[str]:
    open_database(Config(data_dir=Path(env["OAR_DATA_DIR"]), database_url=env.get("DATABASE_URL")))
    with database.connection_context():
        names = [row[0] for row in database.execute_sql('SELECT "name" FROM "schema_migration" ORDER BY "name"')]
    if hasattr(database.obj, "close_all"):
        database.obj.close_all()
    return names


def test_two_nodes_migrating_an_empty_database_at_once_apply_each_migration_once(node_env: dict[str, str]) -> None:
    first, second = start_migrate(node_env), start_migrate(node_env)
    results = sorted([finished(first), finished(second)], key=lambda result: result[1])
    assert [code for code, _, _ in results] == [0, 0], results
    everything = f"applied {len(MIGRATION_NAMES)} migrations: {', '.join(MIGRATION_NAMES)}"
    assert [out for _, out, _ in results] == [everything, "database is up to date"], results
    assert recorded_migrations(node_env) == MIGRATION_NAMES


def test_nodes_upgrading_an_older_database_at_once_wait_for_one_another(postgres_url: str, tmp_path: Path) -> None:
    """Made certain on PostgreSQL: the database is one migration behind, and the test holds a
    lock on the table that migration changes until both nodes are waiting; then one applies it
    and the other finds it applied. (Before the migration lock, both applied it, and the second
    failed on the table or column the first had made.)"""
    older = tmp_path / "older"
    older.mkdir()
    for name in MIGRATION_NAMES[:-1]:
        (older / f"{name}.py").write_text((MIGRATIONS / f"{name}.py").read_text(encoding="utf-8"), encoding="utf-8")
    db = open_database(Config(data_dir=tmp_path, database_url=postgres_url))
    with database.connection_context():
        Runner(db, str(older)).up()
    if hasattr(db, "close_all"):
        db.close_all()
    env = clean_environment(OAR_DATA_DIR=str(tmp_path / "data"), DATABASE_URL=postgres_url)
    holder = postgres_database(postgres_url)
    holder.connect()
    watcher = postgres_database(postgres_url)
    try:
        with holder.atomic():
            holder.execute_sql('LOCK TABLE "task" IN ACCESS EXCLUSIVE MODE')
            nodes = [start_migrate(env), start_migrate(env)]

            def both_waiting() -> bool:
                for node in nodes:
                    assert node.poll() is None, finished(node)
                waiting = watcher.execute_sql(
                    "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) "
                    "WHERE NOT granted AND datname = current_database()"
                ).fetchone()[0]
                return waiting == 2

            poll("both nodes to wait", both_waiting, seconds=60)
        results = sorted([finished(node) for node in nodes], key=lambda result: result[1])
    finally:
        holder.close()
        watcher.close()
    assert [code for code, _, _ in results] == [0, 0], results
    assert [out for _, out, _ in results] == [f"applied 1 migrations: {MIGRATION_NAMES[-1]}", "database is up to date"]
    assert recorded_migrations(env) == MIGRATION_NAMES


# A node older than the database --------------------------------------------------------------


def from_a_newer_version(env: dict[str, str]) -> None:
    """The database as a newer version leaves it: every migration of this code, and one more."""
    done = subprocess.run([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    db = open_database(Config(data_dir=Path(env["OAR_DATA_DIR"]), database_url=env.get("DATABASE_URL")))
    with database.connection_context():
        db.execute_sql(f'INSERT INTO "schema_migration" ("name", "applied") VALUES ({db.param}, CURRENT_TIMESTAMP)',
                       (FUTURE,))
    if hasattr(db, "close_all"):
        db.close_all()


@pytest.mark.parametrize("command", [
    ["-m", "oar", "migrate"],
    ["-m", "oar", "worker", "--processes", "1"],
    ["-m", "oar", "clock"],
    ["-m", "gunicorn", "wsgi:app"],
    ["app.py"],
], ids=["migrate", "worker", "clock", "web", "app.py"])
def test_a_node_older_than_the_database_refuses_to_start_and_says_why(node_env: dict[str, str], command: list[str]) -> None:
    from_a_newer_version(node_env)
    env = {**node_env, "PORT": str(free_port()), "WEB_CONCURRENCY": "1"}
    if command[0] == "app.py":
        env.pop("REDIS_URL")  # the embedded relay starts its own (it never gets that far)
    done = subprocess.run([sys.executable, *command], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, (done.stdout, done.stderr)
    said = done.stdout + done.stderr
    assert f"it has migration {FUTURE}, which this relay (version" in said, said
    assert "Upgrade this node to the version the other nodes run" in said, said
    assert "Traceback" not in said, said
    assert recorded_migrations(node_env) == [*MIGRATION_NAMES, FUTURE]  # nothing was changed


def test_the_refusal_names_every_unknown_migration(postgres_url: str, tmp_path: Path) -> None:
    env = clean_environment(OAR_DATA_DIR=str(tmp_path / "data"), DATABASE_URL=postgres_url)
    from_a_newer_version(env)
    db = open_database(Config(data_dir=tmp_path, database_url=postgres_url))
    with database.connection_context():
        db.execute_sql('INSERT INTO "schema_migration" ("name", "applied") VALUES (%s, CURRENT_TIMESTAMP)', ("9998_also_newer",))
    if hasattr(db, "close_all"):
        db.close_all()
    done = subprocess.run([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert f"it has migrations 9998_also_newer, {FUTURE}, which" in done.stderr, done.stderr

