"""Pruning what the delivery engine no longer needs (docs/limits.md#retention).

Without it the engine's tables only grow: one held row per watcher and event, one event row
per turn, question and task change. The clock prunes them every PRUNE_EVERY_SECONDS, by these
rules on the existing tables:

- held rows delivered (or dropped) more than HELD_KEEP_SECONDS ago: list_subscriptions and
  the page count and show only undelivered rows (`oar.watching.views`), and the engine's
  cursor never reads an event twice, so nothing asks for them again;
- event lines (the text a held bundle carries once for all its watchers) the cursor has read,
  before the first event of any held row still there;
- events older than EVENT_KEEP_SECONDS that the engine's cursor has passed, that no
  undelivered held row came from, and never the newest event (on SQLite a deleted highest
  `seq` would be handed out again, to an event the cursor would then skip);
- wake-ups older than two cap spans (the hourly cap counts one span);
- own-prompt receipts (`ReplyReceipt`) of turns that ended more than HELD_KEEP_SECONDS ago
  or no longer exist, once nobody waits on them.

Each kind goes in batches of PRUNE_BATCH rows, one short write transaction each, with
PRUNE_PAUSE_SECONDS between them so that other writers get SQLite's lock. Every batch
deletes only rows the rules allow, so a clock killed between (or inside) batches loses
nothing needed and the next run goes on where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

import peewee as pw

from oar.core import defaults
from oar.core.db import released_connection, write_transaction
from oar.core.models import Event, EventLine, HeldEvent, Message, ReplyReceipt, Setting, Wakeup
from oar.core.runtime import Runtime
from oar.watching import ingest, subscription_rules

log = logging.getLogger("oar.pruning")

# When this clock process prunes next (monotonic seconds); 0: at its first tick.
_next_run = 0.0


def prune_if_due(runtime: Runtime, now: datetime) -> dict[str, int] | None:
    """The clock's call on every tick: prune when PRUNE_EVERY_SECONDS have passed since the
    last complete run (a run cut short by its time budget goes on at the next tick)."""
    global _next_run
    if time.monotonic() < _next_run:
        return None
    pruned, complete = prune(runtime, now, budget_seconds=runtime.time("RECONCILE_SECONDS"))
    if complete:
        _next_run = time.monotonic() + runtime.time("PRUNE_EVERY_SECONDS")
    if any(pruned.values()):
        log.info("pruned: %s", pruned)
    return pruned


def prune(runtime: Runtime, now: datetime, budget_seconds: float | None = None) -> tuple[dict[str, int], bool]:
    """Delete what the rules allow (see the module's docstring); returns the rows deleted per
    table and whether everything due was pruned (False: the budget ran out first)."""
    started = time.monotonic()
    held_before = now - timedelta(seconds=runtime.time("HELD_KEEP_SECONDS"))
    steps: list[tuple[str, Callable[[], pw.Expression | None]]] = [
        ("held", lambda: HeldEvent.delivered_at.is_null(False) & (HeldEvent.delivered_at < held_before)),
        ("held", lambda: _held_dropped(held_before)),
        ("lines", _lines_done),
        ("events", lambda: _events_done(now - timedelta(seconds=runtime.time("EVENT_KEEP_SECONDS")))),
        ("wakeups", lambda: Wakeup.delivered_at < now - timedelta(seconds=2 * subscription_rules.timing(runtime).hour_seconds)),
        ("receipts", lambda: _receipts_done(held_before)),
    ]
    models = {"held": HeldEvent, "lines": EventLine, "events": Event, "wakeups": Wakeup, "receipts": ReplyReceipt}
    pruned = dict.fromkeys(models, 0)
    for name, rule in steps:
        model = models[name]
        while True:
            if budget_seconds is not None and time.monotonic() - started >= budget_seconds:
                return pruned, False
            deleted = _delete_batch(model, rule)
            pruned[name] += deleted
            if deleted < defaults.PRUNE_BATCH:
                break
            # On SQLite other writers get the lock meanwhile; on PostgreSQL it spreads the work.
            with released_connection():
                time.sleep(runtime.time("PRUNE_PAUSE_SECONDS"))
    return pruned, True


def _delete_batch(model: type[pw.Model], rule: Callable[[], pw.Expression | None]) -> int:
    """One transaction: at most PRUNE_BATCH rows that `rule` (read inside it) allows."""
    key = cast(pw.Field, model._meta.primary_key)
    with write_transaction():
        condition = rule()
        if condition is None:
            return 0
        batch = model.select(key).where(condition).limit(defaults.PRUNE_BATCH)
        return int(model.delete().where(key.in_(batch)).execute())


def _held_dropped(before: datetime) -> pw.Expression:
    # A rule of its own (not an OR with the delivered rows) so that each is one index range.
    return HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == True) & (HeldEvent.created_at < before)  # noqa: E712


def _events_done(before: datetime) -> pw.Expression | None:
    """Old events below the floor: what the cursor has read, before the first event an
    undelivered held row came from, and below the newest event."""
    newest = Event.select(pw.fn.MAX(Event.seq)).scalar()
    if newest is None:
        return None
    cursor = Setting.get_or_none(Setting.key == ingest.CURSOR_KEY)
    # No cursor: nothing was ever watched, so no ingestion has old events to read.
    floor = newest - 1 if cursor is None else min(int(cursor.value), newest - 1)
    first_held = (
        HeldEvent.select(pw.fn.MIN(HeldEvent.event_seq))
        .where(HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False) & HeldEvent.event_seq.is_null(False))  # noqa: E712
        .scalar()
    )
    if first_held is not None:
        floor = min(floor, first_held - 1)
    return (Event.seq <= floor) & (Event.created_at < before)


def _lines_done() -> pw.Expression | None:
    """Event lines (docs/events.md#how-events-are-held) no held bundle still carries: read by the
    cursor, and before the first event of any held row that is left (delivered rows stay an
    hour, and their lines with them)."""
    cursor = Setting.get_or_none(Setting.key == ingest.CURSOR_KEY)
    if cursor is None:
        return None
    floor = int(cursor.value)
    first_kept = (
        HeldEvent.select(pw.fn.MIN(HeldEvent.event_seq))
        .where(HeldEvent.seqs.is_null(False) & HeldEvent.event_seq.is_null(False))
        .scalar()
    )
    if first_kept is not None:
        floor = min(floor, first_kept - 1)
    return EventLine.seq <= floor


def _receipts_done(before: datetime) -> pw.Expression:
    """Receipts nobody waits on whose turn ended before `before`, or is gone (its
    conversation deleted): its `turn_end` was ingested long since."""
    live = Message.select(pw.SQL("1")).where(
        (Message.id == ReplyReceipt.turn_id) & (Message.completed_at.is_null() | (Message.completed_at >= before))
    )
    not_waiting = ReplyReceipt.waiting_until.is_null() | (ReplyReceipt.waiting_until < before)
    return not_waiting & ~pw.fn.EXISTS(live)
