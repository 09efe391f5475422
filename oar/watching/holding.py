"""Holding events: the held rows one batch of events makes, one per watcher it concerns, each
with the due time the delivery rules give it (`oar.watching.delivery`); and `all_idle`, held
when every session a subscription watches has gone idle."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from oar.core.models import Event, Message, ReplyReceipt, Session, Subscription, Task
from oar.core.statuses import OPEN_TURN, TaskStatus, TurnStatus
from oar.watching import delivery, event_lines, held, lifetime, subscription_rules


class Holding:
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
            self.slots[watcher_id] = held.open_slots(watcher_id, self.now)
            self.wakeups[watcher_id] = held.wakeups(watcher_id, self.now, self.engine)
        rules = []
        for subscription in matched:
            if subscription.id not in self.rules:
                self.rules[subscription.id] = subscription_rules.rules_of(subscription)
            rules.append(self.rules[subscription.id])
        return delivery.due_for(rules, kind, self.now, self.slots[watcher_id], self.wakeups[watcher_id], self.engine)

    def add(self, watcher_id: str, due: datetime, reason: str, *, subscription_id: str, kind: str, line: str,
            event_seq: int | None = None, turn_id: str | None = None) -> None:
        self.rows.append(
            (watcher_id, event_seq, subscription_id, kind, line, kind in delivery.URGENT_KINDS, reason, turn_id, due,
             self.now, False)
        )
        if watcher_id not in self.before:
            self.before[watcher_id] = held.next_due(watcher_id)
        if watcher_id not in self.earliest or due < self.earliest[watcher_id]:
            self.earliest[watcher_id] = due
        if reason in (delivery.WINDOW, delivery.CAP):
            slots = self.slots.get(watcher_id, [])
            self.slots[watcher_id] = delivery.open_slots([*slots, delivery.Held(0, due, reason)], self.now)

    def flush(self) -> None:
        """Write the rows, one watcher's together (in the order they came): a delivery then
        updates a few pages of the table instead of one page per row."""
        if self.rows:
            held.insert(sorted(self.rows, key=lambda row: row[0]))
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
            rank: dict[str, int] = {TurnStatus.QUEUED: 0, TurnStatus.WAITING_FOR_ANSWER: 1, TurnStatus.RUNNING: 2}
            for turn in Message.select(Message.session, Message.status).where(Message.status.in_(OPEN_TURN)):
                status = turn.status or ""  # never empty: only open turns are selected
                if rank[status] > rank.get(self._turns.get(turn.session_id, ""), -1):
                    self._turns[turn.session_id] = status
        return self._turns

    def tasks_running(self) -> set[str]:
        if self._tasks is None:
            running = Task.select(Task.session).where(Task.status == TaskStatus.RUNNING).distinct()
            self._tasks = {task.session_id for task in running}
        return self._tasks

    def busy(self, session_ids: list[str]) -> bool:
        turns_open, tasks = self.turn_states(), self.tasks_running()
        return any(session_id in turns_open or session_id in tasks for session_id in session_ids)


def hold(events: list[Event], now: datetime, engine: delivery.Timing) -> tuple[set[str], list[str]]:
    subscriptions = list(Subscription.select().where(Subscription.ended_at.is_null()))
    if not subscriptions:
        return set(), []
    sessions = {s.id: s for s in Session.select().where(Session.id.in_({e.session_id for e in events}))}
    holding = Holding(now, engine)
    touched: set[str] = set()
    active_subs: dict[str, Subscription] = {}  # subscriptions with watched activity in the batch
    for event in events:
        session = sessions.get(event.session_id)
        if session is None:
            continue
        if not delivery.wakes_watchers(event.kind, (event.payload or {}).get("startedBy")):
            continue  # nor is it activity for all_idle: that would wake the watchers all the same
        lines: dict[str, str] = {}
        per_watcher: dict[str, list[tuple[Subscription, str]]] = defaultdict(list)
        for subscription in subscriptions:
            if subscription.ended_at is not None or event.created_at < subscription.created_at:
                continue
            if not subscription_rules.watches(subscription, event.session_id):
                continue
            if event.kind != "session_idle":
                active_subs.setdefault(subscription.id, subscription)
            kind = subscription_rules.received_as(subscription, event)
            if kind is None:
                continue
            if kind not in lines:
                lines[kind] = event_lines.event_line(event, session, kind)
            if subscription_rules.matches_text(subscription.match, lines[kind]):
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


def _hold_one(event: Event, kind: str, line: str, watcher_id: str, matched: list[Subscription], holding: Holding) -> None:
    payload = event.payload or {}
    now = holding.now
    turn_id = payload.get("turnId") if event.kind == "turn_end" else None
    due_reason: tuple[datetime, str, str] | None = None
    if turn_id and payload.get("fromSession") == watcher_id:
        receipt = ReplyReceipt.get_or_none(ReplyReceipt.turn_id == turn_id)
        if receipt is not None and receipt.received_at is not None:
            lifetime.fire_once(matched, now)  # its own waited-for prompt: ends `once`, not delivered
            return
        if receipt is not None and receipt.waiting_until is not None and receipt.waiting_until > now:
            due_reason = (receipt.waiting_until, delivery.OWN, matched[0].id)
    if due_reason is None:
        due_reason = holding.due(watcher_id, matched, kind)
    due, reason, subscription_id = due_reason
    holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                event_seq=event.seq, turn_id=turn_id)
    lifetime.fire_once(matched, now)


def _all_idle(subscription: Subscription, holding: Holding) -> bool:
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
    lifetime.fire_once([subscription], holding.now)
    return True
