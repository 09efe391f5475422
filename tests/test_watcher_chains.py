"""Watchers that wake each other (docs/events.md#watchers-that-wake-each-other), over real HTTP with real workers.

Conversations that each watch `["all"]` see each other's turns. The `turn_end` of a turn an event
delivery started wakes no watcher, so one person's prompt makes one round of deliveries and then
the relay goes quiet. "Quiet" is read from the database: no turn queued or running, every event
ingested and every held event delivered, read twice around the same unchanged marks (the newest
event, the message count, the engine's cursor) so that no step slipped in between the reads.
"""

from __future__ import annotations

from typing import Any

from peewee import fn

from oar.core.db import database
from oar.core.models import Event, HeldEvent, Message, Setting
from oar.core.statuses import OPEN_TURN
from oar.watching.ingest import CURSOR_KEY
from tests.support.clients import Agent, poll
from tests.support.conversations import event_lines, write
from tests.support.relays import Relay

# A port nothing listens on: a provider there fails each turn at once.
CLOSED = "http://127.0.0.1:9/v1"
# Without the rule the watchers never go quiet (only the hourly cap slows them): the poll's deadline fails the test.
QUIET_WITHIN = 30


def _marks() -> tuple[int, int, int]:
    cursor = Setting.get_or_none(Setting.key == CURSOR_KEY)
    return (
        Event.select(fn.MAX(Event.seq)).scalar() or 0,
        Message.select().count(),
        int(cursor.value) if cursor is not None else 0,
    )


def quiet() -> bool:
    """Nothing is left to happen: no open turn, nothing un-ingested, nothing held undelivered."""
    with database.connection_context():
        before = _marks()
        open_turns = Message.select().where(Message.status.in_(OPEN_TURN)).exists()
        pending = HeldEvent.select().where(
            HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
        ).exists()
        after = _marks()
    newest_event, _messages, cursor = after
    return before == after and not open_turns and not pending and cursor >= newest_event


def deliveries(session_id: str) -> int:
    with database.connection_context():
        return Message.select().where((Message.session == session_id) & (Message.role == "event")).count()


def watching_all(relay: Relay, *titles: str, **fields: Any) -> list[Agent]:
    agents = [relay.conversation(title, **fields) for title in titles]
    for agent in agents:
        agent.ok("subscribe", sessions=["all"])
    return agents


def short(agent: Agent) -> str:
    return f"({agent.session_id[:4]}…)"


def test_two_watchers_of_all_get_one_round_and_then_go_quiet(relay: Relay) -> None:
    first, second = watching_all(relay, "First", "Second")
    write(relay, first.session_id, "look around")
    poll("the relay quiet", quiet, seconds=QUIET_WITHIN)
    # The person's turn in First wakes Second once; Second's reaction wakes nobody.
    assert deliveries(first.session_id) == 0
    [message] = event_lines(relay, second.session_id)
    assert message.splitlines()[1] == f'[relay event] session "First" {short(first)}: turn_end (done) "echo: look around"'
    with database.connection_context():
        turn_ends = [e for e in Event.select().where(Event.kind == "turn_end").order_by(Event.seq)]
    assert [(e.session_id, e.payload["startedBy"]) for e in turn_ends] == [
        (first.session_id, "user"), (second.session_id, "event"),
    ]
    # The held rows are the whole story: the suppressed turn_end was held for nobody.
    with database.connection_context():
        assert HeldEvent.select().where(HeldEvent.kind == "turn_end").count() == 1
    listed = first.ok("list_subscriptions")["subscriptions"]
    assert listed[0]["heldCount"] == 0 and listed[0]["nextDeliveryAt"] is None


def test_three_watchers_of_all_get_one_round_and_then_go_quiet(relay: Relay) -> None:
    first, second, third = watching_all(relay, "First", "Second", "Third")
    write(relay, first.session_id, "look around")
    poll("the relay quiet", quiet, seconds=QUIET_WITHIN)
    # First's turn reaches Second and Third once each; their reactions (A→B→C→A, A→C→B→A) reach no one.
    assert [deliveries(agent.session_id) for agent in (first, second, third)] == [0, 1, 1]
    for agent in (second, third):
        [message] = event_lines(relay, agent.session_id)
        assert f'session "First" {short(first)}: turn_end (done) "echo: look around"' in message
    # A second prompt, to Third: again one round.
    write(relay, third.session_id, "and again")
    poll("the relay quiet again", lambda: deliveries(first.session_id) == 1 and quiet(), seconds=QUIET_WITHIN)
    assert [deliveries(agent.session_id) for agent in (first, second, third)] == [1, 2, 1]


def test_an_error_of_an_event_started_turn_still_reaches_the_watchers(relay: Relay) -> None:
    status, answer = relay.owner.request("PUT", "/api/v1/owner/providers/down", {"kind": "chat", "base_url": CLOSED, "models": ["m"]})
    assert status == 200, answer
    [first] = watching_all(relay, "First")
    [failing] = watching_all(relay, "Failing", provider="down")
    write(relay, first.session_id, "look around")
    poll("the relay quiet", quiet, seconds=QUIET_WITHIN)
    # Failing's event-started turn fails: its error wakes First (its turn_end does not), and
    # First's reaction wakes no one.
    [to_failing] = event_lines(relay, failing.session_id)
    assert f'session "First" {short(first)}: turn_end (done) "echo: look around"' in to_failing
    [to_first] = event_lines(relay, first.session_id)
    lines = to_first.splitlines()[1:]
    assert lines[0].startswith(f'[relay event] session "Failing" {short(failing)}: error "') and "turn_end" not in to_first
    assert [deliveries(agent.session_id) for agent in (first, failing)] == [1, 1]
