"""Holding events: the held rows one batch of events makes, one per watcher it concerns, each
with the due time the delivery rules give it (`oar.watching.delivery`); and `all_idle`, held
when every session a subscription watches has gone idle."""

from __future__ import annotations

import json
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

    def add(self, watcher_id: str, due: datetime, reason: str, *, subscription_id: str, kind: str, line: str | None,
            event_seq: int | None = None, turn_id: str | None = None, count: int = 1, seqs: list[list[Any]] | None = None,
            position: int | None = None) -> None:
        self.rows.append(
            (watcher_id, event_seq, subscription_id, kind, line, count, None if seqs is None else json.dumps(seqs),
             position, kind in delivery.URGENT_KINDS, reason, turn_id, due, self.now, False)
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
    """Hold a batch of events for every watcher they concern (docs/events.md#how-events-are-held).

    Subscriptions with the same filters (scope, sessions, exclude, events, match,
    stalled_minutes) decide alike, so an event is matched once per such group, not once per
    subscription. A watcher's events of the batch that share a due time, reason and
    subscription become one bundle row; events that need a row of their own (urgent ones,
    the watcher's own prompts) keep one each.
    """
    subscriptions = list(Subscription.select().where(Subscription.ended_at.is_null()))
    if not subscriptions:
        return set(), []
    sessions = {s.id: s for s in Session.select().where(Session.id.in_({e.session_id for e in events}))}
    holding = Holding(now, engine)
    groups: dict[tuple[Any, ...], list[Subscription]] = defaultdict(list)
    for subscription in subscriptions:
        groups[_filters(subscription)].append(subscription)
    touched: set[str] = set()
    active_subs: dict[str, Subscription] = {}  # subscriptions with watched activity in the batch
    bundles = Bundles(holding)
    for event in events:
        session = sessions.get(event.session_id)
        if session is None:
            continue
        if not delivery.wakes_watchers(event.kind, (event.payload or {}).get("startedBy")):
            continue  # nor is it activity for all_idle: that would wake the watchers all the same
        lines: dict[str, str] = {}
        per_watcher: dict[str, list[tuple[Subscription, str]]] = {}
        for group in groups.values():
            first = group[0]
            if not _in_scope(first, event.session_id):
                continue  # the same for the whole group (its watchers' own sessions are left out below)
            idle_too = "all_idle" in (first.events or []) and event.kind != "session_idle"
            kind = subscription_rules.received_as(first, event)
            if kind is not None and kind not in lines:
                lines[kind] = event_lines.event_line(event, session, kind)
            if kind is not None and not subscription_rules.matches_text(first.match, lines[kind]):
                kind = None
            if kind is None and not idle_too:
                continue
            for subscription in group:
                if (subscription.ended_at is not None or event.created_at < subscription.created_at
                        or event.session_id == subscription.watcher_id):
                    continue  # a conversation's own session is never watched
                if idle_too:
                    active_subs.setdefault(subscription.id, subscription)
                if kind is not None:
                    if (matched := per_watcher.get(subscription.watcher_id)) is None:
                        per_watcher[subscription.watcher_id] = [(subscription, kind)]
                    else:
                        matched.append((subscription, kind))
        if not per_watcher:
            continue
        payload = event.payload or {}
        own = payload.get("fromSession") if event.kind == "turn_end" and payload.get("turnId") else None
        for watcher_id, matched in per_watcher.items():
            if len(matched) == 1 and watcher_id != own and matched[0][1] not in delivery.URGENT_KINDS:
                # The common case, without the lists: one subscription, a bundled event.
                subscription, kind = matched[0]
                bundles.add(watcher_id, bundles.due(watcher_id, [subscription], kind), event, kind, lines[kind])
                if subscription.once:
                    lifetime.fire_once([subscription], holding.now)
            else:
                kind = "subagent_finished" if any(k == "subagent_finished" for _, k in matched) else event.kind
                _hold_one(event, kind, lines[kind], watcher_id, [s for s, k in matched if k == kind], holding, bundles)
        touched.update(per_watcher)
    bundles.flush()
    holding.flush()  # event lines before the all_idle lines they lead to
    position = events[-1].seq
    for subscription in active_subs.values():
        if subscription.ended_at is None and "all_idle" in (subscription.events or []):
            if _all_idle(subscription, holding, position):
                touched.add(subscription.watcher_id)
    holding.flush()
    return touched, holding.to_schedule()


def _in_scope(subscription: Subscription, session_id: str) -> bool:
    """`subscription_rules.watches` but for the watcher's own session, which differs within a group."""
    if subscription.scope == "all":
        return session_id not in (subscription.exclude or [])
    return session_id in (subscription.sessions or [])


def _filters(subscription: Subscription) -> tuple[Any, ...]:
    """What decides whether a subscription receives an event, and under which name, but the
    watcher: subscriptions alike in these decide alike (`once` ones each on their own, since
    one ends with its first event)."""
    return (
        subscription.scope, tuple(subscription.sessions or ()), tuple(subscription.exclude or ()),
        tuple(subscription.events or ()), subscription.match, subscription.stalled_minutes,
        subscription.id if subscription.once else None,
    )


class Bundles:
    """A batch's events per watcher, due time, reason and subscription: one held row each
    (docs/events.md#how-events-are-held). The due time of a watcher's non-urgent event is the
    same for every event of a batch that the same subscriptions match (a window or cap digest
    opened in the batch closes at now + its length, whichever event opened it), so it is
    decided once per watcher and set of subscriptions."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding
        self.dues: dict[tuple[str, str | tuple[str, ...]], tuple[datetime, str, str]] = {}
        self.events: dict[tuple[str, datetime, str, str], list[tuple[Event, str, str]]] = {}

    def due(self, watcher_id: str, matched: list[Subscription], kind: str) -> tuple[datetime, str, str]:
        key = (watcher_id, matched[0].id if len(matched) == 1 else tuple(s.id for s in matched))
        if key not in self.dues:
            self.dues[key] = self.holding.due(watcher_id, matched, kind)
        return self.dues[key]

    def add(self, watcher_id: str, due_reason: tuple[datetime, str, str], event: Event, kind: str, line: str) -> None:
        due, reason, subscription_id = due_reason
        self.events.setdefault((watcher_id, due, reason, subscription_id), []).append((event, kind, line))

    def flush(self) -> None:
        lines: dict[tuple[int, str], str] = {}
        for (watcher_id, due, reason, subscription_id), held_events in self.events.items():
            if len(held_events) == 1:
                [(event, kind, line)] = held_events
                turn_id = (event.payload or {}).get("turnId") if event.kind == "turn_end" else None
                self.holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                                 event_seq=event.seq, turn_id=turn_id)
                continue
            runs: list[list[Any]] = []
            for event, kind, line in held_events:
                lines[(event.seq, kind)] = line
                if runs and runs[-1][1] == event.seq - 1 and runs[-1][2] == kind:
                    runs[-1][1] = event.seq
                else:
                    runs.append([event.seq, event.seq, kind])
            kinds = {kind for _, kind, _ in held_events}
            self.holding.add(watcher_id, due, reason, subscription_id=subscription_id,
                             kind=kinds.pop() if len(kinds) == 1 else "events", line=None,
                             event_seq=held_events[0][0].seq, count=len(held_events), seqs=runs)
        held.insert_lines([(seq, kind, line) for (seq, kind), line in lines.items()])
        self.events = {}


def _hold_one(event: Event, kind: str, line: str, watcher_id: str, matched: list[Subscription], holding: Holding,
              bundles: Bundles) -> None:
    payload = event.payload or {}
    now = holding.now
    turn_id = payload.get("turnId") if event.kind == "turn_end" else None
    due_reason: tuple[datetime, str, str] | None = None
    if turn_id and payload.get("fromSession") == watcher_id:
        # Its own prompt: a row of its own, which the end of its wait finds by `turn_id`
        # (docs/events.md#own-prompts).
        receipt = ReplyReceipt.get_or_none(ReplyReceipt.turn_id == turn_id)
        if receipt is not None and receipt.received_at is not None:
            lifetime.fire_once(matched, now)  # its own waited-for prompt: ends `once`, not delivered
            return
        if receipt is not None and receipt.waiting_until is not None and receipt.waiting_until > now:
            due_reason = (receipt.waiting_until, delivery.OWN, matched[0].id)
        else:
            due_reason = holding.due(watcher_id, matched, kind)
        due, reason, subscription_id = due_reason
        holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                    event_seq=event.seq, turn_id=turn_id)
    elif kind in delivery.URGENT_KINDS:
        due, reason, subscription_id = holding.due(watcher_id, matched, kind)
        holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                    event_seq=event.seq, turn_id=turn_id)
    else:
        bundles.add(watcher_id, bundles.due(watcher_id, matched, kind), event, kind, line)
    lifetime.fire_once(matched, now)


def _all_idle(subscription: Subscription, holding: Holding, position: int) -> bool:
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
    holding.add(subscription.watcher_id, due, reason, subscription_id=subscription.id, kind="all_idle", line=line,
                position=position)
    Subscription.update(idle=True).where(Subscription.id == subscription.id).execute()
    lifetime.fire_once([subscription], holding.now)
    return True
