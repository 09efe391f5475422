"""The delivery engine end to end (docs/events.md#events, docs/events.md#delivery): heartbeats, stalled turns and tasks,
subagent_finished, and the hourly cap, over real HTTP with real workers and the clock.

Each test runs a relay of its own (tests/support/relays.py `own_relay`: the Flask app over HTTP,
RQ worker processes and `oar clock`) with the subscription "minute" shortened
(DELIVERY_MINUTE_SECONDS), so that `heartbeat_minutes: 5` is 5 s and `stalled_minutes: 2`
is 2 s, and with a short delivery window.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oar.core.db import database
from oar.core.models import Event, EventLine, HeldEvent, Message, Subscription
from tests.support.clients import Agent, poll
from tests.support.conversations import event_lines
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay

pytestmark = pytest.mark.stack  # relays of its own

MINUTE_SECONDS = 1
CAP_DIGEST_SECONDS = 6
TIMES = {
    **FAST_TIMES,
    "DELIVERY_MINUTE_SECONDS": str(MINUTE_SECONDS),
    "DELIVERY_WINDOW_SECONDS": "0.3",
    "DELIVERY_CAP_DIGEST_SECONDS": str(CAP_DIGEST_SECONDS),
    # No test here stops a worker: a task starved of CPU for 3 s on a loaded machine is not
    # failed as orphaned (its task_failed would wake the watchers).
    "TASK_STALE_SECONDS": "30",
}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[RelayStack, Relay]]:
    with own_relay(tmp_path, TIMES, clock=True) as stack:
        assert stack.relay is not None
        yield stack, stack.relay


def held_rows(watcher_id: str, kind: str | None = None) -> list[HeldEvent]:
    with database.connection_context():
        query = HeldEvent.select().where(HeldEvent.watcher == watcher_id)
        if kind:
            query = query.where(HeldEvent.kind == kind)
        return list(query.order_by(HeldEvent.id))


def held_lines(watcher_id: str) -> list[tuple[HeldEvent, str]]:
    """Each held event's line with the row that holds it: events ingested in one batch share
    a bundle row (docs/events.md#how-events-are-held), how they batch depends on timing."""
    found = []
    with database.connection_context():
        for row in held_rows(watcher_id):
            if not row.seqs:
                found.append((row, row.line))
                continue
            for first, last, kind in row.seqs:
                lines = EventLine.select().where((EventLine.kind == kind) & EventLine.seq.between(first, last))
                found.extend((row, line.line) for line in lines)
    return found


def at_least(relay: Relay, agent: Agent, count: int) -> list[str] | None:
    """The event messages delivered to `agent`'s conversation once there are `count` of them."""
    messages = event_lines(relay, agent.session_id)
    return messages if len(messages) >= count else None


def short(session_id: str) -> str:
    return f"({session_id[:4]}…)"


def test_heartbeats_come_every_heartbeat_minutes_with_the_state_of_the_watched_sessions(engine: Any) -> None:
    _stack, relay = engine
    desk = relay.conversation("desk")
    build = desk.ok("create_session", relay="this", text="!sleep 60", title="Build", wait_seconds=0)["session"]
    review = desk.ok("create_session", relay="this", text="hello", title="Review", wait_seconds=30)["session"]
    watcher = relay.conversation("watcher")
    sub = watcher.ok("subscribe", sessions=[build, review], events=["turn_end"], heartbeat_minutes=5)["subscription"]
    # Setting heartbeat_minutes turns heartbeats on (docs/events.md#subscriptions).
    assert sub["events"] == ["turn_end", "heartbeat"] and sub["heartbeatMinutes"] == 5

    messages = poll("two heartbeats", lambda: at_least(relay, watcher, 2), seconds=60)
    expected = (
        f'[relay event] heartbeat: 1 of 2 watched sessions at work — "Build" {short(build)} running; '
        f'idle: "Review" {short(review)} (subscription {sub["id"]})'
    )
    for message in messages[:2]:
        assert message.splitlines()[1:] == [expected]
    # On the grid from the subscription's creation, never early, one per grid point.
    with database.connection_context():
        anchor = Subscription.get_by_id(sub["id"]).created_at
    step = timedelta(seconds=5 * MINUTE_SECONDS)
    rows = held_rows(watcher.session_id, "heartbeat")
    slots = [(row.created_at - anchor) // step for row in rows]
    assert slots[:2] == sorted(set(slots[:2])) and slots[0] >= 1, slots
    assert all(row.delivered_at is not None and row.delivered_at >= row.due_at for row in rows[:2])


def test_heartbeats_in_events_need_heartbeat_minutes(engine: Any) -> None:
    _stack, relay = engine
    desk = relay.conversation("desk")
    other = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    body = desk.refused("subscribe", "REMOTE_RELAY_INVALID_INPUT", sessions=[other], events=["heartbeat"])
    assert body["error"] == "heartbeat needs heartbeat_minutes (5 to 1,440): how often it comes. Nothing was subscribed."


def test_a_turn_without_output_for_stalled_minutes_is_stalled_and_a_streaming_one_is_not(engine: Any) -> None:
    _stack, relay = engine
    desk = relay.conversation("desk")
    watcher = relay.conversation("watcher")
    quiet = desk.ok("create_session", relay="this", text="hello", title="Quiet", wait_seconds=30)["session"]
    busy = desk.ok("create_session", relay="this", text="hello", title="Streaming", wait_seconds=30)["session"]
    sub = watcher.ok("subscribe", sessions=[quiet, busy], events=["stalled"], stalled_minutes=3)["subscription"]
    assert sub["stalledMinutes"] == 3
    # One turn writes its first line and then nothing for 30 s; the other writes every 0.1 s for 6 s.
    sleeping = desk.ok("send", relay="this", session=quiet, text="think hard\n!sleep 30", wait_seconds=0)
    streaming = desk.ok("send", relay="this", session=busy, text="!stream 60 100", wait_seconds=0)

    [message] = poll("the stall delivered", lambda: event_lines(relay, watcher.session_id), seconds=60)
    assert message.splitlines()[1:] == [
        f'[relay event] session "Quiet" {short(quiet)}: stalled turn {sleeping["message_id"]} "think hard !sleep 30" '
        "(no output for 3 min)"
    ]
    done = desk.ok("wait", relay="this", session=busy, message_id=streaming["message_id"], wait_seconds=60)
    assert done["status"] == "done"
    with database.connection_context():
        stalled = [e.payload for e in Event.select().where(Event.kind == "stalled")]
    # Once per quiet spell, and never for the turn that kept writing.
    assert [p["turnId"] for p in stalled] == [sleeping["message_id"]], stalled
    desk.ok("stop", relay="this", session=quiet)


def test_a_quiet_task_stalls_and_each_subscription_gets_its_own_stalled_minutes(engine: Any) -> None:
    _stack, relay = engine
    relay.settings(allow_shell_tasks=True)
    runner = relay.conversation("Runner")
    watcher = relay.conversation("watcher")
    early = watcher.ok("subscribe", sessions=[runner.session_id], events=["stalled"], stalled_minutes=2)["subscription"]
    late = watcher.ok("subscribe", sessions=[runner.session_id], events=["stalled"], stalled_minutes=4)["subscription"]
    task = runner.post("/api/v1/tasks", {"command": "sleep 30", "description": "wait for the build"})["task"]

    def two_stalls() -> list[HeldEvent] | None:
        rows = held_rows(watcher.session_id, "stalled")
        return rows if len(rows) == 2 else None

    rows = poll("a stall for each stalled_minutes", two_stalls, seconds=60)
    assert [(row.subscription_id, row.line) for row in rows] == [
        (early["id"], f'[relay event] session "Runner" {short(runner.session_id)}: stalled task {task["taskId"]} '
                      '"wait for the build" (no output for 2 min)'),
        (late["id"], f'[relay event] session "Runner" {short(runner.session_id)}: stalled task {task["taskId"]} '
                     '"wait for the build" (no output for 4 min)'),
    ]
    runner.post(f"/api/v1/tasks/{task['taskId']}/stop")


def test_a_finished_subagent_wakes_the_watcher_and_a_finished_shell_task_does_not(engine: Any) -> None:
    _stack, relay = engine
    relay.settings(allow_shell_tasks=True)
    runner = relay.conversation("Runner")
    watcher = relay.conversation("watcher")
    # The default events, with stalls a day away: a task slow to start on a loaded machine (a
    # "minute" here is a second) must not add a stalled line to the ones this test counts.
    sub = watcher.ok("subscribe", sessions=[runner.session_id], stalled_minutes=1440)["subscription"]
    assert "subagent_finished" in sub["events"] and "task_finished" not in sub["events"]
    listing = relay.conversation("all tasks")
    listing.ok("subscribe", sessions=[runner.session_id], events=["task_finished"])
    shell = runner.post("/api/v1/tasks", {"command": "true", "description": "lint"})["task"]
    ok = runner.post("/api/v1/tasks", {"command": "true", "description": "research the API", "type": "subagent"})["task"]
    failed = runner.post("/api/v1/tasks", {"command": "false", "description": "write the tests", "type": "subagent"})["task"]

    def lines_for(agent: Agent, count: int) -> list[str] | None:
        """Task lines (the default events also bring all_idle once the tasks are over)."""
        lines = [line for m in event_lines(relay, agent.session_id) for line in m.splitlines()[1:]]
        lines = [line for line in lines if "all_idle" not in line]
        return sorted(lines) if len(lines) >= count else None

    head = f'[relay event] session "Runner" {short(runner.session_id)}:'
    # A failed subagent is one line, subagent_finished, not a task_failed as well; `true` run
    # as a shell task does not wake under the default events.
    assert poll("the subagent lines", lambda: lines_for(watcher, 2), seconds=60) == sorted([
        f'{head} subagent_finished {ok["taskId"]} "research the API" (completed)',
        f'{head} subagent_finished {failed["taskId"]} "write the tests" (failed, exit 1)',
    ])
    # A subscription to task_finished gets every task's end under that name.
    assert poll("every task end", lambda: lines_for(listing, 3), seconds=60) == sorted([
        f'{head} task_finished {shell["taskId"]} "lint"',
        f'{head} task_finished {ok["taskId"]} "research the API"',
        f'{head} task_finished {failed["taskId"]} "write the tests" (exit 1)',
    ])
    assert {row.kind for row in held_rows(watcher.session_id)} <= {"subagent_finished", "all_idle"}


CAP_HEADING = (
    "Digest of 3 events (over 20 wake-ups in the last hour; the rest come every 10 min; questions and errors "
    "come at once):"
)


def test_after_twenty_wakeups_an_hour_events_come_as_a_digest_and_errors_still_at_once(engine: Any) -> None:
    _stack, relay = engine
    desk = relay.conversation("desk")
    target = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)["session"]
    watcher = relay.conversation("watcher")
    watcher.ok("subscribe", sessions=[target], events=["turn_end", "error"])

    def delivered(count: int) -> list[str] | None:
        return at_least(relay, watcher, count)

    # 20 wake-ups: one event each, each delivered before the next is made.
    for step in range(1, 21):
        assert desk.ok("send", relay="this", session=target, text=f"step {step}", wait_seconds=30)["status"] == "done"
        poll(f"wake-up {step}", lambda step=step: delivered(step), seconds=30)
    messages = event_lines(relay, watcher.session_id)
    assert [m.splitlines()[1:] for m in messages] == [
        [f'[relay event] session "Build" {short(target)}: turn_end (done) "echo: step {step}"'] for step in range(1, 21)
    ]
    # Past the cap, events wait for the digest…
    for step in (21, 22):
        desk.ok("send", relay="this", session=target, text=f"step {step}", wait_seconds=30)
    # …while an error comes at once (docs/events.md#digests), alone: the digest keeps the turn_end of that turn.
    desk.ok("send", relay="this", session=target, text="!fail boom", wait_seconds=30)
    error_message = poll("the error at once", lambda: delivered(21), seconds=30)[20]
    assert error_message.splitlines()[1:] == [f'[relay event] session "Build" {short(target)}: error "boom"']

    digest = poll("the cap digest", lambda: delivered(22), seconds=60)[21]
    assert digest.splitlines()[1:] == [
        CAP_HEADING,
        f'[relay event] session "Build" {short(target)}: turn_end (done) "echo: step 21"',
        f'[relay event] session "Build" {short(target)}: turn_end (done) "echo: step 22"',
        f'[relay event] session "Build" {short(target)}: turn_end (failed) "boom"',
    ]
    rows = {line.split("…): ", 1)[1]: row for row, line in held_lines(watcher.session_id)}
    capped = [rows['turn_end (done) "echo: step 21"'], rows['turn_end (done) "echo: step 22"'],
              rows['turn_end (failed) "boom"']]
    error = rows['error "boom"']
    assert {row.reason for row in capped} == {"cap"} and error.reason == "urgent"
    # One digest time for all three: CAP_DIGEST_SECONDS after the first held one; not before it.
    assert {row.due_at for row in capped} == {capped[0].created_at + timedelta(seconds=CAP_DIGEST_SECONDS)}
    assert all(row.delivered_at >= row.due_at for row in capped)
    # The error was delivered before the digest, with its own message.
    assert error.delivered_at < capped[0].delivered_at and error.message_id != capped[0].message_id
    with database.connection_context():
        wakeups = Message.select().where((Message.session == watcher.session_id) & (Message.role == "event")).count()
    assert wakeups == 22
