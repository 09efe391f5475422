"""Matching a batch of events to the subscriptions (docs/events.md#how-events-are-held): which
watchers each event concerns, under which name and line, and the events of each watcher's
bundles, decided before the write lock is taken (docs/decisions.md#fan-out-held-bundles-instead-of-one-row-per-watcher-and-event).

Matching reads only the batch's events, the active subscriptions and the titles of the
batch's sessions; `Match.still_holds` checks, inside the write transaction, that those are
what they were, and `oar.watching.holding.hold` then makes the held rows from it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from oar.core.models import Event, Session, Subscription
from oar.watching import delivery, event_lines, subscription_rules


@dataclass
class Part:
    """A watcher's events of the batch that one subscription matches, bundled (the common case):
    the events with their kind and line, and their runs of event numbers ([first, last, kind])."""

    subscription: Subscription
    kind: str  # the kind of its first event: the one the due time is decided for
    events: list[tuple[Event, str, str]] = field(default_factory=list)
    runs: list[list[Any]] = field(default_factory=list)

    def add(self, event: Event, kind: str, line: str) -> None:
        self.events.append((event, kind, line))
        if self.runs and self.runs[-1][1] == event.seq - 1 and self.runs[-1][2] == kind:
            self.runs[-1][1] = event.seq
        else:
            self.runs.append([event.seq, event.seq, kind])


# One step of the batch, in event order: ("part", watcher_id, part) where a part first appears
# (its due time is decided there), ("fire", subscription) where a `once` one ends, or ("one",
# event, kind, line, watcher_id, matched) for an event that `holding._hold_one` decides.
Step = tuple[Any, ...]


@dataclass
class Match:
    events: list[Event]
    subscriptions: list[Subscription]
    titles: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    # Every (seq, kind) → line of a part of more than one event (written once, `event_line`).
    lines: dict[tuple[int, str], str] = field(default_factory=dict)
    # Subscriptions with watched activity in the batch, for `all_idle`.
    active: dict[str, Subscription] = field(default_factory=dict)

    def still_holds(self) -> bool:
        """Inside the write transaction: the subscriptions and session titles matched against are
        the ones there now (else the batch is matched again)."""
        return _subscriptions() == [s.__data__ for s in self.subscriptions] and _titles(self.events) == self.titles


def _subscriptions_query() -> Any:
    return Subscription.select().where(Subscription.ended_at.is_null())


def _subscriptions() -> list[dict[str, Any]]:
    return [s.__data__ for s in _subscriptions_query()]


def _titles(events: list[Event]) -> dict[str, str]:
    ids = {e.session_id for e in events}
    return {row.id: row.title for row in Session.select(Session.id, Session.title).where(Session.id.in_(ids))}


def match(events: list[Event]) -> Match:
    """Match a batch: subscriptions with the same filters (scope, sessions, exclude, events,
    match, stalled_minutes) decide alike, so an event is matched once per such group, not
    once per subscription."""
    subscriptions = list(_subscriptions_query())
    found = Match(events, subscriptions, _titles(events))
    if not subscriptions:
        return found
    groups: dict[tuple[Any, ...], list[Subscription]] = defaultdict(list)
    for subscription in subscriptions:
        groups[_filters(subscription)].append(subscription)
    parts: dict[tuple[str, str], Part] = {}
    fired: set[str] = set()  # `once` subscriptions this batch ends (they see nothing after)
    for event in events:
        if event.session_id not in found.titles:
            continue
        title = found.titles[event.session_id]
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
                lines[kind] = event_lines.event_line(event, Session(id=event.session_id, title=title), kind)
            if kind is not None and not subscription_rules.matches_text(first.match, lines[kind]):
                kind = None
            if kind is None and not idle_too:
                continue
            for subscription in group:
                if (subscription.id in fired or event.created_at < subscription.created_at
                        or event.session_id == subscription.watcher_id):
                    continue  # a conversation's own session is never watched
                if idle_too:
                    found.active.setdefault(subscription.id, subscription)
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
                if (part := parts.get((watcher_id, subscription.id))) is None:
                    part = parts[(watcher_id, subscription.id)] = Part(subscription, kind)
                    found.steps.append(("part", watcher_id, part))
                part.add(event, kind, lines[kind])
                if subscription.once:
                    fired.add(subscription.id)
                    found.steps.append(("fire", subscription))
            else:
                kind = "subagent_finished" if any(k == "subagent_finished" for _, k in matched) else event.kind
                chosen = [s for s, k in matched if k == kind]
                fired.update(s.id for s in chosen if s.once)
                found.steps.append(("one", event, kind, lines[kind], watcher_id, chosen))
    for part in parts.values():
        if len(part.events) > 1:
            found.lines.update(((event.seq, kind), line) for event, kind, line in part.events)
    return found


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
