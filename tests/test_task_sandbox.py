"""A background task cannot see the relay (docs/tasks.md#the-sandbox): from inside a task, the
worker's environment, the other processes, the data folder, the database and its `setting`
table, the relay's Redis, PostgreSQL and web over loopback, and other sessions' folders are
all out of reach, while the task still runs commands and writes in its own folder; a relay
without a sandbox runs no task unless the owner opts out, and then the same probe finds all."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from oar.core.db import database
from oar.core.models import Task
from oar.core.settings import default_cwd
from oar.web.page_auth import load_secret_key
from tests.support.clients import Agent, poll
from tests.support.relays import Relay, RelayStack, own_relay

# Variables a sandboxed task may have: the sandbox's own and what the shell adds.
PLAIN_ENV = {"PATH", "HOME", "TMPDIR", "PWD", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SHLVL", "_", "OLDPWD"}
# What runs in the sandbox while the probe lists processes: its own init, the shell, its commands.
PROBE_COMMANDS = {"bwrap", "sh", "cat", "tr", "basename"}

PROBE_PY = r'''
import json, socket, sqlite3, sys
targets, sqlite_path, other_file = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
found = {}
for host, port in targets:
    try:
        socket.create_connection((host, port), timeout=3).close()
        found[f"connect {host}:{port}"] = "connected"
    except OSError as error:
        found[f"connect {host}:{port}"] = f"failed: {error}"
try:
    db = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    found["setting table"] = repr(db.execute("select key, value from setting").fetchall())
except sqlite3.Error as error:
    found["setting table"] = f"failed: {error}"
try:
    found["other session"] = open(other_file).read()
except OSError as error:
    found["other session"] = f"failed: {error}"
print("PROBE " + json.dumps(found), flush=True)
'''


def probe_script(relay: Relay, folder: Path, other_file: Path) -> str:
    """A shell script that tries each read of the relay, then writes in its own folder."""
    config = relay.config
    data_dir = config.data_dir.resolve()
    targets = [["127.0.0.1", urlsplit(relay.url).port]]
    for url in (config.redis_url, config.database_url):
        parts = urlsplit(url or "")
        if parts.scheme in ("redis", "rediss", "postgresql", "postgres"):
            targets.append([parts.hostname or "127.0.0.1", parts.port or (6379 if "redis" in parts.scheme else 5432)])
    targets += [["127.0.0.1", 6379], ["127.0.0.1", 5432]]
    unix_socket = urlsplit(config.redis_url or "").path if (config.redis_url or "").startswith("unix") else ""
    q = shlex.quote
    paths = [config.sqlite_path.resolve(), data_dir / "tasks", data_dir / "logs", other_file]
    checks = "\n".join(f"[ -e {q(str(p))} ] && echo VISIBLE {q(str(p))}" for p in paths)
    # What the data folder and the sessions' folder hold, as far as the task sees.
    checks += f"\necho DATADIR $(ls -A {q(str(data_dir))})\necho WORKDIR $(ls -A {q(str(default_cwd(config).resolve()))})"
    if unix_socket:
        checks += f"\n[ -e {q(unix_socket)} ] && echo VISIBLE {q(unix_socket)}"
    return f"""
echo "PPID $PPID"
echo "PPID-ENVIRON-BEGIN"; cat /proc/$PPID/environ | tr '\\0' '\\n'; echo; echo "PPID-ENVIRON-END"
for f in /proc/[0-9]*/environ; do cat "$f" 2>/dev/null | tr '\\0' '\\n'; done
for p in /proc/[0-9]*; do echo "PROC $(basename $p) $(cat $p/comm)"; done
env | sed 's/^/ENV /'
{checks}
cat {q(str(config.sqlite_path.resolve()))} 2>&1 | base64 2>&1 | head -c 2000; echo
python {q(str(folder / "probe.py"))} {q(json.dumps(targets))} {q(str(config.sqlite_path.resolve()))} {q(str(other_file))}
python -c 'print("PYTHON", 6 * 7)'
echo written > {q(str(folder / "mine.txt"))}
echo "PROBE DONE"
"""


def run_probe(relay: Relay, desk: Agent, folder: Path, other_file: Path) -> tuple[str, dict[str, Any]]:
    """Start the probe as a task of a session in `folder`; its whole raw output and its findings."""
    (folder / "probe.py").write_text(PROBE_PY)
    (folder / "probe.sh").write_text(probe_script(relay, folder, other_file))
    created = desk.ok("create_session", relay="this", cwd=str(folder), text=f"!task /bin/sh {folder / 'probe.sh'}", wait_seconds=30)
    assert created["status"] == "done", created
    session = created["session"]
    task_id = desk.ok("read_session", relay="this", session=session)["tasks"][0]["taskId"]

    def ended() -> Task | None:
        with database.connection_context():
            task = Task.get_by_id(task_id)
        return task if task.status != "running" else None

    task = poll("the probe to end", ended)
    raw = Path(task.output_path).read_text(errors="replace")
    assert "PROBE DONE" in raw, raw
    probed = [line for line in raw.splitlines() if line.startswith("PROBE {")]
    assert probed, raw[-3000:]
    findings = json.loads(probed[0][len("PROBE "):])
    return raw, findings


@pytest.fixture
def folders(relay: Relay) -> Iterator[tuple[Path, Path]]:
    """A folder for the probing session, and another session's folder holding a secret."""
    base = default_cwd(relay.config).resolve()
    mine, other = base / "probe-session", base / "other-session"
    for folder in (mine, other):
        folder.mkdir(parents=True, exist_ok=True)
    secret = other / "secret.txt"
    secret.write_text("the other session's secret\n")
    yield mine, secret


