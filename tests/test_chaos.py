"""Chaos (docs/operations.md#durability-and-recovery): a seeded workload of prompts, new
sessions, subscriptions with held events, schedules and background tasks, while web,
worker and clock are SIGKILLed at random points (and restarted, as a supervisor would) and
Redis is flushed once. Afterwards, with everything running again and the relay quiet, the
database shows that nothing was lost or done twice:

- every prompt reached a final state, none is left queued or running;
- a prompt failed only because the worker running it died (it had started before a worker
  was killed); prompts that had not started then ran;
- every schedule fired once per due time, never before it;
- every held event was delivered once, into its watcher, never before its due time;
- every background task ended; one failed only if it had started before a worker was killed.

The short form (CI) runs ~120 actions; `OAR_SUITE=full python -m pytest tests/test_chaos.py -s`
runs 1,000. `OAR_CHAOS_SEED=<n>` replays a seed (printed at the start): the same actions and
the same chaos plan, though not the same timing.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from oar.background.task_recovery import ORPHANED_TEXT as TASK_ORPHANED_TEXT
from oar.core.db import database
from oar.core.models import Event, EventLine, HeldEvent, Message, Schedule, Session, Setting, Subscription, Task
from oar.core.statuses import TaskStatus, TurnStatus
from oar.core.timeutil import utcnow
from oar.engine.reconciler import ORPHANED_TEXT
from oar.watching.delivery import wakes_watchers
from oar.watching.ingest import CURSOR_KEY
from tests.support.chaos import Chaos, OwnerAtThePage, Tally, Workload, plan
from tests.support.clients import poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay
from tests.support.suites import full, scale

pytestmark = pytest.mark.stack  # a relay of its own

ACTIONS = scale(120, 1000)
KILLS_PER_PART = scale(2, 6)
SCHEDULE_MINUTE_SECONDS = 2
STALE_SECONDS = 8  # longer than FAST_TIMES': a busy shared machine must not fail live turns
TIMES = {
    **FAST_TIMES,
    "SCHEDULE_MINUTE_SECONDS": str(SCHEDULE_MINUTE_SECONDS),
    "DELIVERY_MINUTE_SECONDS": "1",
    "DELIVERY_CAP_DIGEST_SECONDS": "10",  # past 20 wake-ups of a watcher (the full form gets there)
    "TURN_STALE_SECONDS": str(STALE_SECONDS),
    "TASK_STALE_SECONDS": str(STALE_SECONDS),
}
FINAL = {TurnStatus.DONE, TurnStatus.FAILED, TurnStatus.STOPPED, TurnStatus.CANCELLED}
QUIET_TIME = 180 + (ACTIONS // 2)  # generous: recovery waits out stale heartbeats after each worker kill


@pytest.fixture
def chaos_stack(tmp_path: Path) -> Iterator[RelayStack]:
    """web (gunicorn), worker and clock as the Procfile runs them, on a private Redis."""
    with own_relay(tmp_path, TIMES, web="process", clock=True,
                   env={"WEB_CONCURRENCY": "2", "OAR_WEB_THREADS": "16"}) as stack:
        assert stack.relay is not None
        stack.bind_database()
        yield stack


def quiet_hours_now(now: datetime) -> dict[str, str]:
    """A quiet-hours window open now that ends at a minute boundary 40–100 s away."""
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (end - now).total_seconds() < 40:
        end += timedelta(minutes=1)
    if full():
        end += timedelta(minutes=2)
    start = now - timedelta(minutes=2)
    return {"from": start.strftime("%H:%M"), "to": end.strftime("%H:%M"), "tz": "UTC"}


def test_nothing_is_lost_or_doubled_while_every_process_is_killed_at_random_and_redis_is_flushed(
    chaos_stack: RelayStack,
) -> None:
    stack = chaos_stack
    assert stack.relay is not None
    owner = stack.relay.owner
    seed = int(os.environ.get("OAR_CHAOS_SEED") or random.SystemRandom().randrange(10**9))
    print(f"\nchaos seed {seed} (replay: OAR_CHAOS_SEED={seed}); {ACTIONS} actions")
    rng = random.Random(seed)
    # Tasks a killed worker left running count until the stale sweep: caps high enough not to refuse what this tests.
    owner.settings(allow_shell_tasks=True, max_running_tasks_per_session=100, max_running_tasks=200)
    # Desks start their sessions behind the owner's first-use card (allowed by the owner thread);
    # watchers get theirs ahead, as an owner may grant at the page.
    desks = [owner.conversation(f"desk {n}", approvals=()) for n in range(4)]
    watchers = [owner.conversation(f"watcher {n}", approvals=("watch_sessions",)) for n in range(3)]
    quiet = owner.conversation("night watch", approvals=("watch_sessions",))
    tally = Tally()
    workload = Workload(stack, rng, desks, watchers, quiet, quiet_hours_now(utcnow()), tally)
    blows = plan(rng, ACTIONS, KILLS_PER_PART)
    chaos = Chaos(stack, workload, blows, tally)
    cards = OwnerAtThePage(owner, tally)
    cards.start()
    chaos.start()
    try:
        workload.run(ACTIONS)
        chaos.join(300)
        assert not chaos.is_alive(), "the chaos did not finish its plan"
        assert chaos.failure is None, repr(chaos.failure)
        workload.web.wait_until_up()
        workload.finish()
        for part in ("web", "worker", "clock"):
            assert stack.parts[part].running(), f"{part} is not running after the chaos: {stack.log(part)}"
        wait_until_quiet(tally)
    finally:
        cards.stopping.set()
        cards.join(10)
    report = check(tally)
    print_counts(tally, report)
    assert not tally.errors, tally.errors[:10]


def open_work() -> dict[str, int]:
    """What the relay still has to do: open turns, running tasks, due schedules, undelivered events."""
    with database.connection_context():
        cursor = Setting.get_or_none(Setting.key == CURSOR_KEY)
        return {
            "open turns": Message.select().where(Message.status.not_in(FINAL) & Message.status.is_null(False)).count(),
            "running tasks": Task.select().where(Task.status == TaskStatus.RUNNING).count(),
            # Every schedule ends: `at` ones once fired, recurring ones unscheduled by the workload's end.
            "schedules to fire": Schedule.select().where(Schedule.ended_at.is_null()).count(),
            "held events": HeldEvent.select().where(HeldEvent.delivered_at.is_null() & ~HeldEvent.dropped).count(),
            "busy sessions": Session.select().where(Session.active_turn.is_null(False)).count(),
            "events not ingested": Event.select().where(Event.seq > int(cursor.value if cursor else 0)).count(),
        }


def wait_until_quiet(tally: Tally) -> None:
    """Until the relay has nothing left to do (twice in a row: a delivery starts a watcher's turn)."""
    quiet_in_a_row = 0

    def quiet() -> bool:
        nonlocal quiet_in_a_row
        pending = open_work()
        last_seen.update(pending)
        quiet_in_a_row = quiet_in_a_row + 1 if not any(pending.values()) else 0
        return quiet_in_a_row >= 3

    last_seen: dict[str, int] = {}
    try:
        poll("the relay to finish its work", quiet, seconds=QUIET_TIME, every=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; still open: {last_seen}; {stuck_details()}") from None


def stuck_details() -> str:
    with database.connection_context():
        turns = [(m.id, m.session_id, m.status, m.started_at, m.heartbeat_at)
                 for m in Message.select().where(Message.status.not_in(FINAL) & Message.status.is_null(False)).limit(5)]
        held = [(h.id, h.watcher_id, h.reason, h.due_at) for h in
                HeldEvent.select().where(HeldEvent.delivered_at.is_null() & ~HeldEvent.dropped).limit(5)]
        schedules = [(s.id, s.target_id, s.at, s.every_minutes, s.next_fire_at, s.held_since, s.fired_count)
                     for s in Schedule.select().where(Schedule.ended_at.is_null()).limit(5)]
    return f"turns {turns}; held {held}; schedules {schedules}"


def check(tally: Tally) -> dict[str, Any]:
    """Every invariant of the module's docstring, on the database; returns the counts it saw."""
    report: dict[str, Any] = {}
    with database.connection_context():
        prompts = list(Message.select().where(Message.status.is_null(False)))
        by_id = {m.id: m for m in prompts}
        report["prompts"] = Counter(str(m.status) for m in prompts)
        report["prompt kinds"] = Counter(m.from_kind for m in prompts)
        # Every accepted prompt is there and ended; none is left queued or running.
        missing = [p for p in tally.prompts if p not in by_id]
        assert not missing, f"accepted prompts lost: {missing}"
        open_ones = [(m.id, m.status) for m in prompts if m.status not in FINAL]
        assert not open_ones, f"prompts left open: {open_ones}"
        # A prompt fails only as the orphan of a killed worker: it had started before a kill.
        orphaned = ORPHANED_TEXT.format(seconds=STALE_SECONDS)
        for m in prompts:
            if m.status == TurnStatus.FAILED:
                assert m.error == orphaned, (m.id, m.error)
                assert m.started_at is not None and any(m.started_at <= kill for kill in tally.worker_kills), (
                    f"prompt {m.id} failed without having started before a worker was killed: "
                    f"started {m.started_at}, kills {tally.worker_kills}"
                )
            assert m.status not in (TurnStatus.STOPPED, TurnStatus.CANCELLED), (m.id, m.status, m.error)
        assert Session.select().where(Session.active_turn.is_null(False)).count() == 0
        # The prompts that waited in a queue while a worker was killed, and ran afterwards.
        report["queued at a worker kill, then ran"] = sum(
            1 for m in prompts if m.status == TurnStatus.DONE and m.started_at is not None
            and any(m.created_at <= kill < m.started_at for kill in tally.worker_kills)
        )
        # None ran twice: one reply per answered prompt, in its session.
        replies = Counter(m.session_id for m in Message.select().where(Message.role == "assistant"))
        answered = Counter(m.session_id for m in prompts if m.status == TurnStatus.DONE)
        assert replies == answered, {s: (replies[s], answered[s]) for s in set(replies) | set(answered) if replies[s] != answered[s]}
        reply_ids = [m.reply_id for m in prompts if m.status == TurnStatus.DONE]
        assert None not in reply_ids and len(set(reply_ids)) == len(reply_ids)

        report["schedules"] = check_schedules(tally)
        report["deliveries"] = check_deliveries()
        report["tasks"] = check_tasks(tally)
    return report


def firings(schedule_id: str) -> list[Message]:
    return list(Message.select().where(Message.text.startswith(f"[relay schedule {schedule_id} ")).order_by(Message.seq))


def check_schedules(tally: Tally) -> Counter[str]:
    counts: Counter[str] = Counter()
    step = timedelta(seconds=SCHEDULE_MINUTE_SECONDS)
    for schedule_id, at in tally.schedules.items():
        row = Schedule.get_by_id(schedule_id)
        fired = firings(schedule_id)
        assert row.fired_count == len(fired), (schedule_id, row.fired_count, len(fired))
        counts["firings"] += len(fired)
        counts["skipped"] += row.skipped_count
        if at is not None:  # once, at its time
            assert (len(fired), row.fired_count, row.end_reason) == (1, 1, "fired"), (
                schedule_id, len(fired), row.fired_count, row.end_reason, row.skipped_count)
            assert fired[0].created_at >= at, (schedule_id, fired[0].created_at, at)
            counts["once"] += 1
        else:  # recurring: never more firings than due times so far (a message may be written late)
            offsets = [(m.created_at - row.anchor).total_seconds() for m in fired]
            too_early = [(n, offset) for n, offset in enumerate(offsets) if offset < n * step.total_seconds()]
            assert not too_early, f"schedule {schedule_id} fired more than once per due time: firings at {offsets} s " \
                                  f"after its first due time, every {step.total_seconds()} s"
            counts["recurring"] += 1
    return counts


def held_seqs(row: HeldEvent) -> list[int]:
    """The events a held row stands for: one, or a bundle's runs (docs/events.md#how-events-are-held)."""
    if not row.seqs:
        return [row.event_seq] if row.event_seq is not None else []
    return [seq for first, last, _kind in row.seqs for seq in range(first, last + 1)]


def held_lines(row: HeldEvent) -> list[str]:
    """The lines a held row delivers: its own, or its bundle's, written once per event."""
    if not row.seqs:
        return [row.line]
    return [EventLine.get((EventLine.seq == seq) & (EventLine.kind == kind)).line
            for first, last, kind in row.seqs for seq in range(first, last + 1)]


def check_deliveries() -> Counter[str]:
    counts: Counter[str] = Counter()
    held = list(HeldEvent.select().where(~HeldEvent.dropped))
    # Every event a subscription watches was held for its watcher (none lost on the way in),
    # but the turn_end of a turn an event delivery started, which is held for no watcher
    # (docs/events.md#watchers-that-wake-each-other).
    kept = {(row.watcher_id, seq) for row in HeldEvent.select() for seq in held_seqs(row)}
    for subscription in Subscription.select():
        for event in Event.select().where(
            Event.session.in_(subscription.sessions) & Event.kind.in_(subscription.events)
            & (Event.created_at >= subscription.created_at)
        ):
            if not wakes_watchers(event.kind, event.payload.get("startedBy")):
                counts["turn_ends of event-started turns, held for nobody"] += 1
                continue
            assert (subscription.watcher_id, event.seq) in kept, (
                f"event {event.seq} ({event.kind} of {event.session_id}) never held for {subscription.watcher_id}")
            counts["watched (subscription, event) pairs"] += 1
    messages = {m.id: m for m in Message.select().where(Message.role == "event")}
    lines = {row.id: held_lines(row) for row in held}
    for row in held:
        assert row.delivered_at is not None and row.message_id, f"held event {row.id} was never delivered"
        assert row.delivered_at >= row.due_at, (row.id, row.delivered_at, row.due_at)
        message = messages.get(row.message_id)
        assert message is not None and message.session_id == row.watcher_id, (row.id, row.message_id)
        for line in lines[row.id]:
            assert line in message.text, (row.id, line, message.text)
        counts[f"held for {row.reason}"] += len(lines[row.id])
    # Once: no event line twice in its watcher's messages (every prompt text is unique).
    by_watcher: dict[str, list[str]] = {}
    for message in messages.values():
        by_watcher.setdefault(message.session_id, []).append(message.text)
    for row in held:
        for line in lines[row.id]:
            told = sum(text.count(line) for text in by_watcher.get(row.watcher_id, []))
            assert told == 1, f"held event {row.id} told {told} times: {line}"
    counts["delivery messages"] = len(messages)
    counts["events delivered"] = sum(len(rows) for rows in lines.values())
    return counts


def check_tasks(tally: Tally) -> Counter[str]:
    counts: Counter[str] = Counter()
    orphaned = TASK_ORPHANED_TEXT.format(seconds=STALE_SECONDS)
    for task in Task.select():
        counts[str(task.status)] += 1
        assert task.status != TaskStatus.RUNNING, task.id
        if task.status == TaskStatus.FAILED:
            assert task.error == orphaned, (task.id, task.error)
            assert task.heartbeat_at is not None and any(task.created_at <= kill for kill in tally.worker_kills), task.id
        else:
            assert (task.status, task.exit_code) == (TaskStatus.COMPLETED, 0), (task.id, task.status, task.exit_code, task.error)
    missing = [t for t in tally.tasks if not Task.get_or_none(Task.id == t)]
    assert not missing, f"accepted tasks lost: {missing}"
    return counts


def print_counts(tally: Tally, report: dict[str, Any]) -> None:
    def line(counter: Any) -> str:
        return ", ".join(f"{key} {value}" for key, value in sorted(counter.items())) or "none"

    print(f"actions: {line(tally.actions)}")
    print(f"kills: {line(tally.kills)}; Redis flushed {tally.flushes}×; cards allowed {tally.cards_allowed}")
    print(f"prompts by final state: {line(report['prompts'])} (by origin: {line(report['prompt kinds'])}); "
          f"queued at a worker kill, then ran: {report['queued at a worker kill, then ran']}")
    print(f"schedules: {line(report['schedules'])} ({tally.schedules_found_afterwards} found afterwards)")
    print(f"deliveries: {line(report['deliveries'])}")
    print(f"tasks: {line(report['tasks'])}")

