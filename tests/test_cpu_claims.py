"""A worker process keeps to a core of its own; what it starts gets every core
(docs/operations.md#a-worker-on-one-core)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from oar.core.config import Config, ConfigError, check, from_environment
from oar.core.cpu_claims import CLAIMS_FOLDER, claim_core, claim_order
from oar.core.db import database
from oar.core.models import Task
from tests.support.clients import Agent, poll
from tests.support.relays import Relay

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cores = pytest.mark.skipif(len(ALLOWED) < 2, reason="a claim needs two cores to choose from")
PROJECT = Path(__file__).resolve().parent.parent

# A process on two cores that claims one in a data directory, says which and what a process it
# starts with and without `unpinned()` runs on, then holds its claim until its stdin closes.
CLAIMER = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from oar.core import cpu_claims
    os.sched_setaffinity(0, {int(core) for core in sys.argv[2].split(",")})
    core = cpu_claims.claim_core(Path(sys.argv[1]))
    def child_cores():
        said = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                              capture_output=True, text=True, check=True)
        return json.loads(said.stdout)
    plain = child_cores()
    with cpu_claims.unpinned():
        unpinned = child_cores()
    print(json.dumps({"core": core, "own": sorted(os.sched_getaffinity(0)), "child": plain, "unpinned": unpinned}), flush=True)
    sys.stdin.read()
""")


def test_a_worker_tries_the_cores_from_the_last_and_none_when_there_is_one() -> None:
    assert claim_order({0, 1, 2, 3}) == [3, 2, 1, 0]
    assert claim_order({5, 2}) == [5, 2]
    assert claim_order({0}) == []


def _claimer(data_dir: Path, cores: list[int]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    process = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(data_dir), ",".join(map(str, cores))],
        cwd=PROJECT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


@needs_two_cores
def test_processes_of_one_relay_claim_different_cores_and_a_freed_core_is_claimed_again(tmp_path: Path) -> None:
    low, high = ALLOWED[-2:]
    first, said_first = _claimer(tmp_path, [low, high])
    second, said_second = _claimer(tmp_path, [low, high])
    third, said_third = _claimer(tmp_path, [low, high])
    try:
        # Each claimer runs on its core alone, and so does what it starts, but under unpinned().
        assert said_first == {"core": high, "own": [high], "child": [high], "unpinned": [low, high]}
        assert said_second == {"core": low, "own": [low], "child": [low], "unpinned": [low, high]}
        # The one that found both claimed stays on both, and so does what it starts.
        assert said_third == {"core": None, "own": [low, high], "child": [low, high], "unpinned": [low, high]}
    finally:
        third.communicate("")
    first.communicate("")  # its core is free again once it ended
    fourth, said_fourth = _claimer(tmp_path, [low, high])
    fourth.communicate("")
    second.communicate("")
    assert said_fourth["core"] == high


def _task_pid(task_id: str) -> int | None:
    with database.connection_context():
        return Task.get_by_id(task_id).pid


@needs_two_cores
def test_the_relays_workers_keep_to_one_core_each_and_their_tasks_get_every_core(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task sleep 120", wait_seconds=30)
    task_id = desk.ok("read_session", relay="this", session=created["session"])["tasks"][0]["taskId"]
    task = psutil.Process(poll("the task to start", lambda: _task_pid(task_id)))
    try:
        assert task.cpu_affinity() == ALLOWED
        worker = task.parent()
        assert worker is not None and "worker" in " ".join(worker.cmdline())
        cores = {tuple(psutil.Process(thread.id).cpu_affinity()) for thread in worker.threads()}
        assert len(cores) == 1 and len(next(iter(cores))) == 1, cores
        # The pool's other worker (the suite's relays run two) keeps to another core.
        pool = worker.parent()
        assert pool is not None
        others = [p.cpu_affinity() for p in pool.children() if p.pid != worker.pid and "worker" in " ".join(p.cmdline())]
        assert len(others) == 1 and len(others[0]) == 1 and tuple(others[0]) not in cores
    finally:
        desk.ok("archive", relay="this", session=created["session"])  # its task is stopped with it


def test_the_setting_is_on_or_off_and_a_bad_value_stops_the_relay_at_start(tmp_path: Path) -> None:
    assert from_environment({}).worker_own_core == "on"
    assert from_environment({"OAR_WORKER_OWN_CORE": " Off "}).worker_own_core == "off"
    with pytest.raises(ConfigError, match=re.escape("OAR_WORKER_OWN_CORE must be on or off, not 'no'")):
        check(Config(data_dir=tmp_path, worker_own_core="no"))


@needs_two_cores
def test_a_data_directory_that_holds_no_claims_leaves_the_worker_on_every_core(tmp_path: Path) -> None:
    (tmp_path / CLAIMS_FOLDER).write_text("a file where the folder of claims would be")
    assert claim_core(tmp_path) is None
    assert sorted(os.sched_getaffinity(0)) == ALLOWED
