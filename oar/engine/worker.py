"""`oar worker`: RQ workers (with RQ's scheduler) on this relay's queue.

By default one process (`OAR_WORKER_PROCESSES=1`) takes jobs from the queue and runs each in a
thread of its own, up to `OAR_WORKER_THREADS` at once (`WorkerOptions`), with RQ's scheduler in another thread and,
with `--clock` (the embedded relay's), the clock's loops in more: no process is forked per job or
for the scheduler, and an idle relay keeps one Python process for all of its background work.
With more processes, a pool forks that many workers, each as above (docs/operations.md#a-bigger-relay).
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rq import SimpleWorker
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import RQScheduler
from rq.scheduler import run as run_scheduler
from rq.timeouts import TimerDeathPenalty
from rq.worker_pool import WorkerPool

from oar.core import cpu_claims, jobs, lifeline, metric_files, metrics, tracing
from oar.core.collector import freeze_loaded_objects
from oar.core.config import Config
from oar.core.db import open_database
from oar.core.presence import WORKER, Beacon
from oar.core.runtime import Runtime
from oar.engine import clock, rq_internals
from oar.owner.bootstrap import refuse_newer_schema

log = logging.getLogger(__name__)

# How long a stopping worker lets running turns finish before it exits; turns still
# running then are failed by the reconciler once their heartbeat stops.
SHUTDOWN_GRACE_SECONDS = 10


class MoreThanOneProcess(Exception):
    """`--clock` with a pool of worker processes: the pool forks its workers (and forks again when
    one dies), and a fork copies a running clock thread's locks but not the thread."""


class ThreadScheduler(RQScheduler):
    """RQ's scheduler (what moves `enqueue_at` jobs to the queue when due) in a thread of the
    worker's process, where RQ forks a process for it: the same loop, one process fewer."""

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=run_scheduler, args=(self,), name="rq-scheduler", daemon=True)
        rq_internals.scheduler_running_in(self, thread)
        thread.start()
        return thread

    def _install_signal_handlers(self) -> None:
        # Only the main thread may take signals; the worker owns them and stops this loop with
        # `request_stop` (ThreadedWorker.stop_scheduler).
        pass


@dataclass(frozen=True)
class WorkerOptions:
    """How each worker of this relay is set up, given to it when it is made."""

    # Jobs performed at once, each in a thread of its own (background tasks' jobs aside).
    threads: int
    # (namespace, every, stale seconds): each worker process says it is there, for readiness
    # (oar.core.presence, docs/operations.md#health-check); None: it does not.
    presence: tuple[str, float, float] | None = None
    # The pool process that forks this worker: the worker stops when the pool is gone, even
    # when it was killed and could not stop its workers (docs/operations.md#when-the-launcher-dies).
    pool_pid: int | None = None
    # A pool's worker keeps to a core of its own, claimed in this data directory (None: it does not).
    claim_core_in: Path | None = None


