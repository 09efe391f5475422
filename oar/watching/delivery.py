"""What to deliver to a watcher, and when (docs/events.md#delivery): pure decisions.

Every function here is a function of the subscriptions, the held events and `now`; none
reads the clock or the database, so windows, the hourly cap, digests and quiet hours are
testable on named dates. `oar.watching.holding` stores the decisions (`HeldEvent.due_at`) and
`oar.watching.delivering` carries them out.

An event reaches a watcher at the earliest time one of its matching subscriptions lets it
through:
- urgent events (`question_asked`, `question_answered`, `error`) at once, taking along
  whatever the watcher's open 30 s window holds;
- otherwise when the watcher's window closes (the first event after a quiet period opens
  it), or — after 20 wake-ups in the sliding hour — with the 10-minute digest;
- a subscription's `digest_minutes` N holds it until max(created, previous digest) + N;
- a time inside the subscription's quiet hours moves to the window's end.

An event a watcher's reaction makes wakes no other watcher (`wakes_watchers`): the `turn_end`
of a turn that an event delivery started is held for nobody, so watchers of each other go
quiet after one round (docs/events.md#watchers-that-wake-each-other).

The engine's own events are decided here too: when a subscription's heartbeat is due (on
its grid, never inside quiet hours) and which of its `stalled_minutes` a quiet spell of a
running turn or task has crossed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import ceil, floor

from oar.watching.quiet_hours import QuietHours, release_time

URGENT_KINDS = frozenset({"question_asked", "question_answered", "error"})
DEFAULT_EVENTS = ("question_asked", "error", "turn_end", "subagent_finished", "task_failed", "stalled", "all_idle")
EVENT_KINDS = DEFAULT_EVENTS + ("question_answered", "task_started", "task_finished", "heartbeat")

# Why a held event waits: its `reason`, by which delivery messages are headed.
URGENT, WINDOW, CAP, DIGEST, QUIET, OWN = "urgent", "window", "cap", "digest", "quiet", "own"


@dataclass(frozen=True)
class Timing:
    """The engine's time constants (docs/limits.md#time-constants), configurable for tests."""

    window_seconds: float = 30
    wakeups_per_hour: int = 20
    hour_seconds: float = 3600
    cap_digest_seconds: float = 600
    minute_seconds: float = 60


@dataclass(frozen=True)
class Rules:
    """The delivery options of one subscription."""

    id: str
    created_at: datetime
    digest_minutes: int | None = None
    quiet: QuietHours | None = None
    last_digest_at: datetime | None = None


@dataclass(frozen=True)
class Held:
    """A held event as the decisions see it."""

    key: int
    due_at: datetime
    reason: str
    urgent: bool = False


# The provenance kind of a prompt the relay queued with an event delivery (oar/turns/automated.py).
STARTED_BY_EVENT = "event"


def wakes_watchers(kind: str, started_by: str | None) -> bool:
    """Whether an event is held for watchers at all (docs/events.md#watchers-that-wake-each-other).

    The `turn_end` of a turn started by an event delivery is held for no watcher: such a turn
    is a watcher's reaction to news, and telling its end to other watchers would wake them to
    react in turn, each reaction waking the next (A→B→A, A→B→C→A, …) without end. Every link
    of such a chain is one of these `turn_end`s, so dropping them stops every cycle after one
    round. The turn's `error` and `question_asked`, its tasks, and the `turn_end` of turns a
    person, an agent's prompt or a schedule started still wake watchers. Events recorded
    before `startedBy` existed (None) are delivered as before.
    """
    return not (kind == "turn_end" and started_by == STARTED_BY_EVENT)


def digest_due(rules: Rules, timing: Timing) -> datetime | None:
    """max(subscription created, previous digest) + N minutes, or None without digests."""
    if not rules.digest_minutes:
        return None
    since = max(rules.created_at, rules.last_digest_at or rules.created_at)
    return since + timedelta(seconds=rules.digest_minutes * timing.minute_seconds)


