"""The internal primitive that posts automated messages (events, schedules, answers)."""

from __future__ import annotations

import pytest

from oar.core.db import database
from oar.core.errors import ActionError
from oar.core.models import Message, Session
from oar.turns import automated, turns
from tests.support.clients import Agent
from tests.support.relays import Relay


def test_it_starts_a_turn_in_an_idle_conversation(relay: Relay, desk: Agent) -> None:
    with database.connection_context():
        message = automated.post(relay.runtime, desk.session_id, "[relay event] something happened", kind="event")
        settled = turns.wait_for(relay.runtime, message.id, 30)
    assert settled.status == "done"
    read = relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")
    event = next(m for m in read["messages"] if m["id"] == message.id)
    assert event["role"] == "event"
    assert event["from"]["kind"] == "event"


def test_it_queues_behind_a_running_turn_and_keeps_the_loop_count(relay: Relay, desk: Agent) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "!sleep 1"})
    with database.connection_context():
        Session.update(loop_prompt_count=7).where(Session.id == desk.session_id).execute()
        message = automated.post(relay.runtime, desk.session_id, "[relay schedule] wake up", kind="schedule", hops=1)
        assert Message.get(Message.id == message.id).status in ("queued", "running")
        settled = turns.wait_for(relay.runtime, message.id, 30)
        assert settled.status == "done" and settled.hops == 1
        # Automated messages are not the user writing: the loop count stays.
        assert Session.get_by_id(desk.session_id).loop_prompt_count == 7


def test_it_refuses_an_archived_conversation(relay: Relay, desk: Agent) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/archive")
    with database.connection_context(), pytest.raises(ActionError) as refused:
        automated.post(relay.runtime, desk.session_id, "[relay event] late", kind="event")
    assert refused.value.code == "REMOTE_RELAY_NOT_FOUND"
