"""Matching a batch of events to the subscriptions (docs/events.md#how-events-are-held): which
watchers each event concerns, under which name and line, and the events of each watcher's
bundles, decided before the write lock is taken (docs/decisions.md#fan-out-held-bundles-instead-of-one-row-per-watcher-and-event).

Matching reads only the batch's events, the active subscriptions and the titles of the
batch's sessions; `Match.still_holds` checks, inside the write transaction, that those are
what they were, and `oar.watching.holding.hold` then makes the held rows from it.

A watcher receives events only of the sessions it sees (the owner's `sessions_visibility`,
docs/rules.md#visibility): under any setting but `all`, each subscription is matched on its
own against what its watcher sees, whatever its list says — `["all"]` is every session it sees.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from oar.core import peewee_internals
from oar.core.models import Event, Session, Subscription
from oar.sessions import visibility
from oar.watching import delivery, event_lines, subscription_rules


@dataclass
class Part:
    """A watcher's events of the batch that one subscription matches, bundled (the common case):
    the events with their kind and line, and their runs of event numbers ([first, last, kind])."""

    subscription: Subscription
    kind: str  # the kind of its first event: the one the due time is decided for
    events: list[tuple[Event, str, str]] = field(default_factory=list)
    runs: list[list[Any]] = field(default_factory=list)
    _kinds: frozenset[str] | None = None

    def add(self, event: Event, kind: str, line: str) -> None:
        self.events.append((event, kind, line))
        self._kinds = None
        _extend_runs(self.runs, event.seq, kind)

    def kinds(self) -> frozenset[str]:
        """The kinds of its events."""
        if self._kinds is None:
            self._kinds = frozenset(kind for _, kind, _ in self.events)
        return self._kinds


def _extend_runs(runs: list[list[Any]], seq: int, kind: str) -> None:
    if runs and runs[-1][1] == seq - 1 and runs[-1][2] == kind:
        runs[-1][1] = seq
    else:
        runs.append([seq, seq, kind])


class _Shared:
    """The parts of a group's plain watchers: subscriptions alike in their filters, each its
    watcher's only one, not `once` (docs/decisions.md#fan-out-matching-once-per-group-issue-14).
    Such a subscription's part is the group's events but the few it must leave out (its own
    session's, those from before it was made, its watcher's own prompts, which get a row of
    their own), so the events are kept once for the group, each part only noting where it
    starts and what it leaves out; `parts` then gives every part its events, the same list
    (and runs) for every part that left nothing out. Without this, a batch of 1,000 events
    for 200 watchers of `["all"]` was 200,000 steps of Python."""

    def __init__(self, members: list[Subscription]) -> None:
        self.members = members
        self.by_watcher = {s.watcher_id: s for s in members}
        self.newest = max(s.created_at for s in members)
        self.events: list[tuple[Event, str, str]] = []
        self.waiting = list(members)  # no part yet
        self.inactive = list(members)  # not yet in `Match.active`
        self.started: dict[str, tuple[Part, int]] = {}  # subscription id → its part, the index it starts at
        self.skipped: dict[str, set[int]] = {}

    def left_out(self, event: Event, own: str | None) -> set[str]:
        """The members that do not get `event` in their part."""
        out = set()
        if (mine := self.by_watcher.get(event.session_id)) is not None:
            out.add(mine.id)  # a conversation's own session is never watched
        if own is not None and (owner := self.by_watcher.get(own)) is not None:
            out.add(owner.id)
        if event.created_at < self.newest:
            out.update(s.id for s in self.members if event.created_at < s.created_at)
        return out

    def mark_active(self, found: Match, event: Event) -> None:
        """`event` is activity for `all_idle`: every member that watches it is active."""
        still = []
        for subscription in self.inactive:
            if event.created_at < subscription.created_at or event.session_id == subscription.watcher_id:
                still.append(subscription)
            else:
                found.active.setdefault(subscription.id, subscription)
        self.inactive = still

    def add(self, found: Match, event: Event, kind: str, line: str, own: str | None) -> None:
        """`event` as the group receives it under `kind`: into every member's part but those
        that leave it out; a watcher's own prompt becomes its own step, as `match` makes it."""
        out = self.left_out(event, own)
        index = len(self.events)
        self.events.append((event, kind, line))
        if self.waiting:
            still = []
            for subscription in self.waiting:
                if subscription.id in out:
                    still.append(subscription)
                    continue
                part = Part(subscription, kind)
                self.started[subscription.id] = (part, index)
                found.steps.append(("part", subscription.watcher_id, part))
            self.waiting = still
        for subscription_id in out:
            if subscription_id in self.started:
                self.skipped.setdefault(subscription_id, set()).add(index)
        if own is not None and (owner := self.by_watcher.get(own)) is not None and event.session_id != own:
            if event.created_at >= owner.created_at:
                found.steps.append(("one", event, kind, line, own, [owner]))

    def parts(self) -> list[Part]:
        """Every started part, with its events and runs (shared where they are the same)."""
        whole: dict[int, tuple[list[tuple[Event, str, str]], list[list[Any]], frozenset[str]]] = {}
        parts = []
        for subscription_id, (part, start) in self.started.items():
            skipped = self.skipped.get(subscription_id)
            if skipped:
                for index in range(start, len(self.events)):
                    if index not in skipped:
                        part.add(*self.events[index])
            else:
                if start not in whole:
                    events = self.events[start:]
                    runs: list[list[Any]] = []
                    for event, kind, _line in events:
                        _extend_runs(runs, event.seq, kind)
                    whole[start] = (events, runs, frozenset(kind for _, kind, _ in events))
                part.events, part.runs, part._kinds = whole[start]
            parts.append(part)
        return parts


