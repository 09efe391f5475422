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

The sweeper also makes the engine's own events: `stalled` (a running turn or task without
output for a subscription's `stalled_minutes`, recorded as an event of its session) and
heartbeats (held straight for their watcher, like `all_idle`). A subagent task's end reaches
subscriptions that list `subagent_finished` under that name (`received_as`).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from math import ceil
from typing import Any

import peewee as pw
import redis
from peewee import fn

from oar.background.tasks import last_output_time
from oar.core import defaults, ids, jobs, keys
from oar.core.db import database, is_sqlite, released_connection, write_transaction
from oar.core.events import record as record_event
from oar.core.models import (
    Event,
    HeldEvent,
    Message,
    ReplyReceipt,
    Session,
    Setting,
    StallWatch,
    Subscription,
    Task,
    Wakeup,
)
from oar.core.runtime import Runtime
from oar.core.timeutil import iso, utcnow
from oar.sessions.state import OPEN_TURN
from oar.turns import automated, turns
from oar.watching import delivery
from oar.watching.quiet_hours import QuietHours, parse

log = logging.getLogger(__name__)

CURSOR_KEY = "delivery_cursor"
MAX_SUBSCRIPTIONS = 20
INGEST_BATCH = 2000
# How long a gap in event numbers may stand for an event not committed yet (see
# committed_in_order); the relay's write transactions last milliseconds.
EVENT_GAP_GRACE = timedelta(seconds=10)
EXCERPT_CHARS = 80
EARLY_WAIT_SECONDS = 2.0
# Held rows claimed by one UPDATE when a delivery carries many (bound variables per statement).
CLAIM_CHUNK = 5000


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


def received_as(subscription: Subscription, event: Event) -> str | None:
    """The kind under which the subscription receives `event`, or None when it does not.

    - A subagent task's end (`task_finished` of a task of type `subagent`) is its
      `subagent_finished`; a subscription that lists `subagent_finished` learns of a failed
      subagent from that line alone, not from its `task_failed` as well.
    - `stalled` events carry the `stalledMinutes` they were recorded for: each subscription
      receives those of its own `stalled_minutes` (the sweeper records one per value in use).
    """
    kinds = subscription.events or []
    payload = event.payload or {}
    if payload.get("type") == "subagent" and "subagent_finished" in kinds:
        if event.kind == "task_finished":
            return "subagent_finished"
        if event.kind == "task_failed":
            return None
    if event.kind == "stalled" and payload.get("stalledMinutes") != subscription.stalled_minutes:
        return None
    return event.kind if event.kind in kinds else None


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


def event_line(event: Event, session: Session, kind: str | None = None) -> str:
    """`[relay event] session "Review: server/" (3f9c…): turn_end (done) "Found 4 places …"`;
    `kind` is the name the watcher receives it under (see `received_as`)."""
    payload = event.payload or {}
    kind = kind or event.kind
    head = f'[relay event] session "{session.title}" ({session.id[:4]}…): {kind}'
    if event.kind == "stalled" and payload.get("stalledMinutes"):
        quiet = f'(no output for {payload["stalledMinutes"]} min)'
        if payload.get("taskId"):
            return f'{head} task {payload["taskId"]} "{_excerpt(payload.get("description", ""))}" {quiet}'
        return f'{head} turn {payload.get("turnId", "")} "{_excerpt(payload.get("prompt", ""))}" {quiet}'
    if kind == "subagent_finished":
        exit_code = payload.get("exitCode")
        status = payload.get("status") or "completed"
        tail = f"{status}, exit {exit_code}" if exit_code not in (None, 0) else status
        return f'{head} {payload.get("taskId", "")} "{_excerpt(payload.get("description", ""))}" ({tail})'
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


def ensure_cursor() -> None:
    """The engine's cursor exists once anything is watched (written with the first
    subscription, so that no background job adds the row later)."""
    Setting.insert(key=CURSOR_KEY, value=0).on_conflict_ignore().execute()