class ThreadedWorker(SimpleWorker):
    """An RQ worker that performs each job in a thread, with at most `options.threads` at once."""

    # Signals (RQ's default job timeout) work only in the main thread.
    death_penalty_class = TimerDeathPenalty

    def __init__(self, *args: Any, options: WorkerOptions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if options.pool_pid is not None:
            lifeline.die_with_parent()
            lifeline.watch_parent(options.pool_pid)
            metrics.started_after_fork()
        self._beacon: Beacon | None = None
        if options.presence is not None:
            namespace, every, stale = options.presence
            self._beacon = Beacon(self.connection, namespace, WORKER, every, stale)
            self._beacon.start()
        self._slots = threading.BoundedSemaphore(options.threads)
        self._running: set[threading.Thread] = set()
        self._running_lock = threading.Lock()

    def execute_job(self, job: Job, queue: Queue) -> None:
        takes_a_slot = job.func_name != jobs.RUN_TASK
        if takes_a_slot:
            # Blocks the dequeue loop while every thread is busy: the job waits in Redis.
            self._slots.acquire()
        execution = rq_internals.prepare_execution(self, job)
        thread = threading.Thread(
            target=self._perform, args=(job, queue, execution, takes_a_slot), name=f"rq-{job.id}", daemon=True,
        )
        with self._running_lock:
            self._running.add(thread)
        thread.start()

    def _perform(self, job: Job, queue: Queue, execution: Any, took_a_slot: bool) -> None:
        try:
            rq_internals.perform_job(self, job, queue, execution)
        except Exception:
            log.exception("job %s failed outside its own handler", job.id)
        finally:
            with self._running_lock:
                self._running.discard(threading.current_thread())
            if took_a_slot:
                self._slots.release()
            metrics.worked()

    def _start_scheduler(self, burst: bool = False, logging_level: str | None = "INFO", *args: Any, **kwargs: Any) -> None:
        """RQ's own, with the scheduler in a thread (ThreadScheduler); whichever worker of the
        relay holds the scheduler's lock runs it, the others try again at their maintenance."""
        self.scheduler = ThreadScheduler(
            self.queues, connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level, serializer=self.serializer,
        )
        self.scheduler.acquire_locks(auto_start=not burst)

    def stop_scheduler(self) -> None:
        scheduler = self.scheduler
        if scheduler is None:
            return
        scheduler.request_stop()
        thread = rq_internals.scheduler_thread(scheduler)
        if thread is not None:
            # The loop sleeps its interval (1 s) between looks, then releases its lock and stops.
            thread.join(timeout=scheduler.interval + 5)

    def teardown(self) -> None:
        if self._beacon is not None:
            self._beacon.stop()
        with self._running_lock:
            running = list(self._running)
        for thread in running:
            thread.join(timeout=SHUTDOWN_GRACE_SECONDS / max(1, len(running)))
        super().teardown()


def main(config: Config, processes: int | None = None, with_clock: bool = False) -> None:
    """`oar worker` for the relay of `config`: `processes` (default `OAR_WORKER_PROCESSES`) workers;
    `with_clock`: the clock too, in threads of this process (only with one process; raises
    MoreThanOneProcess)."""
    refuse_clock_beside_pool(config, processes, with_clock)
    count = processes or config.worker_processes
    claims = config.data_dir if config.worker_own_core == "on" else None
    if count == 1 and claims is not None:
        cpu_claims.claim_core(claims)  # first: the threads started below stay on its core too
    launcher = lifeline.take_launcher_pid()
    if launcher is not None:
        lifeline.watch_parent(launcher)
    open_database(config)
    refuse_newer_schema()  # raises NewerSchema: a node older than the database runs no job
    runtime = Runtime(config)
    # The workers' figures and traces (docs/operations.md#watching-it), when configured: this
    # kind's files of a previous run go first, then each forked worker counts in files of its own.
    if config.metrics_on:
        metric_files.sweep_kind(config.metrics_folder, "worker")
    metrics.start("worker", config)
    tracing.start("worker", runtime)
    options = WorkerOptions(
        threads=config.worker_threads,
        presence=(config.namespace, config.time("ALIVE_SECONDS"), config.time("ALIVE_STALE_SECONDS")),
    )
    # Imported here, before any fork, as RQ would import them at each process's first job of
    # each kind: then the first turns of a wide delivery waited 0.1 s of imports in every
    # process, and the processes now share those modules' memory. By name, as RQ does
    # (`oar` never imports `workers`); importing connects to nothing (workers/runtime.py).
    for name in jobs.EVERY_JOB:
        importlib.import_module(name.rpartition(".")[0])
    freeze_loaded_objects()  # before the pool forks, too: its workers share what is frozen
    if count == 1:
        _work_in_this_process(config.namespace, runtime, options, with_clock)
        return
    worker_class = pool_worker_class(replace(options, pool_pid=os.getpid(), claim_core_in=claims))
    pool = WorkerPool([config.namespace], connection=runtime.redis, num_workers=count, worker_class=worker_class)
    pool.start(logging_level="WARNING")


def pool_worker_class(options: WorkerOptions) -> type[ThreadedWorker]:
    """A ThreadedWorker made with `options`, for RQ's pool: the pool makes each worker itself in
    the process it forks, from a class and RQ's own arguments only."""

    class PoolWorker(ThreadedWorker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if options.claim_core_in is not None:  # in the forked process's main thread, before its threads
                cpu_claims.claim_core(options.claim_core_in)
            super().__init__(*args, options=options, **kwargs)

    return PoolWorker


def refuse_clock_beside_pool(config: Config, processes: int | None, with_clock: bool) -> None:
    """Raises MoreThanOneProcess when the clock is asked for beside a pool of worker processes."""
    count = processes or config.worker_processes
    if with_clock and count > 1:
        raise MoreThanOneProcess(f"the clock runs inside the worker only when it is one process, not {count}; "
                                 "run `oar clock` beside it")


def _work_in_this_process(namespace: str, runtime: Runtime, options: WorkerOptions, with_clock: bool) -> None:
    """One worker in this process; the clock beside it in threads when asked. The worker's main
    loop takes SIGTERM and SIGINT (a warm stop, then a cold one) and returns; the clock stops after it."""
    stopping = threading.Event()
    ticking: threading.Thread | None = None
    if with_clock:
        # The clock's own runtime: its Redis connections and settings cache are its own, as in `oar clock`.
        ticking = threading.Thread(target=clock.run, args=(Runtime(runtime.config), stopping), name="oar-clock", daemon=True)
        ticking.start()
    try:
        worker = ThreadedWorker([namespace], connection=runtime.redis, options=options)
        worker.work(with_scheduler=True, logging_level="WARNING")
    finally:
        stopping.set()
        if ticking is not None:
            ticking.join(timeout=SHUTDOWN_GRACE_SECONDS)
