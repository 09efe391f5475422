"""The command line finds the relay it belongs to (docs/operations.md#the-command-line): run as a
subprocess from another folder, `oar token`, `oar pair`, `oar worker` and `oar clock` use the
relay's data dir (OAR_DATA_DIR, --data-dir, DATABASE_URL, or var/ in the checkout), or stop with
a sentence saying how to point them at it: never a new empty database, never a traceback.
`oar --version`, `oar --help` and `python app.py --help` answer and start nothing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from oar.actions.catalog import ordered_actions
from oar.core.config import default_data_dir
from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay
from tests.support.servers import create_postgres_database, drop_postgres_database, free_port, postgres_unreachable

# What a person's shell holds: none of the relay's settings (the tests' own OAR_ times included).
PLAIN = {key: value for key, value in os.environ.items() if not key.startswith("OAR_") and key != "DATABASE_URL"}

# Every command of `oar`.
COMMANDS = ("serve", "worker", "clock", "migrate", "token", "pair", "call", "mcp", "backup", "docs")

# The commands that act on what a relay holds, each as a person would type it.
RELAY_COMMANDS = [
    ("token", "--session", "0123456789abcdef"),
    ("token", "--owner"),
    ("token", "--revoke", "oar_s_x"),
    ("pair",),
    ("pair", "https://build-box.example:8080", "oar_p_x"),
    ("worker", "--processes", "1"),
    ("clock",),
]


def oar(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m oar …` from `cwd`, the checkout on the module path as an installed package would be."""
    return subprocess.run(
        [sys.executable, "-m", "oar", *args], cwd=cwd, env={**PLAIN, "PYTHONPATH": str(PROJECT), **(env or {})},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )


def relay_settings(relay: Relay) -> dict[str, str]:
    """Where the relay keeps its data, as its own environment says it."""
    env = {"OAR_DATA_DIR": str(relay.config.data_dir)}
    if relay.config.database_url:
        env["DATABASE_URL"] = relay.config.database_url
    return env


def said_clearly(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def test_oar_token_from_another_folder_mints_on_the_relays_database(relay: Relay, desk: Agent, tmp_path: Path) -> None:
    done = oar("token", "--session", desk.session_id, cwd=tmp_path, env=relay_settings(relay))
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    status, _ = Agent(relay.url, token, desk.session_id).call("list_sessions", relay="this")
    assert status == 200
    assert list(tmp_path.iterdir()) == []  # nothing made where it was run


def test_data_dir_option_names_the_relay(relay: Relay, desk: Agent, tmp_path: Path) -> None:
    if relay.config.database_url:
        pytest.skip("the relay keeps its data in PostgreSQL, which DATABASE_URL names (the test above)")
    done = oar("--data-dir", str(relay.config.data_dir), "token", "--session", desk.session_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Agent(relay.url, done.stdout.strip(), desk.session_id).call("list_sessions", relay="this")[0] == 200


@pytest.mark.parametrize("command", RELAY_COMMANDS, ids=" ".join)
def test_where_there_is_no_relay_it_says_how_to_point_at_one_and_creates_nothing(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    elsewhere, empty = tmp_path / "elsewhere", tmp_path / "empty"
    elsewhere.mkdir()
    empty.mkdir()
    done = oar(*command, cwd=elsewhere, env={"OAR_DATA_DIR": str(empty), "REDIS_URL": "redis://127.0.0.1:9/0"})
    said_clearly(done, f"there is no relay database at {empty / 'oar.db'}", "--data-dir", "OAR_DATA_DIR", "DATABASE_URL")
    assert list(empty.iterdir()) == [] and list(elsewhere.iterdir()) == []


def test_an_empty_database_file_is_not_a_relay(tmp_path: Path) -> None:
    (tmp_path / "oar.db").touch()
    done = oar("--data-dir", str(tmp_path), "token", "--session", "0123456789abcdef", cwd=tmp_path)
    said_clearly(done, "holds no relay", "--data-dir")


def test_a_database_server_that_does_not_answer_is_said_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://oar:hunter2hunter2@127.0.0.1:{free_port()}/oar"
    done = oar("token", "--owner", cwd=tmp_path, env={"DATABASE_URL": url})
    said_clearly(done, "cannot open the relay database at postgresql://oar:…@127.0.0.1", "DATABASE_URL")
    assert "hunter2" not in done.stderr


def test_the_default_data_dir_is_the_checkouts_wherever_the_command_runs() -> None:
    assert default_data_dir() == PROJECT / "var"


def test_version_and_help_list_what_there_is(tmp_path: Path) -> None:
    version = oar("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, "oar-relay 0.1.0")
    shown = oar("--help", cwd=tmp_path)
    assert shown.returncode == 0
    for command in COMMANDS:
        assert f"\n    {command} " in shown.stdout, command
    bare = oar(cwd=tmp_path)  # no command: the same list, as a usage mistake
    assert bare.returncode == 2 and "token" in bare.stderr and "Traceback" not in bare.stderr
    assert ordered_actions()[0].name in oar("call", "--help", cwd=tmp_path).stdout


def test_app_py_help_prints_its_usage_and_starts_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {**PLAIN, "OAR_DATA_DIR": str(data_dir), "PORT": str(free_port())}
    for asked in ("--help", "-h"):
        done = subprocess.run([sys.executable, str(PROJECT / "app.py"), asked], cwd=tmp_path, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: app.py") and "OAR_DATA_DIR" in done.stdout
    wrong = subprocess.run([sys.executable, str(PROJECT / "app.py"), "--port", "9000"], cwd=tmp_path, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "unrecognized arguments: --port" in wrong.stderr
    assert not data_dir.exists()  # no relay was started


def test_a_postgresql_database_without_the_relays_tables_is_not_a_relay(tmp_path: Path) -> None:
    # The machine's server (or OAR_TEST_DATABASE_URL's), as the migration tests: an in-process
    # test runs in one of CI's two passes only, the embedded one.
    missing = postgres_unreachable()
    if missing:
        pytest.skip(missing)
    url = create_postgres_database()
    try:
        done = oar("token", "--session", "0123456789abcdef", cwd=tmp_path, env={"DATABASE_URL": url})
        said_clearly(done, "holds no relay", "DATABASE_URL")
        with contextlib.closing(psycopg2.connect(url)) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
            assert cursor.fetchone() == (0,)  # nothing was created there
    finally:
        drop_postgres_database(url)