def base_due(now: datetime, held: Sequence[Held], wakeups: int, timing: Timing) -> tuple[datetime, str]:
    """When a non-urgent event would arrive with no per-subscription options: the close of
    the open window (or a new one), or the hourly cap's next digest."""
    if wakeups >= timing.wakeups_per_hour:
        cap = [h.due_at for h in held if h.reason == CAP and h.due_at > now]
        return (min(cap) if cap else now + timedelta(seconds=timing.cap_digest_seconds)), CAP
    open_window = [h.due_at for h in held if h.reason == WINDOW and h.due_at > now]
    return (min(open_window) if open_window else now + timedelta(seconds=timing.window_seconds)), WINDOW


def due_for(
    subscriptions: Sequence[Rules], kind: str, now: datetime, held: Sequence[Held], wakeups: int, timing: Timing
) -> tuple[datetime, str, str]:
    """(due time, reason, the subscription that lets it through first) for one event."""
    if not subscriptions:
        raise ValueError("an event is held only for a subscription that matched it")
    if kind in URGENT_KINDS:
        return now, URGENT, subscriptions[0].id
    base, base_reason = base_due(now, held, wakeups, timing)
    best: tuple[datetime, str, str] | None = None
    for rules in subscriptions:
        due, reason = base, base_reason
        digest = digest_due(rules, timing)
        if digest is not None and digest > due:
            due, reason = digest, DIGEST
        released = release_time(rules.quiet, due)
        if released != due:
            due, reason = released, QUIET
        if best is None or due < best[0]:
            best = (due, reason, rules.id)
    if best is None:
        raise ValueError("due_time needs at least one subscription")
    return best


def open_slots(held: Sequence[Held], now: datetime) -> list[Held]:
    """The held events `base_due` looks at, at most one per reason (the earliest open window
    and cap digest after `now`): `due_for` gives the same answer for these as for all of
    `held`, so the engine keeps only these while it holds a batch of events."""
    slots: dict[str, Held] = {}
    for item in held:
        if item.reason in (WINDOW, CAP) and item.due_at > now:
            if item.reason not in slots or item.due_at < slots[item.reason].due_at:
                slots[item.reason] = item
    return list(slots.values())


def batch(held: Sequence[Held], now: datetime) -> list[Held]:
    """What one delivery at `now` carries: everything due, and when an urgent event is due,
    whatever the open window holds too."""
    due = [h for h in held if h.due_at <= now]
    if any(h.urgent for h in due):
        due += [h for h in held if h.reason == WINDOW and h.due_at > now]
    return sorted(due, key=lambda h: h.key)


def next_due(held: Sequence[Held]) -> datetime | None:
    return min((h.due_at for h in held), default=None)


def digest_line(count: int, reasons: set[str], digest_subs: Sequence[Rules], quiet: QuietHours | None) -> str | None:
    """The line that heads a digest or a quiet-hours delivery (docs/events.md#digests); None for a plain one.
    A one-event digest reads like that event."""
    if QUIET in reasons and quiet is not None:
        events = "1 event" if count == 1 else f"{count} events"
        return (
            f"Held during quiet hours ({quiet.start:%H:%M}–{quiet.end:%H:%M} {quiet.tz}): {events}, "
            "delivered now that the window has ended; questions and errors came at once."
        )
    if count < 2 or not reasons & {CAP, DIGEST}:
        return None
    parts = [f"subscription {rules.id} every {rules.digest_minutes} min" for rules in digest_subs if DIGEST in reasons]
    if CAP in reasons:
        parts.append("over 20 wake-ups in the last hour; the rest come every 10 min")
    return f"Digest of {count} events ({'; '.join(parts)}; questions and errors come at once):"


@dataclass(frozen=True)
class Piece:
    """Lines of a delivery message that stay together, in event order: one event's line, an
    engine line, or a bundle's lines (docs/events.md#how-events-are-held). `always`: listed
    however long the message (urgent events, the engine's own lines). `kinds`: how many of
    `lines` are of each kind, when known (a bundle's, counted once for all its watchers)."""

    lines: Sequence[tuple[str, str]]  # (kind, line)
    always: bool = False
    kinds: Mapping[str, int] | None = None


