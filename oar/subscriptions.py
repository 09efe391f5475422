"""Subscriptions and the delivery engine's stored side (SPEC §8).

The database is the truth. Events (`oar.events`) are read in `seq` order by `ingest`,
which claims a batch by moving the engine's cursor with a conditional UPDATE and, in the
same transaction, writes one `HeldEvent` per watcher with its UTC due time (decided by
`oar.delivery`). `deliver` claims a watcher's due rows with a conditional UPDATE and writes
one automated message. Two paths run both, and either may win:
- RQ jobs: `workers.delivery.ingest` right after an event is committed, and
  `workers.delivery.deliver` at a watcher's next due time (`enqueue_at`; RQ's scheduler
  may start it early, so the job compares `now` with the stored due time);
- the clock's sweeper (`sweep`), for anything a lost job or a flushed Redis left behind.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import peewee as pw
import redis

from oar import automated, delivery, ids, turns
from oar.db import write_transaction
from oar.models import Event, HeldEvent, Message, ReplyReceipt, Session, Setting, Subscription, Task
from oar.quiet_hours import QuietHours, parse
from oar.runtime import Runtime
from oar.sessions import OPEN_TURN
from oar.timeutil import iso

log = logging.getLogger(__name__)

INGEST_JOB = "workers.delivery.ingest"
DELIVER_JOB = "workers.delivery.deliver"
CURSOR_KEY = "delivery_cursor"
MAX_SUBSCRIPTIONS = 20
INGEST_BATCH = 2000
# How long a gap in event numbers may stand for an event not committed yet (see
# committed_in_order); the relay's write transactions last milliseconds.
EVENT_GAP_GRACE = timedelta(seconds=10)
EXCERPT_CHARS = 80
EARLY_WAIT_SECONDS = 2.0


def timing(runtime: Runtime) -> delivery.Timing:
    return delivery.Timing(
        window_seconds=runtime.time("DELIVERY_WINDOW_SECONDS"),
        hour_seconds=runtime.time("DELIVERY_CAP_HOUR_SECONDS"),
        cap_digest_seconds=runtime.time("DELIVERY_CAP_DIGEST_SECONDS"),
        minute_seconds=runtime.time("DELIVERY_MINUTE_SECONDS"),
    )


def new_id() -> str:
    return ids.prefixed_id("sub")


def active_of(watcher_id: str) -> pw.ModelSelect:
    return Subscription.select().where((Subscription.watcher == watcher_id) & Subscription.ended_at.is_null())


def quiet_of(subscription: Subscription) -> QuietHours | None:
    return parse(subscription.quiet_hours) if subscription.quiet_hours else None


def rules_of(subscription: Subscription) -> delivery.Rules:
    return delivery.Rules(
        id=subscription.id,
        created_at=subscription.created_at,
        digest_minutes=subscription.digest_minutes,
        quiet=quiet_of(subscription),
        last_digest_at=subscription.last_digest_at,
    )


def watches(subscription: Subscription, session_id: str) -> bool:
    if session_id == subscription.watcher_id:
        return False  # a conversation's own session is never watched
    if subscription.scope == "all":
        return session_id not in (subscription.exclude or [])
    return session_id in (subscription.sessions or [])


def matches_text(pattern: str | None, text: str) -> bool:
    if not pattern:
        return True
    if len(pattern) > 2 and pattern.startswith("/") and pattern.endswith("/"):
        return re.search(pattern[1:-1], text, re.IGNORECASE) is not None
    return pattern.casefold() in text.casefold()


# Event lines ---------------------------------------------------------------------------------


def _excerpt(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 2] + " …"


def event_line(event: Event, session: Session) -> str:
    """`[relay event] session "Review: server/" (3f9c…): turn_end (done) "Found 4 places …"`."""
    payload = event.payload or {}
    head = f'[relay event] session "{session.title}" ({session.id[:4]}…): {event.kind}'
    if event.kind == "turn_end":
        return f'{head} ({payload.get("status")}) "{_excerpt(payload.get("excerpt", ""))}"'
    if event.kind == "error":
        return f'{head} "{_excerpt(payload.get("error", ""))}"'
    if event.kind in ("question_asked", "question_answered"):
        tail = f' → "{_excerpt(payload["answer"])}"' if payload.get("answer") else ""
        return f'{head} {payload.get("questionId", "")} "{_excerpt(payload.get("question", ""))}"{tail}'
    if event.kind.startswith("task_") or event.kind in ("stalled", "subagent_finished"):
        exit_code = payload.get("exitCode")
        tail = f" (exit {exit_code})" if exit_code not in (None, 0) else ""
        return f'{head} {payload.get("taskId", "")} "{_excerpt(payload.get("description", ""))}"{tail}'
    return head


def busy(session_ids: list[str]) -> bool:
    if not session_ids:
        return False
    turn = Message.select().where(Message.session.in_(session_ids) & Message.status.in_(OPEN_TURN)).exists()
    return turn or Task.select().where(Task.session.in_(session_ids) & (Task.status == "running")).exists()


def watched_ids(subscription: Subscription) -> list[str]:
    if subscription.scope == "sessions":
        return list(subscription.sessions or [])
    rows = Session.select(Session.id).where(
        (Session.archived == False) & (Session.deleted == False) & (Session.id != subscription.watcher_id)  # noqa: E712
    )
    return [row.id for row in rows if row.id not in (subscription.exclude or [])]


# Ingesting events ----------------------------------------------------------------------------


def poke(runtime: Runtime) -> None:
    """Ask a worker to ingest new events (after they are committed); the clock's sweeper
    does it anyway if Redis is unreachable."""
    if not Subscription.select().where(Subscription.ended_at.is_null()).exists():
        return  # nobody watches: the clock's sweeper moves the cursor on
    try:
        runtime.queue.enqueue(INGEST_JOB, result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("event ingestion not enqueued (the sweeper will run it): %s", error)


def _cursor() -> int:
    row = Setting.get_or_none(Setting.key == CURSOR_KEY)
    if row is None:
        Setting.insert(key=CURSOR_KEY, value=0).on_conflict_ignore().execute()
        return 0
    return int(row.value)


class _Lost(Exception):
    """Another worker claimed the same batch or rows: roll back, do nothing."""


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


def ingest(runtime: Runtime, now: datetime, limit: int = INGEST_BATCH) -> int:
    """Turn new events into held rows for every watcher they concern; returns how many events."""
    cursor = _cursor()
    events = list(Event.select().where(Event.seq > cursor).order_by(Event.seq).limit(limit))
    events = committed_in_order(cursor, events, now, EVENT_GAP_GRACE)
    if not events:
        return 0
    watchers: set[str] = set()
    try:
        with write_transaction():
            claimed = (
                Setting.update(value=events[-1].seq)
                .where((Setting.key == CURSOR_KEY) & (Setting.value == cursor))
                .execute()
            )
            if claimed != 1:
                raise _Lost
            watchers = _hold(events, now, timing(runtime))
    except _Lost:
        return 0
    for watcher_id in watchers:
        schedule_next(runtime, watcher_id)
    return len(events)


def _hold(events: list[Event], now: datetime, engine: delivery.Timing) -> set[str]:
    subscriptions = list(Subscription.select().where(Subscription.ended_at.is_null()))
    if not subscriptions:
        return set()
    sessions = {s.id: s for s in Session.select().where(Session.id.in_({e.session_id for e in events}))}
    held_by_watcher: dict[str, list[delivery.Held]] = {}
    wakeups_by_watcher: dict[str, int] = {}
    touched: set[str] = set()
    active_subs: dict[str, list[Subscription]] = defaultdict(list)  # subscription id → watched activity
    for event in events:
        session = sessions.get(event.session_id)
        if session is None:
            continue
        line = event_line(event, session)
        per_watcher: dict[str, list[Subscription]] = defaultdict(list)
        for subscription in subscriptions:
            if subscription.ended_at is not None or event.created_at < subscription.created_at:
                continue
            if not watches(subscription, event.session_id):
                continue
            if event.kind != "session_idle":
                active_subs[subscription.id].append(subscription)
            if event.kind not in (subscription.events or []) or not matches_text(subscription.match, line):
                continue
            per_watcher[subscription.watcher_id].append(subscription)
        for watcher_id, matched in per_watcher.items():
            if watcher_id not in held_by_watcher:
                held_by_watcher[watcher_id] = _pending(watcher_id)
                wakeups_by_watcher[watcher_id] = _wakeups(watcher_id, now, engine)
            _hold_one(event, line, watcher_id, matched, now, engine, held_by_watcher, wakeups_by_watcher)
            touched.add(watcher_id)
    for [subscription, *_] in active_subs.values():
        if subscription.ended_at is None and "all_idle" in (subscription.events or []):
            if _all_idle(subscription, now, engine, held_by_watcher, wakeups_by_watcher):
                touched.add(subscription.watcher_id)
    return touched


def _hold_one(
    event: Event, line: str, watcher_id: str, matched: list[Subscription], now: datetime,
    engine: delivery.Timing, held_by_watcher: dict[str, list[delivery.Held]], wakeups: dict[str, int],
) -> None:
    payload = event.payload or {}
    turn_id = payload.get("turnId") if event.kind == "turn_end" else None
    due_reason: tuple[datetime, str, str] | None = None
    if turn_id and payload.get("fromSession") == watcher_id:
        receipt = ReplyReceipt.get_or_none(ReplyReceipt.turn_id == turn_id)
        if receipt is not None and receipt.received_at is not None:
            _fire_once(matched, now)  # its own waited-for prompt: ends `once`, not delivered
            return
        if receipt is not None and receipt.waiting_until is not None and receipt.waiting_until > now:
            due_reason = (receipt.waiting_until, delivery.OWN, matched[0].id)
    if due_reason is None:
        due_reason = delivery.due_for(
            [rules_of(s) for s in matched], event.kind, now, held_by_watcher[watcher_id], wakeups[watcher_id], engine
        )
    due, reason, subscription_id = due_reason
    row_id = HeldEvent.insert(
        watcher=watcher_id, event_seq=event.seq, subscription_id=subscription_id, kind=event.kind, line=line,
        urgent=event.kind in delivery.URGENT_KINDS, reason=reason, turn_id=turn_id, due_at=due, created_at=now,
    ).on_conflict_ignore().execute()
    if row_id:
        held_by_watcher[watcher_id].append(delivery.Held(row_id, due, reason, event.kind in delivery.URGENT_KINDS))
    _fire_once(matched, now)


def _fire_once(matched: list[Subscription], now: datetime) -> None:
    for subscription in matched:
        if subscription.once and subscription.ended_at is None:
            end(subscription, "fired", now)


def _all_idle(
    subscription: Subscription, now: datetime, engine: delivery.Timing,
    held_by_watcher: dict[str, list[delivery.Held]], wakeups: dict[str, int],
) -> bool:
    """One `all_idle` per transition to idle of all the subscription's sessions."""
    watched = watched_ids(subscription)
    if busy(watched):
        Subscription.update(idle=False).where(Subscription.id == subscription.id).execute()
        return False
    count = len(watched)
    line = (
        f"[relay event] all_idle: no turn or task is running in the {count} watched "
        f"session{'s' if count != 1 else ''} (subscription {subscription.id})"
    )
    watcher_id = subscription.watcher_id
    if watcher_id not in held_by_watcher:
        held_by_watcher[watcher_id] = _pending(watcher_id)
        wakeups[watcher_id] = _wakeups(watcher_id, now, engine)
    due, reason, _ = delivery.due_for([rules_of(subscription)], "all_idle", now, held_by_watcher[watcher_id],
                                      wakeups[watcher_id], engine)
    row_id = HeldEvent.insert(
        watcher=watcher_id, event_seq=None, subscription_id=subscription.id, kind="all_idle", line=line,
        urgent=False, reason=reason, due_at=due, created_at=now,
    ).execute()
    held_by_watcher[watcher_id].append(delivery.Held(row_id, due, reason))
    Subscription.update(idle=True).where(Subscription.id == subscription.id).execute()
    _fire_once([subscription], now)
    return True


