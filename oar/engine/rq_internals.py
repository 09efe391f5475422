"""The parts of RQ that are not its public API but that the relay relies on, each behind one
function here: no other module touches them.

Who needs them: the relay's worker (`oar/engine/worker.py`) runs each job in a thread of its own
process, where RQ runs one job at a time (or forks a horse per job), so it splits RQ's handling of
a job in two: the bookkeeping before it (in the dequeue loop) and the job itself (in the thread).
It also runs RQ's scheduler in a thread where RQ forks a process for it, so it records that
thread where RQ's worker looks for the scheduler's process.

Upgrading RQ (pinned in requirements.txt):
1. Run `tests/test_library_adapters.py`: each function here is checked against the installed RQ.
2. Read RQ's changes to `BaseWorker.prepare_execution(job)` (returns the execution record that
   `perform_job` takes), `BaseWorker.perform_job(job, queue, execution)`, and to `RQScheduler`'s
   `_status`, `_process` (the worker's maintenance asks `_process.is_alive()` to restart a dead
   scheduler) and `Status`. `oar.engine.worker` also overrides RQ's hooks `Worker.execute_job`,
   `Worker._start_scheduler`, `Worker.stop_scheduler`, `Worker.teardown` and
   `RQScheduler._install_signal_handlers` and sets `Worker.death_penalty_class`: check that RQ still
   calls each, with the same arguments.
3. Run `tests/test_worker_process.py` and the turn tests (`tests/test_turns.py`).
"""

from __future__ import annotations

import threading

from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import RQScheduler
from rq.worker.base import BaseWorker


def prepare_execution(worker: BaseWorker, job: Job) -> Execution:
    """RQ's bookkeeping before a job runs (the worker's and the job's state, the execution
    record); returns what `perform_job` takes."""
    return worker.prepare_execution(job)


def perform_job(worker: BaseWorker, job: Job, queue: Queue, execution: Execution) -> bool:
    """Run the job as RQ does (its result, failure handling, retries), in the calling thread."""
    return bool(worker.perform_job(job, queue, execution))


def scheduler_running_in(scheduler: RQScheduler, thread: threading.Thread) -> None:
    """Record that `scheduler`'s loop runs in `thread` (started by the caller), where RQ's worker
    looks for the scheduler's process."""
    scheduler._status = scheduler.Status.STARTED
    scheduler._process = thread  # type: ignore[assignment]


def scheduler_thread(scheduler: RQScheduler) -> threading.Thread | None:
    """The thread `scheduler_running_in` recorded for `scheduler`, or None (not started, or RQ's own process)."""
    process = scheduler._process
    return process if isinstance(process, threading.Thread) else None
