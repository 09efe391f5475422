"""`oar worker`: RQ workers (with RQ's scheduler) on this relay's queue.

Each worker process runs jobs in threads of their own, up to `OAR_WORKER_THREADS` at once.
A turn mostly waits — on a model's stream, or on another session's reply when an agent
prompts a session and waits inside its own turn — so a thread per turn lets one process
run many turns, and a turn that waits on another never starves the turn it waits for of a
worker.

A background task's job runs for as long as its command does, so it never takes one of those
threads: it runs in a thread beside them, and however many tasks run, a turn still finds its
thread. How many tasks run is bounded by the owner's caps on running tasks, checked when a task
starts (docs/tasks.md#how-many-and-how-long), not here.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

from rq import SimpleWorker
from rq.job import Job
from rq.queue import Queue
from rq.timeouts import TimerDeathPenalty
from rq.worker_pool import WorkerPool

from oar.core import jobs, lifeline, metric_files, metrics, tracing
from oar.core.config import from_environment
from oar.core.db import open_database
from oar.core.presence import WORKER, Beacon
from oar.core.runtime import Runtime
from oar.owner.bootstrap import refuse_newer_schema

log = logging.getLogger(__name__)

# How long a stopping worker lets running turns finish before it exits; turns still
# running then are failed by the reconciler once their heartbeat stops.
SHUTDOWN_GRACE_SECONDS = 10


class ThreadedWorker(SimpleWorker):
    """An RQ worker that performs each job in a thread, with at most `threads` at once."""

    # Signals (RQ's default job timeout) work only in the main thread.
    death_penalty_class = TimerDeathPenalty
    threads = 32
    # The pool process that forks this worker: the worker stops when the pool is gone, even
    # when it was killed and could not stop its workers (docs/operations.md#when-the-launcher-dies).
    pool_pid: int | None = None
    # (namespace, every, stale seconds): each worker process says it is there, for readiness
    # (oar.core.presence, docs/operations.md#health-check).
    presence: tuple[str, float, float] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.pool_pid is not None:
            lifeline.die_with_parent()
            lifeline.watch_parent(self.pool_pid)
        metrics.started_after_fork()
        self._beacon: Beacon | None = None
        if self.presence is not None:
            namespace, every, stale = self.presence
            self._beacon = Beacon(self.connection, namespace, WORKER, every, stale)
            self._beacon.start()
        self._slots = threading.BoundedSemaphore(self.threads)
        self._running: set[threading.Thread] = set()
        self._running_lock = threading.Lock()

    def execute_job(self, job: Job, queue: Queue) -> None:
        takes_a_slot = job.func_name != jobs.RUN_TASK
        if takes_a_slot:
            # Blocks the dequeue loop while every thread is busy: the job waits in Redis.
            self._slots.acquire()
        execution = self.prepare_execution(job)
        thread = threading.Thread(
            target=self._perform, args=(job, queue, execution, takes_a_slot), name=f"rq-{job.id}", daemon=True,
        )
        with self._running_lock:
            self._running.add(thread)
        thread.start()

    def _perform(self, job: Job, queue: Queue, execution: Any, took_a_slot: bool) -> None:
        try:
            self.perform_job(job, queue, execution)
        except Exception:
            log.exception("job %s failed outside its own handler", job.id)
        finally:
            with self._running_lock:
                self._running.discard(threading.current_thread())
            if took_a_slot:
                self._slots.release()
            metrics.worked()

    def teardown(self) -> None:
        if self._beacon is not None:
            self._beacon.stop()
        with self._running_lock:
            running = list(self._running)
        for thread in running:
            thread.join(timeout=SHUTDOWN_GRACE_SECONDS / max(1, len(running)))
        super().teardown()


def main(processes: int | None = None) -> None:
    launcher = lifeline.take_launcher_pid()
    if launcher is not None:
        lifeline.watch_parent(launcher)
    config = from_environment()
    open_database(config)
    refuse_newer_schema()  # raises NewerSchema: a node older than the database runs no job
    runtime = Runtime(config)
    # The workers' figures and traces (docs/operations.md#watching-it), when configured: this
    # kind's files of a previous run go first, then each forked worker counts in files of its own.
    if config.metrics_on:
        metric_files.sweep_kind(config.metrics_folder, "worker")
    metrics.start("worker", config)
    tracing.start("worker", runtime)
    ThreadedWorker.threads = config.worker_threads
    ThreadedWorker.pool_pid = os.getpid()
    ThreadedWorker.presence = (config.namespace, config.time("ALIVE_SECONDS"), config.time("ALIVE_STALE_SECONDS"))
    # Imported here, before the fork, as RQ would import them at each process's first job of
    # each kind: then the first turns of a wide delivery waited 0.1 s of imports in every
    # process, and the processes now share those modules' memory. By name, as RQ does
    # (`oar` never imports `workers`); importing connects to nothing (workers/runtime.py).
    for name in jobs.EVERY_JOB:
        importlib.import_module(name.rpartition(".")[0])
    pool = WorkerPool(
        [config.namespace],
        connection=runtime.redis,
        num_workers=processes or config.worker_processes,
        worker_class=ThreadedWorker,
    )
    pool.start(logging_level="WARNING")
