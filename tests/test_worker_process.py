"""`oar worker` as one process (docs/operations.md#running-the-relay): jobs in its threads, RQ's
scheduler in a thread, and with `--clock` the clock in threads of the same process."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from rq.job import Job, JobStatus

from oar.core import jobs
from oar.core.runtime import Runtime
from tests.support.clients import poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, WORKER, own_relay
from tests.test_health import READY, parts_become

pytestmark = pytest.mark.stack

PRESENCE_TIMES = {**FAST_TIMES, "ALIVE_SECONDS": "0.2", "ALIVE_STALE_SECONDS": "2"}


def test_it_runs_jobs_scheduled_jobs_and_the_clock_in_one_process(tmp_path: Path) -> None:
    with own_relay(tmp_path, PRESENCE_TIMES, worker=False) as stack:
        worker = stack.start(WORKER, "-m", "oar", "worker", "--clock")
        # The worker and the clock both say they are there, from the one process.
        parts_become(stack, READY)
        process = psutil.Process(worker.popen.pid)
        assert process.children(recursive=True) == [], [p.cmdline() for p in process.children(recursive=True)]
        # A job due later goes through RQ's scheduler (a thread of the worker) to the queue, and runs.
        runtime = Runtime(stack.config)
        due = datetime.now(UTC) + timedelta(seconds=1)
        job = runtime.queue.enqueue_at(due, jobs.SEND_NOTIFICATIONS, result_ttl=60)
        poll("the scheduled job to run", lambda: Job.fetch(job.id, connection=runtime.redis).get_status() == JobStatus.FINISHED,
             seconds=30)
        # And a turn runs in it.
        assert stack.relay is not None
        desk = stack.relay.conversation("desk")
        created = desk.ok("create_session", relay="this", text="one process", wait_seconds=30)
        assert created["status"] == "done" and created["reply"]["text"] == "echo: one process", created
        assert process.children(recursive=True) == []
        # SIGTERM stops it, the clock's threads with it.
        stack.stop(WORKER)
        assert worker.popen.returncode == 0, worker.log()


def test_it_refuses_the_clock_beside_a_pool_of_processes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "oar", "--data-dir", str(tmp_path), "worker", "--processes", "2", "--clock"],
                          cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "the clock runs inside the worker only when it is one process, not 2" in done.stderr