def secrets_of(relay: Relay) -> list[str]:
    assert relay.config.owner_token
    return [relay.config.owner_token, load_secret_key(), "the other session's secret"]


@pytest.mark.parametrize("where", ["own folder", "folder holding the data dir"])
def test_a_task_finds_nothing_of_the_relay(relay: Relay, desk: Agent, folders: tuple[Path, Path], where: str) -> None:
    mine, other_file = folders
    if where == "folder holding the data dir":
        # A session working in a folder above the data dir: the data dir is covered.
        mine = relay.config.data_dir.resolve().parent
        relay.settings(allowed_roots=[str(mine)])
    relay.settings(allow_shell_tasks=True)
    raw, found = run_probe(relay, desk, mine, other_file)

    for secret in secrets_of(relay):
        assert secret not in raw
    assert "OAR_" not in raw and "REDIS_URL" not in raw and "DATABASE_URL" not in raw
    assert "VISIBLE" not in raw, [line for line in raw.splitlines() if "VISIBLE" in line]
    # At most the empty folders on the way to the session's own folder.
    listed = {line.split(" ", 1)[0]: set(line.split()[1:]) for line in raw.splitlines() if line.startswith(("DATADIR", "WORKDIR"))}
    assert listed["DATADIR"] <= {"work"} and listed["WORKDIR"] <= {"probe-session"}, listed
    commands = {line.split(" ", 2)[2] for line in raw.splitlines() if line.startswith("PROC ")} - {""}
    assert commands and commands <= PROBE_COMMANDS, commands
    names = {line[4:].split("=", 1)[0] for line in raw.splitlines() if line.startswith("ENV ")}
    assert names and names <= PLAIN_ENV, names
    connects = {key: value for key, value in found.items() if key.startswith("connect")}
    assert connects and all(value.startswith("failed") for value in connects.values()), connects
    assert found["setting table"].startswith("failed") and found["other session"].startswith("failed"), found
    # And the task still works: commands, the relay's Python, writing in its own folder.
    assert "PYTHON 42" in raw
    assert (mine / "mine.txt").read_text() == "written\n"


def test_without_the_sandbox_the_same_probe_finds_the_relay(relay: Relay, desk: Agent, folders: tuple[Path, Path]) -> None:
    """The owner's opt-out runs tasks as the relay's user: the probe above then reads everything
    (which is what the setting's label says, and shows that the probe would see a leak)."""
    mine, other_file = folders
    relay.settings(allow_shell_tasks=True, tasks_without_sandbox=True)
    raw, found = run_probe(relay, desk, mine, other_file)
    assert relay.config.owner_token and relay.config.owner_token in raw  # the worker's environment
    assert f"VISIBLE {relay.config.data_dir.resolve() / 'tasks'}" in raw
    assert found["other session"] == "the other session's secret\n"
    assert "connected" in found.values()  # the relay's own web, at least


def test_with_no_sandbox_available_tasks_are_refused_unless_the_owner_opts_out(
    relay: Relay, desk: Agent, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    relay.settings(allow_shell_tasks=True)
    monkeypatch.setenv("PATH", str(tmp_path))  # the in-process web finds no bwrap on PATH
    marker = default_cwd(relay.config).resolve() / "refused-ran"
    status, body = desk.request("POST", "/api/v1/tasks", {"command": f"touch {marker}"})
    assert status == 403 and body["code"] == "REMOTE_RELAY_NO_SANDBOX", body
    assert "bwrap is not on PATH" in body["error"] and "tasks_without_sandbox" in body["error"]
    assert "the owner's power" in body["error"] and body["error"].endswith("Nothing was run.")
    with database.connection_context():
        assert Task.select().count() == 0
    assert not marker.exists()

    relay.settings(tasks_without_sandbox=True)
    started = desk.post("/api/v1/tasks", {"command": f"touch {marker}"})["task"]
    poll("the task to run", marker.exists)
    assert started["status"] == "running"


def test_a_worker_without_a_sandbox_fails_the_task_and_runs_nothing(tmp_path: Path) -> None:
    """The web found a sandbox but the worker's machine has none: the worker refuses too."""
    stack: RelayStack
    with own_relay(tmp_path, env={"OAR_BWRAP": str(tmp_path / "no-bwrap")}, worker_processes=1) as stack:
        assert stack.relay is not None
        relay = stack.relay
        relay.settings(allow_shell_tasks=True)
        desk = relay.conversation("desk")
        folder = default_cwd(relay.config).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / "ran"
        task = desk.post("/api/v1/tasks", {"command": f"touch {marker}"})["task"]

        def ended() -> Task | None:
            with database.connection_context():
                row = Task.get_by_id(task["taskId"])
            return row if row.status != "running" else None

        row = poll("the worker to refuse the task", ended)
        assert row.status == "failed" and "none is available" in (row.error or "")
        assert "is not an executable file" in (row.error or "")
        assert not marker.exists()
