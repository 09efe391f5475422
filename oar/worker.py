"""`oar worker`: RQ workers (with RQ's scheduler) on this relay's queue."""

from __future__ import annotations

from rq.worker_pool import WorkerPool

from oar.config import from_environment
from oar.runtime import Runtime


def main(processes: int | None = None) -> None:
    config = from_environment()
    runtime = Runtime(config)
    # One turn runs per worker process at a time; more turns wait in the queue.
    pool = WorkerPool([config.namespace], connection=runtime.redis, num_workers=processes or config.worker_processes)
    pool.start(logging_level="WARNING")