# One step of the batch, in event order: ("part", watcher_id, part) where a part first appears
# (its due time is decided there), ("fire", subscription) where a `once` one ends, or ("one",
# event, kind, line, watcher_id, matched) for an event that `holding._hold_one` decides.
Step = tuple[Any, ...]


@dataclass
class Match:
    events: list[Event]
    subscriptions: list[Subscription]
    titles: dict[str, str]
    visibility: str = visibility.EVERYTHING
    steps: list[Step] = field(default_factory=list)
    # Every (seq, kind) → line of a part of more than one event (written once, `event_line`).
    lines: dict[tuple[int, str], str] = field(default_factory=dict)
    # Subscriptions with watched activity in the batch, for `all_idle`.
    active: dict[str, Subscription] = field(default_factory=dict)

    def still_holds(self) -> bool:
        """Inside the write transaction: the subscriptions and session titles matched against are
        the ones there now (else the batch is matched again)."""
        return (
            _subscriptions() == [peewee_internals.stored_values(s) for s in self.subscriptions] and _titles(self.events) == self.titles
            and visibility.relay_visibility() == self.visibility
        )


def _subscriptions_query() -> Any:
    return Subscription.select().where(Subscription.ended_at.is_null())


def _subscriptions() -> list[dict[str, Any]]:
    return [peewee_internals.stored_values(s) for s in _subscriptions_query()]


def _titles(events: list[Event]) -> dict[str, str]:
    ids = {e.session_id for e in events}
    return {row.id: row.title for row in Session.select(Session.id, Session.title).where(Session.id.in_(ids))}


def match(events: list[Event]) -> Match:
    """Match a batch: subscriptions with the same filters (scope, sessions, exclude, events,
    match, stalled_minutes) decide alike, so an event is matched once per such group, not
    once per subscription."""
    subscriptions = list(_subscriptions_query())
    found = Match(events, subscriptions, _titles(events), visibility.relay_visibility())
    if not subscriptions:
        return found
    seeing = visibility.Watchers.of(found.visibility, found.titles, {s.watcher_id for s in subscriptions})
    groups: dict[tuple[Any, ...], list[Subscription]] = defaultdict(list)
    for subscription in subscriptions:
        groups[_filters(subscription)].append(subscription)
    per_watcher_count = Counter(s.watcher_id for s in subscriptions)
    # Each group: its plain members, matched together (`_Shared`), and the others, one by one.
    plans: list[tuple[Subscription, _Shared | None, list[Subscription]]] = []
    for group in groups.values():
        first = group[0]
        # What a watcher sees is its own: under a narrower visibility no two watchers decide alike.
        plain = not first.once and seeing.everything
        members = [s for s in group if plain and per_watcher_count[s.watcher_id] == 1]
        taken = {s.id for s in members}
        plans.append((first, _Shared(members) if members else None, [s for s in group if s.id not in taken]))
    parts: dict[tuple[str, str], Part] = {}
    fired: set[str] = set()  # `once` subscriptions this batch ends (they see nothing after)
    for event in events:
        if event.session_id not in found.titles:
            continue
        title = found.titles[event.session_id]
        if not delivery.wakes_watchers(event.kind, (event.payload or {}).get("startedBy")):
            continue  # nor is it activity for all_idle: that would wake the watchers all the same
        payload = event.payload or {}
        own = payload.get("fromSession") if event.kind == "turn_end" and payload.get("turnId") else None
        lines: dict[str, str] = {}
        per_watcher: dict[str, list[tuple[Subscription, str]]] = {}
        for first, shared, group in plans:
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
            if shared is not None and kind is not None and kind in delivery.URGENT_KINDS:
                group = [*shared.members, *group]  # each an own row: one by one, as the others
            elif shared is not None:
                if idle_too:
                    shared.mark_active(found, event)
                if kind is not None:
                    shared.add(found, event, kind, lines[kind], own)
            for subscription in group:
                if (subscription.id in fired or event.created_at < subscription.created_at
                        or event.session_id == subscription.watcher_id):
                    continue  # a conversation's own session is never watched
                if not seeing.everything and not seeing.sees(subscription.watcher_id, event.session_id):
                    continue  # nor one its watcher does not see
                if idle_too:
                    found.active.setdefault(subscription.id, subscription)
                if kind is not None:
                    if (matched := per_watcher.get(subscription.watcher_id)) is None:
                        per_watcher[subscription.watcher_id] = [(subscription, kind)]
                    else:
                        matched.append((subscription, kind))
        if not per_watcher:
            continue
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
    every = list(parts.values())
    for _first, together, _group in plans:
        if together is not None:
            every.extend(together.parts())
    done: set[int] = set()  # parts of one group share their list of events
    for part in every:
        if len(part.events) > 1 and id(part.events) not in done:
            done.add(id(part.events))
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
