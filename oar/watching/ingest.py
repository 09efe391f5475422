"""Ingesting events (docs/events.md): new events, read in `seq` order, become held rows.

The database is the truth. `ingest` reads a batch and matches it (`oar.watching.matching`)
outside any transaction, then claims it by moving the engine's cursor with a conditional
UPDATE and, in the same short transaction, holds it for every watcher it concerns
(`oar.watching.holding`). Two paths run it, and either may win: the RQ job
`workers.delivery.ingest` right after an event is committed, and the clock's sweeper
(`oar.watching.sweep`) for anything a lost job or a flushed Redis left behind; one process
at a time runs `ingest_pending` (a lock in Redis), and the claim keeps it right without.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from oar.core import defaults, jobs, keys, lease_lock
from oar.core.db import is_sqlite, lock_rows, released_connection, write_transaction
from oar.core.models import Event, Setting, Subscription
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.watching import due_jobs, held, holding, matching, subscription_rules

CURSOR_KEY = held.CURSOR_KEY
INGEST_BATCH = 2000
# Batches read and matched before one is claimed (another ingester may claim each first).
INGEST_ATTEMPTS = 3
# How long a gap in event numbers may stand for an event not committed yet (see
# committed_in_order); the relay's write transactions last milliseconds.
EVENT_GAP_GRACE = timedelta(seconds=10)


def ensure_cursor(watching_since: datetime | None = None) -> None:
    """The engine's cursor exists once anything is watched (written with the first
    subscription, so that no background job adds the row later).

    Given the first subscription's start, it starts past the events older than that by
    more than EVENT_GAP_GRACE: no subscription holds an event from before it was written
    (`watch_start`), and from 0 the engine read and matched up to a week of history
    (events are kept 7 days) while the first watcher's events waited behind it. The grace
    leaves to be read the events of transactions still open then (on PostgreSQL a `seq` is
    drawn at the insert and transactions commit in any order); the newest event older than
    it stands for all of smaller `seq`, whose inserts came before its own."""
    start = 0
    if watching_since is not None:
        older = (Event.select(Event.seq).where(Event.created_at < watching_since - EVENT_GAP_GRACE)
                 .order_by(Event.created_at.desc()).limit(1).scalar())
        start = older or 0
    Setting.insert(key=CURSOR_KEY, value=start).on_conflict_ignore().execute()


def watch_start() -> datetime:
    """Inside the write transaction that writes a subscription: the moment it starts watching.

    The engine holds an event for a subscription created at or before the event
    (`matching`), and matches each batch against the subscriptions there when it claims the
    batch (`claim_and_hold`). So the moment is taken once no batch can be claimed meanwhile:
    under SQLite's write lock, which the claim needs too, and on PostgreSQL with the cursor's
    row locked, as the claim's UPDATE locks it. A batch claimed before holds only events
    written before this moment; one claimed after sees the new subscription. Taken at the
    start of the call instead (before its card, its checks), an event written in between and
    claimed before the subscription was committed was held for nobody
    (docs/decisions.md#a-subscription-watches-from-when-it-is-written-issue-14).
    """
    lock_rows(Setting.select().where(Setting.key == CURSOR_KEY))
    return utcnow()


def _cursor() -> int | None:
    """The cursor, or None while nothing was ever watched: then there is nothing to ingest,
    and a background job must not add the row (a refused call would seem to have changed
    the database). A watcher without the row (it is written with the first subscription)
    gets it here."""
    if Setting.get_or_none(Setting.key == CURSOR_KEY) is None:
        if not Subscription.select().where(Subscription.ended_at.is_null()).exists():
            return None
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
    active (INGEST_ROWS_PER_BATCH events × subscriptions looked at). A batch writes about
    one held row per watcher (docs/events.md#how-events-are-held), so larger batches write
    fewer rows.

    The batch is matched before the write lock is taken, and the write transaction only
    claims the cursor (if it is still where the batch was read from) and writes: on SQLite
    one writer holds the database at a time, and matching a batch for hundreds of
    subscriptions made every event writer wait for it. A batch another ingester claimed
    first is left to it, and the next one is read (at most INGEST_ATTEMPTS tries).
    """
    for _attempt in range(INGEST_ATTEMPTS):
        try:
            return _ingest_once(runtime, now, limit)
        except held.Lost:
            continue
    return 0


def _ingest_once(runtime: Runtime, now: datetime, limit: int | None) -> int:
    batch = read_batch(now, limit)
    return 0 if batch is None else claim_and_hold(runtime, now, batch)


@dataclass
class Batch:
    """A batch read past the cursor `after` and matched, not claimed yet."""

    after: int
    matched: matching.Match


def read_batch(now: datetime, limit: int | None = None) -> Batch | None:
    """Read the next batch and match it, outside any transaction (the long part)."""
    if limit is None:
        active = Subscription.select().where(Subscription.ended_at.is_null()).count()
        limit = max(1, min(INGEST_BATCH, defaults.INGEST_ROWS_PER_BATCH // max(1, active)))
    cursor = _cursor()
    if cursor is None:
        return None
    events = list(Event.select().where(Event.seq > cursor).order_by(Event.seq).limit(limit))
    events = committed_in_order(cursor, events, now, EVENT_GAP_GRACE)
    return Batch(cursor, matching.match(events)) if events else None


def claim_and_hold(runtime: Runtime, now: datetime, batch: Batch) -> int:
    """Claim `batch` (the cursor moves on only if it is still where the batch was read from)
    and hold it, in one short write transaction; returns how many events. Raises `held.Lost`
    when another ingester claimed it first: nothing is written and the work is dropped."""
    events = batch.matched.events
    with write_transaction():
        claimed = (
            Setting.update(value=events[-1].seq)
            .where((Setting.key == CURSOR_KEY) & (Setting.value == batch.after))
            .execute()
        )
        if claimed != 1:
            raise held.Lost
        matched = batch.matched
        if not matched.still_holds():
            matched = matching.match(events)  # a subscription or a title changed meanwhile
        _touched, to_schedule = holding.hold(matched, now, subscription_rules.timing(runtime))
    for due in {due for watcher_id in to_schedule if (due := held.next_due(watcher_id)) is not None}:
        due_jobs.enqueue_due(runtime, due)
    return len(events)


def ingest_pending(runtime: Runtime, now_reader: Any, budget_seconds: float | None = None) -> int:
    """Ingest batch after batch until nothing new is left, or `budget_seconds` have passed
    (then a worker's ingest job goes on with what is left); returns how many events.

    One relay process at a time does it (a lock in Redis, as for deliveries): every event
    commit enqueues an ingestion, and ingesters that read the same batch would each match it
    (the long part) for all but one to drop the work. A caller that finds the lock taken
    returns at once; the holder, once it gives the lock back, looks again for events
    committed meanwhile. Without Redis all go on: the cursor claim keeps every event held once.

    On SQLite one writer holds the database at a time: a loop that claimed its next batch the
    moment the last one committed would keep deliveries, turns and requests waiting. After a
    claim it leaves the lock for INGEST_PAUSE_SECONDS, and then reads and matches the next
    batch without it; the relay's writers try the lock every millisecond
    (`db.write_transaction`) and take it meanwhile.
    """
    started = time.monotonic()
    total = 0
    while True:
        made_in_round = 0
        out_of_time = False
        lease = lease_lock.take(runtime.redis, keys.ingest_lock(runtime.config.namespace), runtime.time("DELIVERY_LOCK_SECONDS"))
        if lease is None:
            return total
        unlocked = not lease.held
        try:
            while (count := ingest(runtime, now_reader())) > 0:
                total += count
                made_in_round += count
                if budget_seconds is not None and time.monotonic() - started >= budget_seconds:
                    out_of_time = True
                    break
                lease.renew()
                if is_sqlite():
                    with released_connection():
                        time.sleep(runtime.time("INGEST_PAUSE_SECONDS"))
        finally:
            lease.release()
        if out_of_time:
            # The jobs of events committed meanwhile found the lock taken and left their events
            # to this caller, which stops here: a worker's job goes on with them, once the lock
            # is free (else they waited for the clock's next sweep, a period later).
            if not unlocked and _pending():
                jobs.enqueue_ingestion(runtime)
            return total
        # A caller that found the lock taken just now left its events to this one (a round
        # that ingested nothing stops: what is left waits behind a gap, for the sweeper).
        if unlocked or not made_in_round or not _pending():
            return total


def _pending() -> bool:
    return Event.select().where(Event.seq > held.cursor()).exists()
