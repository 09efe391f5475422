"""Delivering held events (docs/events.md): a watcher's due rows become one automated message.

`deliver` claims a watcher's due rows with a conditional UPDATE and writes the message. The
RQ job of a due time (`workers.delivery.deliver_due`, enqueued by `oar.watching.due_jobs`)
delivers to every watcher due by then; RQ's scheduler may start it early, so the job
compares `now` with the stored due time. The clock's sweeper delivers whatever is overdue.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from peewee import DoesNotExist, fn

from oar.core import keys, lease_lock
from oar.core.db import released_connection, write_transaction
from oar.core.models import HeldEvent, Session, Subscription, Wakeup
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.turns import automated, turns
from oar.watching import delivery, due_jobs, held, outbox, subscription_rules

log = logging.getLogger(__name__)


EARLY_WAIT_SECONDS = 2.0


def run_due_job(runtime: Runtime, stamp: int, now_reader: Any) -> int:
    """The RQ job of one due time: deliver to every watcher due by then; when started early
    (RQ's scheduler may), wait a little or enqueue again."""
    due = datetime.fromtimestamp(stamp / 1000, UTC).replace(tzinfo=None)
    early = (due - now_reader()).total_seconds()
    if early > EARLY_WAIT_SECONDS:
        due_jobs.enqueue_due(runtime, due, suffix="-again")
        return 0
    if early > 0:
        with released_connection():
            time.sleep(early)
    return deliver_overdue(runtime, now_reader)


def deliver_overdue(runtime: Runtime, now_reader: Any, lag_seconds: float = 0) -> int:
    """Deliver to every watcher with events due (at least `lag_seconds` ago), earliest first,
    until none is left; returns how many deliveries were made.

    One relay process at a time does it (a lock in Redis): a second caller returns at once,
    since the one delivering goes on until nothing due is left. Deliveries write one after the
    other anyway (on SQLite one writer at a time), and two runners would only collide on the
    same watchers. Without Redis both go on: the claims keep every delivery single.
    """
    if not runtime.settings()["agent_sessions_enabled"]:
        return 0
    delivered = 0
    while True:
        lease = lease_lock.take(runtime.redis, keys.delivery_lock(runtime.config.namespace), runtime.time("DELIVERY_LOCK_SECONDS"))
        if lease is None:
            return delivered
        unlocked = not lease.held
        made_in_round = 0
        try:
            while made := _deliver_pass(runtime, now_reader(), lag_seconds, lease):
                made_in_round += made
        finally:
            lease.release()
        delivered += made_in_round
        # A caller that found the lock taken just now left its watchers to this one (a round
        # that delivered nothing stops: what is left keeps failing, and the sweeper retries it).
        if unlocked or not made_in_round or not _overdue_watchers(now_reader() - timedelta(seconds=lag_seconds)):
            return delivered


def _deliver_pass(runtime: Runtime, now: datetime, lag_seconds: float, lease: lease_lock.Lease) -> int:
    made = 0
    lines = held.Lines()  # the watchers of a wide fan-out carry the same bundled lines
    for watcher_id in _overdue_watchers(now - timedelta(seconds=lag_seconds)):
        try:
            if deliver(runtime, watcher_id, now, lines) == "delivered":
                made += 1
        except Exception:  # one broken watcher must not stop the others
            log.exception("delivery to %s failed; trying again at the next sweep", watcher_id)
        lease.renew()
    return made


def _overdue_watchers(due_by: datetime) -> list[str]:
    # Read to the end first: on SQLite a statement still being read keeps a read snapshot
    # open, and a write transaction begun on the same connection meanwhile fails at once.
    first = fn.MIN(HeldEvent.due_at)
    return [
        row.watcher_id for row in HeldEvent.select(HeldEvent.watcher, first.alias("first"))
        .where(HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False) & (HeldEvent.due_at <= due_by))  # noqa: E712
        .group_by(HeldEvent.watcher)
        .order_by(first)
    ]


def run_job(runtime: Runtime, watcher_id: str, now_reader: Any) -> str:
    """One watcher's delivery job, as earlier versions enqueued it: deliver what is due; when
    started early, wait a little or leave it to the job of its due time."""
    due = held.next_due(watcher_id)
    if due is None:
        return "nothing"
    early = (due - now_reader()).total_seconds()
    if early > EARLY_WAIT_SECONDS:
        due_jobs.schedule_next(runtime, watcher_id)
        return "early"
    if early > 0:
        with released_connection():
            time.sleep(early)
    return deliver(runtime, watcher_id, now_reader())


# A delivery pass makes these for each of hundreds of watchers whose windows closed together:
# their SQL is built once (oar/core/prepared.py).
_WATCHER = Prepared(lambda watcher_id: Session.select().where(Session.id == watcher_id).limit(1))
_UNDELIVERED = Prepared(
    lambda watcher_id: HeldEvent.select(
        HeldEvent.id, HeldEvent.due_at, HeldEvent.reason, HeldEvent.urgent, HeldEvent.subscription_id, HeldEvent.line,
        HeldEvent.count, HeldEvent.seqs, HeldEvent.event_seq, HeldEvent.position, HeldEvent.kind,
    ).where(held.undelivered(watcher_id)).namedtuples()
)
_SUBSCRIPTIONS = Prepared(lambda ids: Subscription.select().where(Subscription.id.in_(ids)))


