"""Delivering held events (docs/events.md): a watcher's due rows become one automated message.

`deliver` claims a watcher's due rows with a conditional UPDATE and writes the message. The
RQ job of a due time (`workers.delivery.deliver_due`, enqueued by `oar.watching.due_jobs`)
delivers to every watcher due by then; RQ's scheduler may start it early, so the job
compares `now` with the stored due time. The clock's sweeper delivers whatever is overdue.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from peewee import DoesNotExist, fn

from oar.core import keys, lease_lock
from oar.core.db import database, released_connection, write_transaction
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
            if lag_seconds and not unlocked:
                _hand_back_recent(runtime, now_reader(), lag_seconds)
            return delivered


def _hand_back_recent(runtime: Runtime, now: datetime, lag_seconds: float) -> None:
    """A caller that delivers only what is `lag_seconds` overdue (the clock's sweep) leaves the
    watchers due since to their due jobs; those that ran while it held the lock found it taken
    and left them to it. One more job goes on with them, else they waited for the next sweep."""
    recent = set(_overdue_watchers(now)) - set(_overdue_watchers(now - timedelta(seconds=lag_seconds)))
    if recent:
        due_jobs.enqueue_due(runtime, now)


def _deliver_pass(runtime: Runtime, now: datetime, lag_seconds: float, lease: lease_lock.Lease) -> int:
    made = 0
    lines = held.Lines()  # the watchers of a wide fan-out carry the same bundled lines
    watchers = _overdue_watchers(now - timedelta(seconds=lag_seconds))
    for start in range(0, len(watchers), DELIVERIES_PER_TRANSACTION):
        outcomes = deliver_group(runtime, watchers[start:start + DELIVERIES_PER_TRANSACTION], now, lines)
        made += sum(1 for outcome in outcomes.values() if outcome == "delivered")
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
    `dropped`, `lost` (another worker delivered them first) or `failed` (logged; the sweeper
    tries again)."""
    return deliver_group(runtime, [watcher_id], now, lines or held.Lines())[watcher_id]


# Watchers whose deliveries one write transaction makes, each in a savepoint of its own: the
# 200 watchers of a wide fan-out whose windows close together get their messages in 10
# commits instead of 200 (docs/benchmarks.md#short-messages-and-grouped-deliveries), and the
# writer is held a few tens of milliseconds at a time.
DELIVERIES_PER_TRANSACTION = 20


@dataclass
class _Planned:
    watcher_id: str
    chosen: list[Any]
    text: str
    remote: bool
    # Whether a job must be enqueued to run the turn of the message (set as it is written).
    starts_turn: bool = False


def deliver_group(runtime: Runtime, watcher_ids: list[str], now: datetime, lines: held.Lines) -> dict[str, str]:
    """`deliver` for several watchers: their messages written in one transaction, their
    turns enqueued together after it. One watcher's failure leaves the others' deliveries."""
    if not runtime.settings()["agent_sessions_enabled"]:
        # Subscriptions deliver nothing while agent sessions are off (docs/rules.md#agent-sessions-on-or-off).
        return dict.fromkeys(watcher_ids, "paused")
    outcomes: dict[str, str] = {}
    planned: list[_Planned] = []
    for watcher_id in watcher_ids:
        try:
            plan = _plan(runtime, watcher_id, now, lines)
        except Exception:  # one broken watcher must not stop the others
            log.exception("delivery to %s failed; trying again at the next sweep", watcher_id)
            outcomes[watcher_id] = "failed"
            continue
        if isinstance(plan, str):
            outcomes[watcher_id] = plan
        else:
            planned.append(plan)
    written: list[_Planned] = []
    if planned:
        try:
            with write_transaction():
                for plan in planned:
                    try:
                        with database.atomic():  # a savepoint: what fails is undone alone
                            _write(runtime, plan, now)
                        written.append(plan)
                    except held.Lost:
                        outcomes[plan.watcher_id] = "lost"
                    except Exception:
                        log.exception("delivery to %s failed; trying again at the next sweep", plan.watcher_id)
                        outcomes[plan.watcher_id] = "failed"
        except Exception:  # the commit failed: nothing of the group was written
            log.exception("deliveries to %d watchers failed; trying again at the next sweep", len(planned))
            outcomes.update((plan.watcher_id, "failed") for plan in written)
            written = []
    # A busy watcher's running turn takes its message as it ends: a job each for hundreds of
    # them would only take the CPU and the write lock from the deliveries still to make.
    turns.start_turns_of(runtime, [plan.watcher_id for plan in written if plan.starts_turn])
    outcomes.update((plan.watcher_id, "delivered") for plan in written)
    for watcher_id, outcome in outcomes.items():
        if outcome in ("delivered", "nothing"):
            due_jobs.schedule_next(runtime, watcher_id)
    return outcomes


def _plan(runtime: Runtime, watcher_id: str, now: datetime, lines: held.Lines) -> _Planned | str:
    """What to deliver to the watcher, read before the write lock is taken: its message's
    text (a wide fan-out's for hundreds of watchers whose windows close together), or the
    outcome when there is nothing to write. Its rows are claimed only if still undelivered,
    and lines and the subscriptions' digest and quiet hours never change."""
    watcher = _WATCHER.first(watcher_id)
    if watcher is None or watcher.archived or watcher.deleted:
        HeldEvent.update(dropped=True).where((HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null()).execute()
        return "dropped"
    rows = {row.id: row for row in _UNDELIVERED.rows(watcher_id)}
    chosen = [rows[h.key] for h in delivery.batch([delivery.Held(r.id, r.due_at, r.reason, r.urgent) for r in rows.values()], now)]
    if not chosen:
        return "nothing"
    text = _message_text(chosen, lines, int(runtime.time("DELIVERY_LINES_SHOWN")))
    # Another relay's conversation (its stand-in here) gets the message by fetching it
    # (docs/relays.md#events-across-relays): it waits in the outbox, and no turn runs here.
    return _Planned(watcher_id, chosen, text, remote=watcher.remote_relay is not None)


def _write(runtime: Runtime, plan: _Planned, now: datetime) -> None:
    watcher = _WATCHER.first(plan.watcher_id)
    if watcher is None:
        raise DoesNotExist(f"session {plan.watcher_id} is gone")
    if plan.remote:
        message_id = outbox.put(runtime, plan.watcher_id, plan.text, _kinds(plan.chosen), now)
    else:
        message_id = automated.insert(watcher, plan.text, turns.Provenance(kind="event", hops=0)).id
        plan.starts_turn = not turns.taken_at_turn_end(plan.watcher_id)
    if held.claim([r.id for r in plan.chosen], now, message_id) != len(plan.chosen):
        raise held.Lost
    # The hourly cap counts wake-ups; older records are of no more use.
    Wakeup.create(watcher=plan.watcher_id, message_id=message_id, delivered_at=now)
    Wakeup.delete().where(
        (Wakeup.watcher == plan.watcher_id)
        & (Wakeup.delivered_at < now - timedelta(seconds=2 * subscription_rules.timing(runtime).hour_seconds))
    ).execute()
    digested = {r.subscription_id for r in plan.chosen if r.reason == delivery.DIGEST}
    if digested:
        Subscription.update(last_digest_at=now).where(Subscription.id.in_(digested)).execute()


def _kinds(rows: list[Any]) -> dict[str, int]:
    """How many events of each kind a delivery holds (for the `replayed` line on the other relay)."""
    counted: dict[str, int] = {}
    for row in rows:
        counted[row.kind] = counted.get(row.kind, 0) + (row.count or 1)
    return counted


def _message_text(rows: list[Any], lines: held.Lines, shown: int) -> str:
    reasons = {row.reason for row in rows}
    subs = {s.id: s for s in _SUBSCRIPTIONS.rows(list({r.subscription_id for r in rows}))}
    digest_subs = [subscription_rules.rules_of(s) for s in subs.values() if s.digest_minutes]
    quiet = next((subscription_rules.quiet_of(s) for s in subs.values() if s.quiet_hours), None)
    text = [automated.EVENT_HEADER]
    heading = delivery.digest_line(sum(row.count for row in rows), reasons, digest_subs, quiet)
    if heading:
        text.append(heading)
    pieces = _pieces_in_order(rows, lines)
    if pieces is None:
        pieces = [piece for _place, piece in sorted(_placed_lines(rows, lines), key=lambda placed: placed[0])]
    text.extend(delivery.listed_lines(pieces, shown))
    return "\n".join(text)


# Where a piece of a message goes (docs/events.md#how-events-are-held): events by their
# numbers, an engine line (`all_idle`, a heartbeat) after the events ingested before it, the
# row's id between equals.
Place = tuple[int, int, int]


def _pieces_in_order(rows: list[Any], lines: held.Lines) -> list[delivery.Piece] | None:
    """The message's pieces in order, a bundle's lines kept together (a wide fan-out's
    bundles hold thousands of lines each, the same for every watcher of everything, read
    once by `held.Lines`): when no piece falls inside a bundle's span. None otherwise."""
    placed: list[tuple[Place, Place, delivery.Piece]] = []
    for row in rows:
        if row.seqs:
            span = lines.span(row.seqs)
            if span is None:
                return None
            if span.lines:
                placed.append(((span.first, 0, row.id), (span.last, 0, row.id), delivery.Piece(span.lines, kinds=span.kinds)))
        else:
            [(place, piece)] = _placed_lines([row], lines)
            placed.append((place, place, piece))
    placed.sort(key=lambda item: item[0])
    if any(later[0] <= earlier[1] for earlier, later in zip(placed, placed[1:], strict=False)):
        return None
    return [piece for _first, _last, piece in placed]


def _placed_lines(rows: list[Any], lines: held.Lines) -> list[tuple[Place, delivery.Piece]]:
    """Every line of `rows` with its place, one piece each."""
    placed: list[tuple[Place, delivery.Piece]] = []
    for row in rows:
        if row.seqs:
            placed.extend(((seq, 0, row.id), delivery.Piece([(kind, line)])) for seq, kind, line in lines.of(row.seqs))
        elif row.event_seq is not None:
            placed.append(((row.event_seq, 0, row.id), delivery.Piece([(row.kind, row.line)], always=bool(row.urgent))))
        else:
            placed.append(((row.position or 0, 1, row.id), delivery.Piece([(row.kind, row.line)], always=True)))
    return placed
