"""Holding events: the held rows one batch of events makes, one per watcher it concerns, each
with the due time the delivery rules give it (`oar.watching.delivery`); and `all_idle`, held
when every session a subscription watches has gone idle."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from oar.core.models import Message, ReplyReceipt, Session, Subscription, Task
from oar.core.statuses import OPEN_TURN, TaskStatus, TurnStatus
from oar.sessions import visibility
from oar.watching import delivery, held, lifetime, matching, subscription_rules


class Holding:
    """What one ingestion (or sweep) knows while it holds events: per watcher, the open
    window and cap digest (`delivery.open_slots`) and the wake-ups of the last hour; which
    sessions are busy; and the held rows to write, inserted together.

    `visibility`: the owner's `sessions_visibility` the batch was matched under (read when
    needed if not given): a watcher's lines name and count only the sessions it sees."""

    def __init__(self, now: datetime, engine: delivery.Timing, visibility: str | None = None) -> None:
        self.now = now
        self.engine = engine
        self.visibility = visibility
        self._seen: dict[str, set[str]] = {}
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
        self._live_set: set[str] | None = None
        self._busy: set[str] | None = None

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
        seen = self._seen_by(subscription.watcher_id)
        if subscription.scope == "sessions":
            return [session_id for session_id in subscription.sessions or [] if seen is None or session_id in seen]
        left_out = {subscription.watcher_id, *(subscription.exclude or [])}
        return [
            session_id for session_id in self._live_sessions()
            if session_id not in left_out and (seen is None or session_id in seen)
        ]

    def _seen_by(self, watcher_id: str) -> set[str] | None:
        """The sessions the watcher sees (docs/rules.md#visibility); None: every session."""
        if self.visibility is None:
            self.visibility = visibility.relay_visibility()
        if self.visibility == visibility.EVERYTHING:
            return None
        if watcher_id not in self._seen:
            watcher = Session.get_or_none(Session.id == watcher_id)
            condition = visibility.View(watcher, self.visibility).where() if watcher is not None else None
            self._seen[watcher_id] = (
                {row.id for row in Session.select(Session.id).where(condition)} if condition is not None else set()
            )
        return self._seen[watcher_id]

    def _live_sessions(self) -> list[str]:
        if self._live is None:
            self._live = [row.id for row in Session.select(Session.id).where(
                Session.live(archived=False)
            )]
        return self._live

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

    def watched_count_and_busy(self, subscription: Subscription) -> tuple[int, bool]:
        """How many sessions the subscription watches, and whether one of them is at work.
        For `all`, from the few busy sessions rather than the whole list: the 200 watchers of
        everything would each scan every session in every batch."""
        if subscription.scope == "sessions" or self._seen_by(subscription.watcher_id) is not None:
            watched = self.watched(subscription)
            return len(watched), self.busy(watched)
        if self._live_set is None or self._busy is None:
            self._live_set = set(self._live_sessions())
            self._busy = (set(self.turn_states()) | self.tasks_running()) & self._live_set
        left_out = {subscription.watcher_id, *(subscription.exclude or [])} & self._live_set
        return len(self._live_set) - len(left_out), bool(self._busy - left_out)


def hold(batch: matching.Match, now: datetime, engine: delivery.Timing) -> tuple[set[str], list[str]]:
    """Hold a matched batch of events for every watcher it concerns (docs/events.md#how-events-are-held),
    inside the write transaction: the due times, own prompts, `once` ends and `all_idle` are
    decided here, in the order of the events, from what `matching.match` found.

    A watcher's events of the batch that share a due time, reason and subscription become
    one bundle row; events that need a row of their own (urgent ones, the watcher's own
    prompts) keep one each.
    """
    if not batch.subscriptions:
        return set(), []
    holding = Holding(now, engine, batch.visibility)
    touched: set[str] = set()
    bundles = Bundles(holding, batch.lines)
    for step in batch.steps:
        match step:
            case matching.PartStarted(watcher_id, part):
                bundles.add(watcher_id, bundles.due(watcher_id, [part.subscription], part.kind), part)
                touched.add(watcher_id)
            case matching.OnceEnded(subscription):
                lifetime.fire_once([subscription], holding.now)
            case matching.EventOnItsOwn():
                _hold_one(step, holding, bundles)
                touched.add(step.watcher_id)
    bundles.flush()
    holding.flush()  # event lines before the all_idle lines they lead to
    position = batch.events[-1].seq
    for subscription in batch.active.values():
        if subscription.ended_at is None and "all_idle" in (subscription.events or []):
            if _all_idle(subscription, holding, position):
                touched.add(subscription.watcher_id)
    holding.flush()
    return touched, holding.to_schedule()