def _cursor() -> int:
    row = Setting.get_or_none(Setting.key == CURSOR_KEY)
    if row is None:
        ensure_cursor()
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


def ingest(runtime: Runtime, now: datetime, limit: int | None = None) -> int:
    """Turn new events into held rows for every watcher they concern; returns how many events.

    One batch reads at most INGEST_BATCH events, and fewer when many subscriptions are
    active (about INGEST_ROWS_PER_BATCH events × subscriptions), so that a wide fan-out
    keeps each write transaction short.
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
                raise _Lost
            _touched, to_schedule = _hold(events, now, timing(runtime))
    except _Lost:
        return 0
    for due in {due for watcher_id in to_schedule if (due := _next_due(watcher_id)) is not None}:
        enqueue_due(runtime, due)
    return len(events)


def ingest_pending(runtime: Runtime, now_reader: Any, budget_seconds: float | None = None) -> int:
    """Ingest batch after batch until nothing new is left (or `budget_seconds` have passed);
    returns how many events.

    On SQLite one writer holds the database at a time, and a waiting writer only retries
    now and then (its busy timeout): a loop that starts its next batch the moment the last
    one commits would keep deliveries, turns and requests waiting until they time out. So
    between batches it gives the write lock up for INGEST_PAUSE_SECONDS.
    """
    import time

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


# Held rows are written this many at a time (11 columns each: far below SQLite's limit of
# bound variables per statement).
HOLD_INSERT_ROWS = 400


class _Holding:
    """What one ingestion (or sweep) knows while it holds events: per watcher, the open
    window and cap digest (`delivery.open_slots`) and the wake-ups of the last hour; which
    sessions are busy; and the held rows to write, inserted together."""

    def __init__(self, now: datetime, engine: delivery.Timing) -> None:
        self.now = now
        self.engine = engine
        self.slots: dict[str, list[delivery.Held]] = {}
        self.wakeups: dict[str, int] = {}
        self.rules: dict[str, delivery.Rules] = {}
        # Per watcher: its next due time before this batch, and the earliest it added.
        self.before: dict[str, datetime | None] = {}
        self.earliest: dict[str, datetime] = {}
        self.rows: list[tuple[Any, ...]] = []
        self._live: list[str] | None = None
        self._turns: dict[str, str] | None = None
        self._tasks: set[str] | None = None

    def due(self, watcher_id: str, matched: list[Subscription], kind: str) -> tuple[datetime, str, str]:
        if watcher_id not in self.slots:
            self.slots[watcher_id] = _open_slots(watcher_id, self.now)
            self.wakeups[watcher_id] = _wakeups(watcher_id, self.now, self.engine)
        rules = []
        for subscription in matched:
            if subscription.id not in self.rules:
                self.rules[subscription.id] = rules_of(subscription)
            rules.append(self.rules[subscription.id])
        return delivery.due_for(rules, kind, self.now, self.slots[watcher_id], self.wakeups[watcher_id], self.engine)

    def add(self, watcher_id: str, due: datetime, reason: str, *, subscription_id: str, kind: str, line: str,
            event_seq: int | None = None, turn_id: str | None = None) -> None:
        self.rows.append(
            (watcher_id, event_seq, subscription_id, kind, line, kind in delivery.URGENT_KINDS, reason, turn_id, due,
             self.now, False)
        )
        if watcher_id not in self.before:
            self.before[watcher_id] = _next_due(watcher_id)
        if watcher_id not in self.earliest or due < self.earliest[watcher_id]:
            self.earliest[watcher_id] = due
        if reason in (delivery.WINDOW, delivery.CAP):
            slots = self.slots.get(watcher_id, [])
            self.slots[watcher_id] = delivery.open_slots([*slots, delivery.Held(0, due, reason)], self.now)

    def flush(self) -> None:
        """Write the rows, one watcher's together (in the order they came): a delivery then
        updates a few pages of the table instead of one page per row."""
        if self.rows:
            _insert_held(sorted(self.rows, key=lambda row: row[0]))
            self.rows = []

    def to_schedule(self) -> list[str]:
        """Watchers whose next due time moved earlier: their delivery job must be enqueued
        (a later one is already covered by the job of the earlier due time)."""
        return [
            watcher_id for watcher_id, earliest in self.earliest.items()
            if self.before.get(watcher_id) is None or earliest < self.before[watcher_id]  # type: ignore[operator]
        ]

    # Session states, read once per batch ------------------------------------------------------

    def watched(self, subscription: Subscription) -> list[str]:
        if subscription.scope == "sessions":
            return list(subscription.sessions or [])
        if self._live is None:
            self._live = [row.id for row in Session.select(Session.id).where(
                (Session.archived == False) & (Session.deleted == False)  # noqa: E712
            )]
        left_out = {subscription.watcher_id, *(subscription.exclude or [])}
        return [session_id for session_id in self._live if session_id not in left_out]

    def turn_states(self) -> dict[str, str]:
        """Sessions with an open turn → `running`, `waiting_for_answer` or `queued`."""
        if self._turns is None:
            self._turns = {}
            rank = {"queued": 0, "waiting_for_answer": 1, "running": 2}
            for session_id, status in Message.select(Message.session, Message.status).where(
                Message.status.in_(OPEN_TURN)
            ).tuples():
                if rank[status] > rank.get(self._turns.get(session_id, ""), -1):
                    self._turns[session_id] = status
        return self._turns

    def tasks_running(self) -> set[str]:
        if self._tasks is None:
            self._tasks = {row[0] for row in Task.select(Task.session).where(Task.status == "running").distinct().tuples()}
        return self._tasks

    def busy(self, session_ids: list[str]) -> bool:
        turns_open, tasks = self.turn_states(), self.tasks_running()
        return any(session_id in turns_open or session_id in tasks for session_id in session_ids)


HELD_FIELDS = ("watcher", "event_seq", "subscription_id", "kind", "line", "urgent", "reason", "turn_id", "due_at",
               "created_at", "dropped")


def _insert_held(rows: list[tuple[Any, ...]]) -> None:
    """Insert held rows as multi-row INSERTs written by hand: a wide fan-out writes millions,
    and building them as peewee queries cost several times the database's own work. A
    watcher gets an event once (the unique index): a row already there stays."""
    db = database.obj
    columns = ", ".join(f'"{HeldEvent._meta.fields[name].column_name}"' for name in HELD_FIELDS)
    marks = "(" + ", ".join([db.param] * len(HELD_FIELDS)) + ")"
    verb, tail = ("INSERT OR IGNORE", "") if is_sqlite() else ("INSERT", " ON CONFLICT DO NOTHING")
    for chunk in pw.chunked(rows, HOLD_INSERT_ROWS):
        values = ", ".join([marks] * len(chunk))
        db.execute_sql(f'{verb} INTO "{HeldEvent._meta.table_name}" ({columns}) VALUES {values}{tail}',
                       [value for row in chunk for value in row])


def _hold(events: list[Event], now: datetime, engine: delivery.Timing) -> tuple[set[str], list[str]]:
    subscriptions = list(Subscription.select().where(Subscription.ended_at.is_null()))
    if not subscriptions:
        return set(), []
    sessions = {s.id: s for s in Session.select().where(Session.id.in_({e.session_id for e in events}))}
    holding = _Holding(now, engine)
    touched: set[str] = set()
    active_subs: dict[str, Subscription] = {}  # subscriptions with watched activity in the batch
    for event in events:
        session = sessions.get(event.session_id)
        if session is None:
            continue
        lines: dict[str, str] = {}
        per_watcher: dict[str, list[tuple[Subscription, str]]] = defaultdict(list)
        for subscription in subscriptions:
            if subscription.ended_at is not None or event.created_at < subscription.created_at:
                continue
            if not watches(subscription, event.session_id):
                continue
            if event.kind != "session_idle":
                active_subs.setdefault(subscription.id, subscription)
            kind = received_as(subscription, event)
            if kind is None:
                continue
            if kind not in lines:
                lines[kind] = event_line(event, session, kind)
            if matches_text(subscription.match, lines[kind]):
                per_watcher[subscription.watcher_id].append((subscription, kind))
        for watcher_id, matched in per_watcher.items():
            kind = "subagent_finished" if any(k == "subagent_finished" for _, k in matched) else event.kind
            _hold_one(event, kind, lines[kind], watcher_id, [s for s, k in matched if k == kind], holding)
            touched.add(watcher_id)
    holding.flush()  # event lines before the all_idle lines they lead to
    for subscription in active_subs.values():
        if subscription.ended_at is None and "all_idle" in (subscription.events or []):
            if _all_idle(subscription, holding):
                touched.add(subscription.watcher_id)
    holding.flush()
    return touched, holding.to_schedule()


def _hold_one(event: Event, kind: str, line: str, watcher_id: str, matched: list[Subscription], holding: _Holding) -> None:
    payload = event.payload or {}
    now = holding.now
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
        due_reason = holding.due(watcher_id, matched, kind)
    due, reason, subscription_id = due_reason
    holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                event_seq=event.seq, turn_id=turn_id)
    _fire_once(matched, now)


def _fire_once(matched: list[Subscription], now: datetime) -> None:
    for subscription in matched:
        if subscription.once and subscription.ended_at is None:
            end(subscription, "fired", now)


def _all_idle(subscription: Subscription, holding: _Holding) -> bool:
    """One `all_idle` per transition to idle of all the subscription's sessions."""
    watched = holding.watched(subscription)
    if holding.busy(watched):
        if subscription.idle:
            Subscription.update(idle=False).where(Subscription.id == subscription.id).execute()
            subscription.idle = False
        return False
    count = len(watched)
    line = (
        f"[relay event] all_idle: no turn or task is running in the {count} watched "
        f"session{'s' if count != 1 else ''} (subscription {subscription.id})"
    )
    due, reason, _ = holding.due(subscription.watcher_id, [subscription], "all_idle")
    holding.add(subscription.watcher_id, due, reason, subscription_id=subscription.id, kind="all_idle", line=line)
    Subscription.update(idle=True).where(Subscription.id == subscription.id).execute()
    _fire_once([subscription], holding.now)
    return True


