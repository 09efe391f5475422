"""`oar clock`: runs the reconciler every `RECONCILE_SECONDS` (and once at start), and the
due-time timer (`oar.engine.due_timer`) that fires schedules and starts deliveries at their
due times.

Due work lives in the database; the clock only notices what is due or orphaned and fires it
or hands it to the queue, so a restarted clock or a flushed Redis loses nothing.
"""

from __future__ import annotations

import logging
import signal
import threading

from oar.core import lifeline, metric_files, metrics
from oar.core.collector import freeze_loaded_objects
from oar.core.config import Config
from oar.core.db import checkpoint, database, is_sqlite, open_database, wal_state
from oar.core.presence import CLOCK, Beacon
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.engine.due_timer import DueTimer
from oar.engine.reconciler import reconcile
from oar.federation import peer_asks, peer_events
from oar.mcp_tasks import store as mcp_task_store
from oar.notifications import sweep as notifications
from oar.openclaw import openclaw_runs
from oar.owner.bootstrap import refuse_newer_schema
from oar.schedules.schedules import fire_due
from oar.watching.pruning import prune_if_due
from oar.watching.sweep import sweep

log = logging.getLogger("oar.clock")


def tick(runtime: Runtime) -> None:
    try:
        outcome = reconcile(runtime, utcnow())
        if outcome.failed_turns or outcome.released_sessions or outcome.enqueued_sessions:
            log.info("reconciled: %s", outcome)
        # Schedules that are overdue: after downtime, a lost RQ job or a flushed Redis.
        fired = fire_due(runtime, utcnow())
        if fired:
            log.info("schedules swept: %s", dict(fired))
        # Events no job ingested and deliveries no job made (lost jobs, a flushed Redis).
        swept = sweep(runtime, utcnow())
        if any(swept.values()):
            log.info("deliveries swept: %s", swept)
        # OpenClaw runs whose step no worker took, spawns past their deadline, children to archive.
        stepped = openclaw_runs.sweep(runtime, utcnow())
        if any(stepped.values()):
            log.info("openclaw runs swept: %s", stepped)
        asks_checked = peer_asks.enqueue_due(runtime, utcnow())  # asks kept on paired relays
        if asks_checked:
            log.info("asks on paired relays to check: %s relays", asks_checked)
        prune_if_due(runtime, utcnow())  # delivered held rows, old events (docs/limits.md#retention)
        expired = mcp_task_store.prune(utcnow())  # MCP tasks past their time to live (docs/mcp.md#tasks)
        if expired:
            log.info("MCP tasks expired: %s", expired)
        # Notifications no job collected or sent (lost jobs, a flushed Redis: docs/notifications.md#reliable).
        notified = notifications.sweep(runtime, utcnow())
        if notified["collected"] or notified["released"]:
            log.info("notifications swept: %s", notified)
    finally:
        database.close()
        metrics.worked()


def peer_events_loop(runtime: Runtime, stopping: threading.Event) -> None:
    """Every PEER_EVENTS_POLL_SECONDS: a fetch job for each paired relay some conversation here
    watches (docs/relays.md#events-across-relays); the job itself is short and never sleeps."""
    period = runtime.time("PEER_EVENTS_POLL_SECONDS")
    while not stopping.wait(period):
        try:
            peer_events.enqueue_due(runtime, utcnow())
        except Exception:
            log.exception("the paired relays' events sweep failed; trying again in %s s", period)
        finally:
            database.close()


def checkpoint_loop(runtime: Runtime, stopping: threading.Event) -> None:
    """Every SQLITE_CHECKPOINT_SECONDS: SQLite's WAL back into the database, here rather than
    in whichever writer's commit found it long (oar.core.db.checkpoint); skipped while nothing
    was committed since the last complete one."""
    period = runtime.time("SQLITE_CHECKPOINT_SECONDS")
    copied: tuple[int, int] | None = None
    while not stopping.wait(period):
        try:
            seen = wal_state()
            if seen is not None and seen == copied:
                continue
            copied = seen if checkpoint() else None
        except Exception:
            log.exception("the WAL checkpoint failed; trying again in %s s", period)
        finally:
            database.close()


def main(config: Config) -> None:
    """`oar clock` for the relay of `config`: the clock as a process of its own (the Procfile's `clock`)."""
    launcher = lifeline.take_launcher_pid()
    if launcher is not None:
        lifeline.watch_parent(launcher)
    open_database(config)
    refuse_newer_schema()  # raises NewerSchema: a node older than the database fires nothing
    runtime = Runtime(config)
    if config.metrics_on:  # the clock's figures (docs/operations.md#watching-it); a previous clock's go
        metric_files.sweep_kind(config.metrics_folder, "clock")
    metrics.start("clock", config)
    freeze_loaded_objects()  # a full collection's pause would delay a due schedule
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    run(runtime, stopping)


def run(runtime: Runtime, stopping: threading.Event) -> None:
    """The clock's sweeps and timers until `stopping` is set: in `oar clock`'s main thread, or in a
    thread of `oar worker --clock` (the embedded relay's, docs/operations.md#running-the-relay).
    Takes no signal of its own, so that it can run beside a worker that takes them."""
    period = runtime.time("RECONCILE_SECONDS")
    log.info("clock started: reconciling every %s s", period)
    # Says the clock is there, for readiness (docs/operations.md#health-check).
    beacon = Beacon(runtime.redis, runtime.config.namespace, CLOCK, runtime.time("ALIVE_SECONDS"),
                    runtime.time("ALIVE_STALE_SECONDS"))
    beacon.start()
    DueTimer(runtime, stopping).start()
    threading.Thread(target=peer_events_loop, args=(runtime, stopping), name="peer-events", daemon=True).start()
    if is_sqlite():
        threading.Thread(target=checkpoint_loop, args=(runtime, stopping), name="checkpoints", daemon=True).start()
    try:
        while not stopping.is_set():
            try:
                tick(runtime)
            except Exception:
                log.exception("reconciler run failed; trying again in %s s", period)
            stopping.wait(period)
    finally:
        beacon.stop()
