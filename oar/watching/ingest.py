"""Ingesting events (docs/events.md): new events, read in `seq` order, become held rows.

The database is the truth. `ingest` claims a batch by moving the engine's cursor with a
conditional UPDATE and, in the same transaction, holds the batch for every watcher it
concerns (`oar.watching.holding`). Two paths run it, and either may win: the RQ job
`workers.delivery.ingest` right after an event is committed, and the clock's sweeper
(`oar.watching.sweep`) for anything a lost job or a flushed Redis left behind.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from oar.core import defaults
from oar.core.db import is_sqlite, released_connection, write_transaction
from oar.core.models import Event, Setting, Subscription
from oar.core.runtime import Runtime
from oar.watching import due_jobs, held, holding, subscription_rules

CURSOR_KEY = held.CURSOR_KEY
INGEST_BATCH = 2000
# How long a gap in event numbers may stand for an event not committed yet (see
# committed_in_order); the relay's write transactions last milliseconds.
EVENT_GAP_GRACE = timedelta(seconds=10)


def ensure_cursor() -> None:
    """The engine's cursor exists once anything is watched (written with the first
    subscription, so that no background job adds the row later)."""
    Setting.insert(key=CURSOR_KEY, value=0).on_conflict_ignore().execute()


def _cursor() -> int:
    if Setting.get_or_none(Setting.key == CURSOR_KEY) is None:
        ensure_cursor()
        return 0
    return held.cursor()


def committed_in_order(cursor: int, events: list[Event], now: datetime, grace: timedelta) -> list[Event]:
    """The events that can be read past `cursor` without skipping one that commits later.
    On PostgreSQL an event's `seq` is drawn when it is inserted, and transactions commit in
    any order: a missing `seq` may be an event whose transaction has not committed yet. So
    reading stops at the first gap, unless the event after the gap is older than `grace`:
    then the gap is an insert that was rolled back (sequences keep no holes filled). SQLite
    has one writer at a time and no such gaps.
    """
    ready = []
    # Nothing read yet (cursor 0): the numbering may start anywhere (a PostgreSQL sequence
    # does not restart when rows are deleted).
    expected = cursor + 1 if cursor else None
    for event in events:
        if expected is not None and event.seq != expected and now - event.created_at < grace:
            break
        ready.append(event)
        expected = event.seq + 1
    return ready


def ingest(runtime: Runtime, now: datetime, limit: int | None = None) -> int:
    """Turn new events into held rows for every watcher they concern; returns how many events.
    One batch reads at most INGEST_BATCH events, and fewer when many subscriptions are
    active (INGEST_ROWS_PER_BATCH events × subscriptions looked at), so that a wide fan-out
    keeps each write transaction short. A batch writes about one held row per watcher
    (docs/events.md#how-events-are-held), so larger batches write fewer rows.
    """
    if limit is None:
        active = Subscription.select().where(Subscription.ended_at.is_null()).count()
        limit = max(1, min(INGEST_BATCH, defaults.INGEST_ROWS_PER_BATCH // max(1, active)))
    cursor = _cursor()
    events = list(Event.select().where(Event.seq > cursor).order_by(Event.seq).limit(limit))
    events = committed_in_order(cursor, events, now, EVENT_GAP_GRACE)
    if not events:
        return 0
    to_schedule: list[str] = []
    try:
        with write_transaction():
            claimed = (
                Setting.update(value=events[-1].seq)
                .where((Setting.key == CURSOR_KEY) & (Setting.value == cursor))
                .execute()
            )
            if claimed != 1:
                raise held.Lost
            _touched, to_schedule = holding.hold(events, now, subscription_rules.timing(runtime))
    except held.Lost:
        return 0
    for due in {due for watcher_id in to_schedule if (due := held.next_due(watcher_id)) is not None}:
        due_jobs.enqueue_due(runtime, due)
    return len(events)


def ingest_pending(runtime: Runtime, now_reader: Any, budget_seconds: float | None = None) -> int:
    """Ingest batch after batch until nothing new is left (or `budget_seconds` have passed);
    returns how many events.

    On SQLite one writer holds the database at a time, and a waiting writer only retries
    now and then (its busy timeout): a loop that starts its next batch the moment the last
    one commits would keep deliveries, turns and requests waiting until they time out. So
    between batches it gives the write lock up for INGEST_PAUSE_SECONDS.
    """
    started = time.monotonic()
    total = 0
    while (count := ingest(runtime, now_reader())) > 0:
        total += count
        if budget_seconds is not None and time.monotonic() - started >= budget_seconds:
            break
        if is_sqlite():
            with released_connection():
                time.sleep(runtime.time("INGEST_PAUSE_SECONDS"))
    return total