def _pending(watcher_id: str) -> list[delivery.Held]:
    rows = HeldEvent.select().where(
        (HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
    )
    return [delivery.Held(row.id, row.due_at, row.reason, row.urgent) for row in rows.order_by(HeldEvent.id)]


def _undelivered(watcher_id: str) -> pw.Expression:
    return (HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712


# The per-watcher look-ups an ingestion makes for every watcher it touches, as plain SQL:
# with hundreds of watchers, building them as peewee queries costs more than running them.
# `?` stands for the driver's parameter mark. Each is an index seek (see HeldEvent's indexes).
_FIRST_DUE_SQL = (
    'SELECT "due_at" FROM "held_event" WHERE "watcher_id" = ? AND "delivered_at" IS NULL AND "dropped" = ? '
    'ORDER BY "due_at" LIMIT 1'
)
_SLOT_SQL = (
    'SELECT "due_at" FROM "held_event" WHERE "watcher_id" = ? AND "reason" = ? AND "due_at" > ? '
    'AND "delivered_at" IS NULL AND "dropped" = ? ORDER BY "due_at" LIMIT 1'
)
_WAKEUPS_SQL = 'SELECT COUNT(*) FROM "wakeup" WHERE "watcher_id" = ? AND "delivered_at" > ?'


def _scalar(sql: str, params: list[Any]) -> Any:
    row = database.execute_sql(sql.replace("?", database.obj.param), params).fetchone()
    return None if row is None else row[0]


def _open_slots(watcher_id: str, now: datetime) -> list[delivery.Held]:
    """The watcher's open window and cap digest (the earliest of each after `now`)."""
    slots = []
    for reason in (delivery.WINDOW, delivery.CAP):
        due = _scalar(_SLOT_SQL, [watcher_id, reason, now, False])
        if due is not None:
            slots.append(delivery.Held(0, HeldEvent.due_at.python_value(due), reason))
    return slots


def _wakeups(watcher_id: str, now: datetime, engine: delivery.Timing) -> int:
    return int(_scalar(_WAKEUPS_SQL, [watcher_id, now - timedelta(seconds=engine.hour_seconds)]) or 0)


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
    """Enqueue the delivery job of the watcher's next due time.

    One job per due time (`workers.delivery.deliver_due`) delivers to every watcher due by
    then, one after the other: the watchers whose windows one batch of events opened share a
    due time, and a job each would only queue up for the database's write lock (on SQLite,
    hundreds of writers polling for it starve the relay's other writes).
    """
    due = _next_due(watcher_id)
    if due is not None:
        enqueue_due(runtime, due)


def enqueue_due(runtime: Runtime, due: datetime, suffix: str = "") -> None:
    stamp = ceil(due.replace(tzinfo=UTC).timestamp() * 1000)  # never before `due`
    job_id = keys.delivery_job_id(stamp, suffix)
    try:
        if due <= utcnow():
            runtime.queue.enqueue(jobs.DELIVER_DUE, stamp, job_id=job_id, result_ttl=0, failure_ttl=86_400)
        else:
            runtime.queue.enqueue_at(due.replace(tzinfo=UTC), jobs.DELIVER_DUE, stamp, job_id=job_id,
                                     result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("delivery at %s not enqueued (the sweeper will deliver): %s", iso(due), error)


def run_due_job(runtime: Runtime, stamp: int, now_reader: Any) -> int:
    """The RQ job of one due time: deliver to every watcher due by then; when started early
    (RQ's scheduler may), wait a little or enqueue again."""
    import time

    due = datetime.fromtimestamp(stamp / 1000, UTC).replace(tzinfo=None)
    early = (due - now_reader()).total_seconds()
    if early > EARLY_WAIT_SECONDS:
        enqueue_due(runtime, due, suffix="-again")
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
    import secrets

    if not runtime.settings()["agent_sessions_enabled"]:
        return 0
    lock = keys.delivery_lock(runtime.config.namespace)
    lease = max(1, int(runtime.time("DELIVERY_LOCK_SECONDS")))
    delivered = 0
    while True:
        token = secrets.token_hex(8)
        try:
            if not runtime.redis.set(lock, token, nx=True, ex=lease):
                return delivered
        except redis.RedisError:
            token = ""
        made_in_round = 0
        try:
            while made := _deliver_pass(runtime, now_reader(), lag_seconds, lock if token else "", token, lease):
                made_in_round += made
        finally:
            if token:
                _release(runtime, lock, token)
        delivered += made_in_round
        # A caller that found the lock taken just now left its watchers to this one (a round
        # that delivered nothing stops: what is left keeps failing, and the sweeper retries it).
        if not token or not made_in_round or not _overdue_watchers(now_reader() - timedelta(seconds=lag_seconds)):
            return delivered


def _deliver_pass(runtime: Runtime, now: datetime, lag_seconds: float, lock: str, token: str, lease: int) -> int:
    made = 0
    for watcher_id in _overdue_watchers(now - timedelta(seconds=lag_seconds)):
        try:
            if deliver(runtime, watcher_id, now) == "delivered":
                made += 1
        except Exception:  # one broken watcher must not stop the others
            log.exception("delivery to %s failed; trying again at the next sweep", watcher_id)
        if lock:
            _renew(runtime, lock, token, lease)
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


def _renew(runtime: Runtime, lock: str, token: str, lease: int) -> None:
    try:
        if runtime.redis.get(lock) == token.encode():
            runtime.redis.expire(lock, lease)
    except redis.RedisError:
        pass


def _release(runtime: Runtime, lock: str, token: str) -> None:
    try:
        if runtime.redis.get(lock) == token.encode():
            runtime.redis.delete(lock)
    except redis.RedisError:
        pass


def _next_due(watcher_id: str) -> datetime | None:
    due = _scalar(_FIRST_DUE_SQL, [watcher_id, False])
    return None if due is None else HeldEvent.due_at.python_value(due)


def run_job(runtime: Runtime, watcher_id: str, now_reader: Any) -> str:
    """One watcher's delivery job, as earlier versions enqueued it: deliver what is due; when
    started early, wait a little or leave it to the job of its due time."""
    import time

    due = _next_due(watcher_id)
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
        for row in HeldEvent.select(
            HeldEvent.id, HeldEvent.due_at, HeldEvent.reason, HeldEvent.urgent, HeldEvent.subscription_id, HeldEvent.line
        ).where(_undelivered(watcher_id)).namedtuples()
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
            claimed = _claim_held([r.id for r in chosen], now, message.id)
            if claimed != len(chosen):
                raise _Lost
            # The hourly cap counts wake-ups; older records are of no more use.
            Wakeup.create(watcher=watcher_id, message_id=message.id, delivered_at=now)
            Wakeup.delete().where(
                (Wakeup.watcher == watcher_id) & (Wakeup.delivered_at < now - timedelta(seconds=2 * timing(runtime).hour_seconds))
            ).execute()
            digested = {r.subscription_id for r in chosen if r.reason == delivery.DIGEST}
            if digested:
                Subscription.update(last_digest_at=now).where(Subscription.id.in_(digested)).execute()
    except _Lost:
        return "lost"
    turns.start_turns(runtime, watcher_id)
    schedule_next(runtime, watcher_id)
    return "delivered"


def _claim_held(row_ids: list[int], now: datetime, message_id: str) -> int:
    """Mark held rows delivered by `message_id` unless delivered or dropped already; returns
    how many (plain SQL for the same reason as `_insert_held`)."""
    db = database.obj
    claimed = 0
    for chunk in pw.chunked(row_ids, CLAIM_CHUNK):
        marks = ", ".join([db.param] * len(chunk))
        sql = (f'UPDATE "held_event" SET "delivered_at" = {db.param}, "message_id" = {db.param} '
               f'WHERE "id" IN ({marks}) AND "delivered_at" IS NULL AND "dropped" = {db.param}')
        claimed += db.execute_sql(sql, [now, message_id, *chunk, False]).rowcount
    return claimed


def _message_text(rows: list[Any]) -> str:
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
    """The clock's part: record stalls, ingest what no job ingested, make due heartbeats,
    deliver whatever is overdue."""
    outcome = {"ingested": 0, "delivered": 0, "stalled": 0, "heartbeats": 0}
    # Stalls are recorded and held like other events while agent sessions are off.
    outcome["stalled"] = record_stalls(runtime, now)
    # A backlog is the workers' ingest jobs' to work through; the clock goes on with its other
    # duties after about one period of it.
    outcome["ingested"] = ingest_pending(runtime, lambda: now, runtime.time("RECONCILE_SECONDS"))
    if not runtime.settings()["agent_sessions_enabled"]:
        return outcome
    outcome["heartbeats"] = make_heartbeats(runtime, now)
    # What the delivery jobs did not deliver within a period of its due time (a lost job, a
    # flushed Redis, downtime); on time, the jobs deliver it, and the two would only collide.
    outcome["delivered"] = deliver_overdue(runtime, lambda: now, runtime.time("RECONCILE_SECONDS"))
    return outcome


# Stalls and heartbeats: the engine's own events -------------------------------------------------


def record_stalls(runtime: Runtime, now: datetime) -> int:
    """`stalled` events (SPEC §8.2): a running turn or task without output for a watching
    subscription's `stalled_minutes`, once per value and quiet spell; returns how many.

    The sweeper looks at every running turn and task: a turn's output is its reply text and
    activity lines (their size changes while it produces any), a task's is its output file.
    A turn waiting for an answer is not stalled: it waits for a person, and its
    `question_asked` went out already.
    """
    wanting = [s for s in Subscription.select().where(Subscription.ended_at.is_null()) if "stalled" in (s.events or [])]
    if not wanting:
        return 0
    size = fn.LENGTH(fn.COALESCE(Message.partial_text, "")) + fn.LENGTH(fn.COALESCE(Message.activities, ""))
    turns_running = list(
        Message.select(Message.id, Message.session, Message.text, Message.started_at, size.alias("size"))
        .where(Message.status == "running")
    )
    tasks_running = list(Task.select().where(Task.status == "running"))
    watched = {row.subject: row for row in StallWatch.select()}
    minute = timing(runtime).minute_seconds
    recorded = 0
    for subject, session_id, observed, payload, started_at in [
        *((t.id, t.session_id, int(t.size or 0), {"turnId": t.id, "prompt": _excerpt(t.text), "status": "running"},
           t.started_at or now) for t in turns_running),
        *((t.id, t.session_id, None, {"taskId": t.id, "description": t.description, "type": t.type},
           t.started_at) for t in tasks_running),
    ]:
        row = watched.get(subject)
        if observed is None:  # a task: its output file says when it last wrote
            task = next(t for t in tasks_running if t.id == subject)
            since = max(started_at, task.last_output_at or started_at, last_output_time(task))
        else:
            since = delivery.quiet_since(row.size if row else None, row.quiet_since if row else None, observed,
                                         started_at, now)
        reported = list(row.reported or []) if row is not None and row.quiet_since == since else []
        thresholds = [s.stalled_minutes for s in wanting if watches(s, session_id) and s.created_at <= now]
        due = delivery.stalls_due(since, thresholds, reported, now, minute)
        if row is not None and row.quiet_since == since and row.size == observed and not due:
            continue
        try:
            with write_transaction():
                StallWatch.insert(
                    subject=subject, session_id=session_id, size=observed, quiet_since=since, reported=reported + due
                ).on_conflict(
                    conflict_target=[StallWatch.subject],
                    update={StallWatch.size: observed, StallWatch.quiet_since: since,
                            StallWatch.reported: reported + due},
                ).execute()
                for minutes in due:
                    record_event(session_id, "stalled",
                                 {**payload, "stalledMinutes": minutes, "quietSince": iso(since)}, now)
        except pw.IntegrityError:
            continue  # another sweeper wrote it first
        recorded += len(due)
    gone = [subject for subject in watched if subject not in {t.id for t in turns_running} | {t.id for t in tasks_running}]
    if gone:
        StallWatch.delete().where(StallWatch.subject.in_(gone)).execute()
    if recorded:
        jobs.poke_delivery(runtime)
    return recorded


# Sessions named in a heartbeat line, at most (at work, and idle ones when that few).
HEARTBEAT_NAMED = 10


def make_heartbeats(runtime: Runtime, now: datetime) -> int:
    """Heartbeats that are due (SPEC §8.2): every `heartbeat_minutes` on the grid from the
    subscription's creation, one line of the watched sessions' state, held for the watcher
    like any other non-urgent event. None inside quiet hours; a relay that was down sends
    one for all it missed. Returns how many were made."""
    engine = timing(runtime)
    due = list(Subscription.select().where(
        Subscription.ended_at.is_null() & Subscription.heartbeat_minutes.is_null(False)
        & (Subscription.heartbeat_due_at.is_null() | (Subscription.heartbeat_due_at <= now))
    ))
    holding = _Holding(now, engine)
    made = 0
    for subscription in due:
        quiet = quiet_of(subscription)
        every = subscription.heartbeat_minutes * engine.minute_seconds
        with write_transaction():
            current = subscription.heartbeat_due_at
            if current is None:  # the first look: the grid starts at the subscription's creation
                current = delivery.heartbeat_after(subscription.created_at, every, subscription.created_at, quiet)
            following = delivery.heartbeat_after(subscription.created_at, every, max(now, current), quiet)
            if current > now:
                following = current
            # The claim: only one sweeper moves the due time on, and makes the heartbeat.
            match_current = (
                Subscription.heartbeat_due_at.is_null() if subscription.heartbeat_due_at is None
                else Subscription.heartbeat_due_at == subscription.heartbeat_due_at
            )
            claimed = (
                Subscription.update(heartbeat_due_at=following)
                .where((Subscription.id == subscription.id) & Subscription.ended_at.is_null() & match_current)
                .execute()
            )
            if not claimed or not delivery.heartbeat_wanted(current, now, quiet):
                continue
            line = heartbeat_line(subscription, holding)
            when, reason, _ = holding.due(subscription.watcher_id, [subscription], "heartbeat")
            holding.add(subscription.watcher_id, when, reason, subscription_id=subscription.id, kind="heartbeat",
                        line=line)
            holding.flush()
            _fire_once([subscription], now)
        schedule_next(runtime, subscription.watcher_id)
        made += 1
    return made


def heartbeat_line(subscription: Subscription, holding: _Holding) -> str:
    """`[relay event] heartbeat: 1 of 3 watched sessions at work — session "Build" (3f9c…)
    running; idle: "Review" (a12b…), "Docs" (77aa…) (subscription sub_…)`."""
    watched = holding.watched(subscription)
    turns_open, tasks = holding.turn_states(), holding.tasks_running()
    states = {sid: turns_open.get(sid) or ("background_only" if sid in tasks else "idle") for sid in watched}
    at_work = [sid for sid in watched if states[sid] != "idle"]
    idle = [sid for sid in watched if states[sid] == "idle"]
    named = at_work[:HEARTBEAT_NAMED] + (idle if len(idle) <= HEARTBEAT_NAMED else [])
    titles = dict(Session.select(Session.id, Session.title).where(Session.id.in_(named)).tuples()) if named else {}

    def name(sid: str) -> str:
        return f'"{titles.get(sid, "?")}" ({sid[:4]}…)'

    count = len(watched)
    text = f"[relay event] heartbeat: {len(at_work)} of {count} watched session{'s' if count != 1 else ''} at work"
    if at_work:
        text += " — " + ", ".join(f"{name(sid)} {states[sid]}" for sid in at_work[:HEARTBEAT_NAMED])
        if len(at_work) > HEARTBEAT_NAMED:
            text += f", and {len(at_work) - HEARTBEAT_NAMED} more"
    if idle:
        text += "; idle: " + (", ".join(name(sid) for sid in idle) if len(idle) <= HEARTBEAT_NAMED else f"{len(idle)} sessions")
    return f"{text} (subscription {subscription.id})"


# Lifetime and views ----------------------------------------------------------------------------------


def end(subscription: Subscription, reason: str, now: datetime) -> bool:
    changed = (
        Subscription.update(ended_at=now, end_reason=reason)
        .where((Subscription.id == subscription.id) & Subscription.ended_at.is_null())
        .execute()
    )
    subscription.ended_at, subscription.end_reason = now, reason
    return bool(changed)


def transfer(subscription: Subscription, watcher: Session, now: datetime) -> Subscription | None:
    """Move a subscription to another watcher (inside a transaction): the original ends
    `transferred` and delivers what it already holds; the copy watches from now on. A
    conversation never watches itself, so the new watcher leaves its own session out."""
    named = [s for s in subscription.sessions or [] if s != watcher.id]
    end(subscription, "transferred", now)
    if subscription.scope == "sessions" and not named:
        return None
    fields = {
        name: getattr(subscription, name)
        for name in ("scope", "exclude", "events", "once", "match", "stalled_minutes", "heartbeat_minutes",
                     "digest_minutes", "quiet_hours", "hops")
    }
    copy = Subscription.create(id=new_id(), watcher=watcher.id, sessions=named, created_at=now, **fields)
    copy.idle = not busy(watched_ids(copy))
    copy.save()
    return copy


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