def deliver(runtime: Runtime, watcher_id: str, now: datetime, lines: held.Lines | None = None) -> str:
    """Deliver the watcher's due events as one message: `delivered`, `nothing`, `paused`,
    `dropped` or `lost` (another worker delivered them first)."""
    if not runtime.settings()["agent_sessions_enabled"]:
        return "paused"  # subscriptions deliver nothing while agent sessions are off (docs/rules.md#agent-sessions-on-or-off)
    watcher = _WATCHER.first(watcher_id)
    if watcher is None or watcher.archived or watcher.deleted:
        HeldEvent.update(dropped=True).where((HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null()).execute()
        return "dropped"
    rows = {row.id: row for row in _UNDELIVERED.rows(watcher_id)}
    chosen = [rows[h.key] for h in delivery.batch([delivery.Held(r.id, r.due_at, r.reason, r.urgent) for r in rows.values()], now)]
    if not chosen:
        due_jobs.schedule_next(runtime, watcher_id)
        return "nothing"
    # The message is written before the write lock is taken (a wide fan-out's is thousands of
    # lines, for hundreds of watchers whose windows close together): its rows are claimed
    # below only if still undelivered, and lines and the subscriptions' digest and quiet
    # hours never change.
    text = _message_text(chosen, lines or held.Lines())
    # Another relay's conversation (its stand-in here) gets the message by fetching it
    # (docs/relays.md#events-across-relays): it waits in the outbox, and no turn runs here.
    remote = watcher.remote_relay is not None
    try:
        with write_transaction():
            watcher = _WATCHER.first(watcher_id)
            if watcher is None:
                raise DoesNotExist(f"session {watcher_id} is gone")
            if remote:
                message_id = outbox.put(runtime, watcher_id, text, _kinds(chosen), now)
            else:
                message_id = automated.insert(watcher, text, turns.Provenance(kind="event", hops=0)).id
            claimed = held.claim([r.id for r in chosen], now, message_id)
            if claimed != len(chosen):
                raise held.Lost
            # The hourly cap counts wake-ups; older records are of no more use.
            Wakeup.create(watcher=watcher_id, message_id=message_id, delivered_at=now)
            Wakeup.delete().where(
                (Wakeup.watcher == watcher_id) & (Wakeup.delivered_at < now - timedelta(seconds=2 * subscription_rules.timing(runtime).hour_seconds))
            ).execute()
            digested = {r.subscription_id for r in chosen if r.reason == delivery.DIGEST}
            if digested:
                Subscription.update(last_digest_at=now).where(Subscription.id.in_(digested)).execute()
    except held.Lost:
        return "lost"
    if not remote:
        turns.start_turns(runtime, watcher_id)
    due_jobs.schedule_next(runtime, watcher_id)
    return "delivered"


def _kinds(rows: list[Any]) -> dict[str, int]:
    """How many events of each kind a delivery holds (for the `replayed` line on the other relay)."""
    counted: dict[str, int] = {}
    for row in rows:
        counted[row.kind] = counted.get(row.kind, 0) + (row.count or 1)
    return counted


def _message_text(rows: list[Any], lines: held.Lines) -> str:
    reasons = {row.reason for row in rows}
    subs = {s.id: s for s in _SUBSCRIPTIONS.rows(list({r.subscription_id for r in rows}))}
    digest_subs = [subscription_rules.rules_of(s) for s in subs.values() if s.digest_minutes]
    quiet = next((subscription_rules.quiet_of(s) for s in subs.values() if s.quiet_hours), None)
    text = [automated.EVENT_HEADER]
    heading = delivery.digest_line(sum(row.count for row in rows), reasons, digest_subs, quiet)
    if heading:
        text.append(heading)
    in_order = _bundles_in_order(rows, lines)
    if in_order is not None:
        text.extend(in_order)
    else:
        text.extend(line for _key, line in sorted(_ordered_lines(rows, lines), key=lambda item: item[0]))
    return "\n".join(text)


def _bundles_in_order(rows: list[Any], lines: held.Lines) -> list[str] | None:
    """The lines `_ordered_lines` would give, without placing each line: for rows of events
    only (a wide fan-out's bundles, one per ingested batch), each in order and none
    overlapping another, the rows in the order of their first events. None otherwise.
    A watcher of a busy relay gets thousands of lines in each of a window's rows, the same
    rows (and lines, `held.Lines`) as every other watcher of everything."""
    spans: list[tuple[int, int, list[str]]] = []
    for row in rows:
        if row.seqs:
            span = lines.span(row.seqs)
            if span is None:
                return None
            if span[2]:
                spans.append(span)
        elif row.event_seq is not None:
            spans.append((row.event_seq, row.event_seq, [row.line]))
        else:
            return None  # an engine line (all_idle, a heartbeat): placed among the events
    spans.sort(key=lambda span: span[0])
    if any(later[0] <= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)):
        return None
    return [line for _first, _last, found in spans for line in found]


def _ordered_lines(rows: list[Any], lines: held.Lines) -> list[tuple[tuple[int, int, int], str]]:
    """Every line of `rows` with its place (docs/events.md#how-events-are-held): events in
    the order they happened (their numbers), the engine's own lines (`all_idle`,
    heartbeats) after the events ingested before them."""
    placed: list[tuple[tuple[int, int, int], str]] = []
    for row in rows:
        if row.seqs:
            placed.extend(((seq, 0, row.id), line) for seq, line in lines.of(row.seqs))
        elif row.event_seq is not None:
            placed.append(((row.event_seq, 0, row.id), row.line))
        else:
            placed.append(((row.position or 0, 1, row.id), row.line))
    return placed