def listed_lines(pieces: Sequence[Piece], shown: int) -> list[str]:
    """The event lines of one delivery message (docs/events.md#a-short-message): at most
    `shown`, then one line that counts the rest by kind. Lines that are `always` listed count
    against `shown` but are never left out; the others fill what is left, in order. A watcher
    of a busy relay would otherwise get thousands of lines in one message, more than an
    agent's context holds; each piece is looked at only as far as it is listed."""
    if sum(len(piece.lines) for piece in pieces) <= shown:
        return [line for piece in pieces for _kind, line in piece.lines]
    room = max(shown - sum(len(piece.lines) for piece in pieces if piece.always), 0)
    listed: list[str] = []
    left: dict[str, int] = {}
    for piece in pieces:
        taken = piece.lines if piece.always else piece.lines[:room]
        listed.extend(line for _kind, line in taken)
        if piece.always:
            continue
        room -= len(taken)
        if len(taken) < len(piece.lines):
            counts = dict(piece.kinds) if piece.kinds is not None else _counted(piece.lines)
            for kind, _line in taken:
                counts[kind] -= 1
            for kind, number in counts.items():
                if number:
                    left[kind] = left.get(kind, 0) + number
    if left:
        count = sum(left.values())
        kinds = ", ".join(f"{kind} {number:,}" for kind, number in sorted(left.items(), key=lambda item: (-item[1], item[0])))
        events = "1 more event" if count == 1 else f"{count:,} more events"
        listed.append(f"[relay event] … and {events} not listed ({kinds}): list_sessions and read_session show "
                      "where their sessions stand.")
    return listed


def _counted(lines: Iterable[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind, _line in lines:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


# Heartbeats (docs/events.md#events, docs/events.md#delivery) -------------------------------------------------------------

# Quiet windows skipped at most when looking for the next heartbeat outside them.
HEARTBEAT_SEARCH = 400


def heartbeat_after(anchor: datetime, every_seconds: float, after: datetime, quiet: QuietHours | None) -> datetime:
    """The next heartbeat: the first time on the subscription's grid (anchor + k × every,
    k ≥ 1) after `after` that is outside its quiet hours (no heartbeats inside the window).

    A grid point inside a quiet window is skipped for the first one at or after the
    window's end, so a relay that was down sends one heartbeat for all it missed.
    """
    step = timedelta(seconds=every_seconds)
    k = max(1, floor((after - anchor) / step) + 1)
    for _ in range(HEARTBEAT_SEARCH):
        candidate = anchor + step * k
        released = release_time(quiet, candidate)
        if released == candidate:
            return candidate
        k = max(k + 1, ceil((released - anchor) / step))
    return anchor + step * k  # every grid point falls in a window: heartbeat_wanted skips them


def heartbeat_wanted(due_at: datetime, now: datetime, quiet: QuietHours | None) -> bool:
    """A heartbeat is made when its grid time has come and `now` is outside quiet hours."""
    return due_at <= now and release_time(quiet, now) == now


# Stalls (docs/events.md#events: a running turn or task without output for stalled_minutes) ------------


def quiet_since(previous_size: int | None, previous_since: datetime | None, size: int, started_at: datetime,
                now: datetime) -> datetime:
    """Since when a running turn has shown no output, from what the sweeper saw last time.

    A turn is looked at every sweep; its output's size (reply text and activity lines) that
    changed since the last look means output in between, so the quiet spell starts `now`
    (never earlier than the truth: a stall is reported late by at most one sweep, never
    early). A turn seen for the first time with no output has been quiet since it started.
    """
    if previous_since is not None and previous_size == size:
        return previous_since
    if previous_since is None and size == 0:
        return started_at
    return now


def stalls_due(since: datetime, thresholds: Iterable[int], reported: Iterable[int], now: datetime,
               minute_seconds: float) -> list[int]:
    """The `stalled_minutes` values a quiet spell that began at `since` has crossed by `now`
    and that were not reported for this spell yet (each is reported once per spell)."""
    quiet = now - since
    done = set(reported)
    return sorted(
        minutes for minutes in set(thresholds)
        if minutes not in done and quiet >= timedelta(seconds=minutes * minute_seconds)
    )