def _pending(watcher_id: str) -> list[delivery.Held]:
    rows = HeldEvent.select().where(
        (HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
    )
    return [delivery.Held(row.id, row.due_at, row.reason, row.urgent) for row in rows.order_by(HeldEvent.id)]


def _wakeups(watcher_id: str, now: datetime, engine: delivery.Timing) -> int:
    since = now - timedelta(seconds=engine.hour_seconds)
    return (
        HeldEvent.select(HeldEvent.message_id)
        .where((HeldEvent.watcher == watcher_id) & (HeldEvent.delivered_at > since))
        .distinct()
        .count()
    )


# Own prompts ------------------------------------------------------------------------------------


def waiting_for_reply(turn: Message, waiter_id: str, until: datetime) -> None:
    """The sender of `turn` waits for its reply through send / wait until `until`."""
    if turn.from_session != waiter_id or not active_of(waiter_id).exists():
        return
    with write_transaction():
        ReplyReceipt.insert(turn_id=turn.id, waiter=waiter_id, waiting_until=until).on_conflict(
            conflict_target=[ReplyReceipt.turn_id], update={ReplyReceipt.waiting_until: until}
        ).execute()


def wait_ended(runtime: Runtime, turn: Message, waiter_id: str, now: datetime) -> None:
    """The sender's wait returned: with the finished reply its `turn_end` is not delivered;
    without it, a held `turn_end` is delivered as usual."""
    if turn.from_session != waiter_id or not ReplyReceipt.select().where(ReplyReceipt.turn_id == turn.id).exists():
        return
    received = turn.status in turns.FINISHED
    with write_transaction():
        ReplyReceipt.update(waiting_until=None, received_at=now if received else None).where(
            ReplyReceipt.turn_id == turn.id
        ).execute()
        own = (HeldEvent.watcher == waiter_id) & (HeldEvent.turn_id == turn.id) & HeldEvent.delivered_at.is_null()
        if received:
            HeldEvent.update(dropped=True).where(own).execute()
        else:
            HeldEvent.update(due_at=now, reason=delivery.WINDOW).where(own & (HeldEvent.reason == delivery.OWN)).execute()
    if not received:
        schedule_next(runtime, waiter_id)


# Delivering ---------------------------------------------------------------------------------------


def schedule_next(runtime: Runtime, watcher_id: str) -> None:
    """Enqueue the watcher's delivery job at its next due time (one job per due time)."""
    due = delivery.next_due(_pending(watcher_id))
    if due is None:
        return
    job_id = f"dlv-{watcher_id}-{int(due.replace(tzinfo=UTC).timestamp() * 1000)}"
    try:
        runtime.queue.enqueue_at(due.replace(tzinfo=UTC), DELIVER_JOB, watcher_id, job_id=job_id,
                                 result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("delivery for %s not enqueued (the sweeper will deliver): %s", watcher_id, error)


def run_job(runtime: Runtime, watcher_id: str, now_reader: Any) -> str:
    """The RQ job: deliver what is due; when started early, wait a little or re-enqueue."""
    import time

    from oar.db import released_connection

    due = delivery.next_due(_pending(watcher_id))
    if due is None:
        return "nothing"
    early = (due - now_reader()).total_seconds()
    if early > EARLY_WAIT_SECONDS:
        schedule_next(runtime, watcher_id)
        return "early"
    if early > 0:
        with released_connection():
            time.sleep(early)
    return deliver(runtime, watcher_id, now_reader())


def deliver(runtime: Runtime, watcher_id: str, now: datetime) -> str:
    """Deliver the watcher's due events as one message: `delivered`, `nothing`, `paused`,
    `dropped` or `lost` (another worker delivered them first)."""
    if not runtime.settings()["agent_sessions_enabled"]:
        return "paused"  # subscriptions deliver nothing while agent sessions are off (SPEC §4)
    watcher = Session.get_or_none(Session.id == watcher_id)
    if watcher is None or watcher.archived or watcher.deleted:
        HeldEvent.update(dropped=True).where((HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null()).execute()
        return "dropped"
    rows = {
        row.id: row
        for row in HeldEvent.select().where(
            (HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
        )
    }
    chosen = [rows[h.key] for h in delivery.batch([delivery.Held(r.id, r.due_at, r.reason, r.urgent) for r in rows.values()], now)]
    if not chosen:
        schedule_next(runtime, watcher_id)
        return "nothing"
    message: Message | None = None
    try:
        with write_transaction():
            watcher = Session.get_by_id(watcher_id)
            text = _message_text(chosen)
            message = automated.insert(watcher, text, turns.Provenance(kind="event", hops=0))
            claimed = (
                HeldEvent.update(delivered_at=now, message_id=message.id)
                .where(HeldEvent.id.in_([r.id for r in chosen]) & HeldEvent.delivered_at.is_null()
                       & (HeldEvent.dropped == False))  # noqa: E712
                .execute()
            )
            if claimed != len(chosen):
                raise _Lost
            digested = {r.subscription_id for r in chosen if r.reason == delivery.DIGEST}
            if digested:
                Subscription.update(last_digest_at=now).where(Subscription.id.in_(digested)).execute()
    except _Lost:
        return "lost"
    turns.start_turns(runtime, watcher_id)
    schedule_next(runtime, watcher_id)
    return "delivered"


def _message_text(rows: list[HeldEvent]) -> str:
    reasons = {row.reason for row in rows}
    subs = {s.id: s for s in Subscription.select().where(Subscription.id.in_({r.subscription_id for r in rows}))}
    digest_subs = [rules_of(s) for s in subs.values() if s.digest_minutes]
    quiet = next((quiet_of(s) for s in subs.values() if s.quiet_hours), None)
    lines = [automated.EVENT_HEADER]
    heading = delivery.digest_line(len(rows), reasons, digest_subs, quiet)
    if heading:
        lines.append(heading)
    lines.extend(row.line for row in sorted(rows, key=lambda r: r.id))
    return "\n".join(lines)


def sweep(runtime: Runtime, now: datetime) -> dict[str, int]:
    """The clock's part: ingest what no job ingested, deliver whatever is overdue."""
    outcome = {"ingested": 0, "delivered": 0}
    while (count := ingest(runtime, now)) > 0:
        outcome["ingested"] += count
    if not runtime.settings()["agent_sessions_enabled"]:
        return outcome
    overdue = (
        HeldEvent.select(HeldEvent.watcher)
        .where(HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False) & (HeldEvent.due_at <= now))  # noqa: E712
        .distinct()
    )
    for row in overdue:
        try:
            if deliver(runtime, row.watcher_id, now) == "delivered":
                outcome["delivered"] += 1
        except Exception:  # one broken watcher must not stop the others
            log.exception("delivery to %s failed; trying again at the next sweep", row.watcher_id)
    return outcome


# Lifetime and views ----------------------------------------------------------------------------------


def end(subscription: Subscription, reason: str, now: datetime) -> bool:
    changed = (
        Subscription.update(ended_at=now, end_reason=reason)
        .where((Subscription.id == subscription.id) & Subscription.ended_at.is_null())
        .execute()
    )
    subscription.ended_at, subscription.end_reason = now, reason
    return bool(changed)


def end_for_session(session_id: str, now: datetime) -> None:
    """Archiving a session ends its own subscriptions and those that name it in a list; an
    `["all"]` subscription just stops seeing it (inside the archiving transaction)."""
    Subscription.update(ended_at=now, end_reason="archived").where(
        (Subscription.watcher == session_id) & Subscription.ended_at.is_null()
    ).execute()
    for subscription in Subscription.select().where((Subscription.scope == "sessions") & Subscription.ended_at.is_null()):
        if session_id in (subscription.sessions or []):
            end(subscription, "archived", now)
    HeldEvent.update(dropped=True).where((HeldEvent.watcher == session_id) & HeldEvent.delivered_at.is_null()).execute()


def listed_for(watcher_id: str, now: datetime, ended_listed_seconds: float) -> list[Subscription]:
    since = now - timedelta(seconds=ended_listed_seconds)
    return list(
        Subscription.select()
        .where((Subscription.watcher == watcher_id) & (Subscription.ended_at.is_null() | (Subscription.ended_at >= since)))
        .order_by(Subscription.created_at)
    )


def view(subscription: Subscription) -> dict[str, Any]:
    """A subscription as subscribe and list_subscriptions show it (SPEC §8.4)."""
    if subscription.scope == "all":
        sessions: Any = "all"
    else:
        titles = {s.id: s.title for s in Session.select(Session.id, Session.title).where(Session.id.in_(subscription.sessions))}
        sessions = [{"id": sid, "title": titles.get(sid)} for sid in subscription.sessions]
    entry: dict[str, Any] = {
        "id": subscription.id,
        "scope": subscription.scope,
        "sessions": sessions,
        "events": subscription.events,
        "once": subscription.once,
        "match": subscription.match,
        "stalledMinutes": subscription.stalled_minutes,
        "heartbeatMinutes": subscription.heartbeat_minutes,
        "createdAt": iso(subscription.created_at),
    }
    if subscription.digest_minutes:
        entry["digestMinutes"] = subscription.digest_minutes
    if subscription.quiet_hours:
        entry["quietHours"] = subscription.quiet_hours
    if subscription.exclude:
        entry["exclude"] = subscription.exclude
    held = list(
        HeldEvent.select(HeldEvent.due_at).where(
            (HeldEvent.subscription_id == subscription.id) & HeldEvent.delivered_at.is_null()
            & (HeldEvent.dropped == False)  # noqa: E712
        )
    )
    if subscription.ended_at is not None:
        entry["endedAt"] = iso(subscription.ended_at)
        entry["endReason"] = subscription.end_reason
        if not held:
            return entry
    entry["heldCount"] = len(held)
    entry["nextDeliveryAt"] = iso(min((row.due_at for row in held), default=None))
    return entry
