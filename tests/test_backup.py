"""`oar backup <file>` (docs/operations.md#backing-up-and-restoring): a running relay with sessions
is backed up from another folder, the copy restored into a fresh data dir, a relay started there,
and the sessions, their messages and their agent tokens read back. A PostgreSQL relay is told to
use pg_dump; an existing file is not overwritten; nothing is written on a refusal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, RelayStack, make_config, own_relay, private_redis, redis_url_of

pytestmark = pytest.mark.stack  # relays of their own

PLAIN = {key: value for key, value in os.environ.items() if not key.startswith("OAR_") and key != "DATABASE_URL"}


def oar(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oar", *args], cwd=cwd, env={**PLAIN, "PYTHONPATH": str(PROJECT), **(env or {})},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.skipif(bool(os.environ.get("OAR_TEST_DATABASE_URL")), reason="oar backup copies SQLite; PostgreSQL: below")
def test_a_running_relay_is_backed_up_and_restored_into_a_fresh_data_dir(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    backup = elsewhere / "relay-backup.db"
    with own_relay(tmp_path / "original", web="process") as running:
        relay = running.relay
        assert relay is not None
        desk = relay.conversation("desk")
        children = [
            desk.ok("create_session", relay="this", title=f"child {n}", text=f"hello {n}", wait_seconds=30)["session"]
            for n in range(3)
        ]
        done = oar("--data-dir", str(relay.config.data_dir), "backup", str(backup), cwd=elsewhere)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"backed up the relay's database to {backup} (")
        desk.ok("create_session", relay="this", title="after the backup", text="later", wait_seconds=30)
        again = oar("--data-dir", str(relay.config.data_dir), "backup", str(backup), cwd=elsewhere)
        assert again.returncode == 1 and "exists already" in again.stderr and "Traceback" not in again.stderr
        assert [path.name for path in elsewhere.iterdir()] == [backup.name]

    fresh = tmp_path / "restored" / "relay"
    fresh.mkdir(parents=True)
    shutil.copyfile(backup, fresh / "oar.db")
    with private_redis(tmp_path / "restored" / "redis") as redis_server:
        restored = RelayStack(make_config(fresh, redis_url_of(redis_server), None), FAST_TIMES, logs=tmp_path / "restored" / "logs")
        try:
            restored.migrate()
            back = restored.start_web()
            sessions = {s["title"]: s for s in back.owner.get("/api/v1/owner/sessions")["sessions"]}
            assert set(sessions) == {"desk", "child 0", "child 1", "child 2"}  # not the one made after the backup
            agent = Agent(back.url, desk.token, desk.session_id)  # its token, stored hashed, works there too
            read = agent.ok("read_session", relay="this", session=children[1])
            assert [m["text"] for m in read["messages"]][-2:] == ["hello 1", "echo: hello 1"]
        finally:
            restored.discard()


def test_a_postgresql_relay_is_told_to_use_pg_dump(tmp_path: Path) -> None:
    done = oar("backup", str(tmp_path / "b.db"), cwd=tmp_path, env={"DATABASE_URL": "postgresql://oar@127.0.0.1:5432/oar"})
    assert done.returncode == 1 and "pg_dump" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_a_relay_there_it_says_how_to_point_at_one(tmp_path: Path) -> None:
    done = oar("--data-dir", str(tmp_path / "nothing"), "backup", str(tmp_path / "b.db"), cwd=tmp_path)
    assert done.returncode == 1 and "there is no relay database" in done.stderr and "--data-dir" in done.stderr
    assert list(tmp_path.iterdir()) == []
