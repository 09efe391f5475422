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
                found.steps.append(PartStarted(subscription.watcher_id, part))
            self.waiting = still
        for subscription_id in out:
            if subscription_id in self.started:
                self.skipped.setdefault(subscription_id, set()).add(index)
        if own is not None and (owner := self.by_watcher.get(own)) is not None and event.session_id != own:
            if event.created_at >= owner.created_at:
                found.steps.append(EventOnItsOwn(event, kind, line, own, [owner]))

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


# The steps of a batch, in event order: what `oar.watching.holding.hold` does, one after the other.


@dataclass(frozen=True)
class PartStarted:
    """A watcher's part first appears: its due time is decided here, for the events it gathers."""

    watcher_id: str
    part: Part


@dataclass(frozen=True)
class OnceEnded:
    """A `once` subscription received its event in a part: it ends here, and sees nothing after."""

    subscription: Subscription


@dataclass(frozen=True)
class EventOnItsOwn:
    """An event a watcher receives outside a part, decided by `holding._hold_one`: an urgent one,
    the watcher's own prompt, or one that several of its subscriptions match (`matched`, those
    under `kind`)."""

    event: Event
    kind: str
    line: str
    watcher_id: str
    matched: list[Subscription]


Step = PartStarted | OnceEnded | EventOnItsOwn


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
    matcher = _Matcher(found, seeing, _groups(subscriptions, seeing))
    for event in events:
        matcher.event(event)
    matcher.note_lines()
    return found


@dataclass
class _Group:
    """Subscriptions alike in their filters (`_filters`): `first` decides for all of them; its
    plain members are matched together (`shared`), the others (`alone`) one by one."""

    first: Subscription
    shared: _Shared | None
    alone: list[Subscription]


def _groups(subscriptions: list[Subscription], seeing: visibility.Watchers) -> list[_Group]:
    alike: dict[tuple[Any, ...], list[Subscription]] = defaultdict(list)
    for subscription in subscriptions:
        alike[_filters(subscription)].append(subscription)
    per_watcher_count = Counter(s.watcher_id for s in subscriptions)
    found = []
    for group in alike.values():
        first = group[0]
        # What a watcher sees is its own: under a narrower visibility no two watchers decide alike.
        plain = not first.once and seeing.everything
        members = [s for s in group if plain and per_watcher_count[s.watcher_id] == 1]
        taken = {s.id for s in members}
        found.append(_Group(first, _Shared(members) if members else None, [s for s in group if s.id not in taken]))
    return found


class _Lines:
    """An event's line under each kind it is received as, written once per kind."""

    def __init__(self, event: Event, title: str) -> None:
        self.event = event
        self.title = title
        self.by_kind: dict[str, str] = {}

    def __getitem__(self, kind: str) -> str:
        if kind not in self.by_kind:
            session = Session(id=self.event.session_id, title=self.title)
            self.by_kind[kind] = event_lines.event_line(self.event, session, kind)
        return self.by_kind[kind]


class _Matcher:
    """`match`'s work over the batch's events, one at a time: the steps, in event order, and
    what they gather (the parts of the watchers matched one by one, the `once` ones ended)."""

    def __init__(self, found: Match, seeing: visibility.Watchers, groups: list[_Group]) -> None:
        self.found = found
        self.seeing = seeing
        self.groups = groups
        self.parts: dict[tuple[str, str], Part] = {}
        self.fired: set[str] = set()  # `once` subscriptions this batch ends (they see nothing after)

    def event(self, event: Event) -> None:
        if event.session_id not in self.found.titles:
            return
        payload = event.payload or {}
        if not delivery.wakes_watchers(event.kind, payload.get("startedBy")):
            return  # nor is it activity for all_idle: that would wake the watchers all the same
        own = payload.get("fromSession") if event.kind == "turn_end" and payload.get("turnId") else None
        lines = _Lines(event, self.found.titles[event.session_id])
        per_watcher: dict[str, list[tuple[Subscription, str]]] = {}
        for group in self.groups:
            self._group_receives(group, event, lines, own, per_watcher)
        for watcher_id, matched in per_watcher.items():
            self._watcher_receives(event, lines, own, watcher_id, matched)

    def _group_receives(self, group: _Group, event: Event, lines: _Lines, own: str | None,
                        per_watcher: dict[str, list[tuple[Subscription, str]]]) -> None:
        """`event` for one group: into its shared parts, and into `per_watcher` for the others."""
        first, shared = group.first, group.shared
        if not _in_scope(first, event.session_id):
            return  # the same for the whole group (its watchers' own sessions are left out below)
        idle_too = "all_idle" in (first.events or []) and event.kind != "session_idle"
        kind = subscription_rules.received_as(first, event)
        if kind is not None and not subscription_rules.matches_text(first.match, lines[kind]):
            kind = None
        if kind is None and not idle_too:
            return
        one_by_one = group.alone
        if shared is not None and kind is not None and kind in delivery.URGENT_KINDS:
            one_by_one = [*shared.members, *group.alone]  # each an own row: one by one, as the others
        elif shared is not None:
            if idle_too:
                shared.mark_active(self.found, event)
            if kind is not None:
                shared.add(self.found, event, kind, lines[kind], own)
        for subscription in one_by_one:
            if not self._sees(subscription, event):
                continue
            if idle_too:
                self.found.active.setdefault(subscription.id, subscription)
            if kind is not None:
                per_watcher.setdefault(subscription.watcher_id, []).append((subscription, kind))

    def _sees(self, subscription: Subscription, event: Event) -> bool:
        """Whether a subscription matched on its own receives `event` at all."""
        if (subscription.id in self.fired or event.created_at < subscription.created_at
                or event.session_id == subscription.watcher_id):
            return False  # a conversation's own session is never watched
        # nor one its watcher does not see
        return self.seeing.everything or self.seeing.sees(subscription.watcher_id, event.session_id)

    def _watcher_receives(self, event: Event, lines: _Lines, own: str | None, watcher_id: str,
                          matched: list[tuple[Subscription, str]]) -> None:
        """`event` for a watcher its subscriptions matched one by one: into a part, or on its own."""
        if len(matched) == 1 and watcher_id != own and matched[0][1] not in delivery.URGENT_KINDS:
            # The common case, without the lists: one subscription, a bundled event.
            subscription, kind = matched[0]
            if (part := self.parts.get((watcher_id, subscription.id))) is None:
                part = self.parts[(watcher_id, subscription.id)] = Part(subscription, kind)
                self.found.steps.append(PartStarted(watcher_id, part))
            part.add(event, kind, lines[kind])
            if subscription.once:
                self.fired.add(subscription.id)
                self.found.steps.append(OnceEnded(subscription))
            return
        kind = "subagent_finished" if any(k == "subagent_finished" for _, k in matched) else event.kind
        chosen = [s for s, k in matched if k == kind]
        self.fired.update(s.id for s in chosen if s.once)
        self.found.steps.append(EventOnItsOwn(event, kind, lines[kind], watcher_id, chosen))

    def note_lines(self) -> None:
        """Every line of a part of more than one event, into `Match.lines` (parts of one
        group share their list of events: noted once)."""
        every = list(self.parts.values())
        for group in self.groups:
            if group.shared is not None:
                every.extend(group.shared.parts())
        done: set[int] = set()
        for part in every:
            if len(part.events) > 1 and id(part.events) not in done:
                done.add(id(part.events))
                self.found.lines.update(((event.seq, kind), line) for event, kind, line in part.events)


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