class Bundles:
    """A batch's events per watcher, due time, reason and subscription: one held row each
    (docs/events.md#how-events-are-held). The due time of a watcher's non-urgent event is the
    same for every event of a batch that the same subscriptions match (a window or cap digest
    opened in the batch closes at now + its length, whichever event opened it), so it is
    decided once per watcher and set of subscriptions. Most bundles are one `matching.Part`
    (its runs worked out before the write lock); the few made of several are merged here."""

    def __init__(self, holding: Holding, lines: dict[tuple[int, str], str]) -> None:
        self.holding = holding
        self.lines = lines
        self.dues: dict[tuple[str, str | tuple[str, ...]], tuple[datetime, str, str]] = {}
        self.parts: dict[tuple[str, datetime, str, str], list[matching.Part]] = {}

    def due(self, watcher_id: str, matched: list[Subscription], kind: str) -> tuple[datetime, str, str]:
        key = (watcher_id, matched[0].id if len(matched) == 1 else tuple(s.id for s in matched))
        if key not in self.dues:
            self.dues[key] = self.holding.due(watcher_id, matched, kind)
        return self.dues[key]

    def add(self, watcher_id: str, due_reason: tuple[datetime, str, str], part: matching.Part) -> None:
        due, reason, subscription_id = due_reason
        self.parts.setdefault((watcher_id, due, reason, subscription_id), []).append(part)

    def flush(self) -> None:
        lines = dict(self.lines)
        for (watcher_id, due, reason, subscription_id), parts in self.parts.items():
            if len(parts) == 1:
                [part] = parts
            else:
                # Parts with one due time: their events in event order (an event is in one
                # part of a watcher's at most).
                part = matching.Part(parts[0].subscription, parts[0].kind)
                for event, kind, line in sorted((e for p in parts for e in p.events), key=lambda e: e[0].seq):
                    part.add(event, kind, line)
                if len(part.events) > 1:
                    lines.update(((event.seq, kind), line) for event, kind, line in part.events)
            if len(part.events) == 1:
                [(event, kind, line)] = part.events
                turn_id = (event.payload or {}).get("turnId") if event.kind == "turn_end" else None
                self.holding.add(watcher_id, due, reason, subscription_id=subscription_id, kind=kind, line=line,
                                 event_seq=event.seq, turn_id=turn_id)
                continue
            kinds = part.kinds()
            self.holding.add(watcher_id, due, reason, subscription_id=subscription_id,
                             kind=next(iter(kinds)) if len(kinds) == 1 else "events", line=None,
                             event_seq=part.events[0][0].seq, count=len(part.events), seqs=part.runs)
        held.insert_lines([(seq, kind, line) for (seq, kind), line in lines.items()])
        self.parts = {}


def _hold_one(step: matching.EventOnItsOwn, holding: Holding, bundles: Bundles) -> None:
    event, kind, line, watcher_id, matched = step.event, step.kind, step.line, step.watcher_id, step.matched
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
        part = matching.Part(matched[0], kind)
        part.add(event, kind, line)
        bundles.add(watcher_id, bundles.due(watcher_id, matched, kind), part)
    lifetime.fire_once(matched, now)


def _all_idle(subscription: Subscription, holding: Holding, position: int) -> bool:
    """One `all_idle` per transition to idle of all the subscription's sessions."""
    count, busy = holding.watched_count_and_busy(subscription)
    if busy:
        if subscription.idle:
            Subscription.update(idle=False).where(Subscription.id == subscription.id).execute()
            subscription.idle = False
        return False
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
