"""Conversations whose agent works outside the relay (docs/sessions.md#agents-outside-the-relay):
what arrives waits for the agent, which takes it and answers prompts, over the agents' API and MCP."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.schedules import schedules
from oar.turns import outside
from tests.support.clients import Agent, poll
from tests.support.relays import Relay
from tests.support.snapshots import snapshot
from tests.test_mcp_modern import call_tool, modern, settled_task


def in_thread(work: Any) -> tuple[threading.Thread, dict[str, Any]]:
    answer: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: answer.update(body=work()))
    thread.start()
    return thread, answer


def owner_view(relay: Relay, agent: Agent) -> dict[str, Any]:
    return relay.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["session"]


def test_a_prompt_to_an_outside_agent_waits_for_it_and_its_reply_answers_the_sender(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    sender, answer = in_thread(lambda: desk.ok("send", relay="this", session=helper.session_id, text="what is 6 x 7?", wait_seconds=60))
    taken = helper.ok("take", wait_seconds=30)
    [item] = taken["items"]
    assert item["kind"] == "prompt" and item["text"] == "what is 6 x 7?" and item["from"]["session"] == desk.session_id
    replied = helper.ok("reply", message_id=item["message_id"], text="42")
    assert replied["status"] == "done" and replied["reply"]["text"] == "42"
    sender.join(30)
    assert answer["body"]["status"] == "done" and answer["body"]["reply"]["text"] == "42"  # no provider ran: no "echo: …"
    view = owner_view(relay, helper)
    assert view["agentOutside"] is True and view["outside"]["waiting"] == 0 and view["outside"]["takenAt"]


def test_what_arrives_while_the_agent_is_away_waits_in_order_one_prompt_at_a_time(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    other = relay.conversation("other")
    first = desk.ok("send", relay="this", session=helper.session_id, text="first", wait_seconds=0)
    second = other.ok("send", relay="this", session=helper.session_id, text="second", wait_seconds=0)
    assert owner_view(relay, helper)["outside"]["waiting"] == 2
    taken = helper.ok("take", wait_seconds=0)
    assert [item["text"] for item in taken["items"]] == ["first"]
    again = helper.ok("take", wait_seconds=0)
    assert again["items"] == [] and again["awaitingReply"]["message_id"] == first["message_id"]
    busy = desk.ok("wait", relay="this", session=helper.session_id, message_id=second["message_id"], wait_seconds=0)
    assert busy["status"] == "queued"
    helper.ok("reply", message_id=first["message_id"], text="one")
    [item] = helper.ok("take", wait_seconds=5)["items"]
    assert item["message_id"] == second["message_id"]
    helper.ok("reply", message_id=item["message_id"], text="two")
    done = other.ok("wait", relay="this", session=helper.session_id, message_id=second["message_id"], wait_seconds=5)
    assert done["reply"]["text"] == "two"


def test_events_of_its_subscriptions_and_its_schedules_are_notices_it_takes(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    build = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)
    helper.ok("subscribe", sessions=[build["session"]], events=["turn_end"])
    waiting, answer = in_thread(lambda: helper.ok("take", wait_seconds=60))
    desk.ok("send", relay="this", session=build["session"], text="step two", wait_seconds=0)
    waiting.join(60)
    [event] = answer["body"]["items"]
    assert event["kind"] == "event" and 'turn_end (done) "echo: step two"' in event["text"] and "reply" not in event
    # A schedule firing into it is taken the same way; no provider turn ever ran in it.
    due = utcnow() + timedelta(days=1)
    helper.ok("schedule", text="stand-up", at=due.strftime("%Y-%m-%dT%H:%M:%SZ"))
    with database.connection_context():
        assert dict(schedules.fire_due(relay.runtime, due + timedelta(seconds=1))) == {"fired": 1}
    [fired] = helper.ok("take", wait_seconds=60)["items"]
    assert fired["kind"] == "schedule" and fired["text"].endswith("stand-up")
    messages = desk.ok("read_session", relay="this", session=helper.session_id)["messages"]
    assert not any(message["role"] == "assistant" for message in messages)


def test_a_stopped_or_unanswered_prompt_ends_and_its_sender_is_told(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    sent = desk.ok("send", relay="this", session=helper.session_id, text="hold on", wait_seconds=0)
    helper.ok("take", wait_seconds=0)
    desk.ok("stop", relay="this", session=helper.session_id)
    stopped = desk.ok("wait", relay="this", session=helper.session_id, message_id=sent["message_id"], wait_seconds=10)
    assert stopped["status"] == "stopped"
    late = desk.ok("send", relay="this", session=helper.session_id, text="still there?", wait_seconds=0)
    helper.ok("take", wait_seconds=0)
    assert outside.expire_unanswered(relay.runtime, utcnow() + timedelta(hours=2)) == 1
    failed = desk.ok("wait", relay="this", session=helper.session_id, message_id=late["message_id"], wait_seconds=10)
    assert failed["status"] == "failed" and "did not answer" in failed["error"]


def test_the_first_mcp_request_of_a_fresh_conversation_makes_it_outside(relay: Relay, desk: Agent) -> None:
    fresh = relay.conversation("claude")
    used = relay.conversation("used")
    desk.ok("send", relay="this", session=used.session_id, text="hello", wait_seconds=30)
    for agent in (fresh, used):
        assert modern(relay, agent.token, "server/discover").status_code == 200
    assert owner_view(relay, fresh)["agentOutside"] is True
    assert owner_view(relay, used)["agentOutside"] is False  # a turn ran on its provider: the relay runs it
    relay.owner.patch(f"/api/v1/owner/sessions/{used.session_id}", {"agent_outside": True})
    assert owner_view(relay, used)["agentOutside"] is True


def test_taking_or_replying_wrongly_is_refused_and_changes_nothing(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    desk.ok("send", relay="this", session=helper.session_id, text="ping", wait_seconds=0)
    relay_run = relay.conversation("relay-run", agent_outside=False)
    before = snapshot(relay)
    refused = relay_run.refused("take", "REMOTE_RELAY_INVALID_INPUT", wait_seconds=0)
    assert "not outside the relay" in refused["error"] and refused["error"].endswith("Nothing was taken.")
    relay_run.refused("reply", "REMOTE_RELAY_INVALID_INPUT", message_id="msg_x", text="hi")
    helper.refused("reply", "REMOTE_RELAY_NOT_FOUND", message_id="msg_unknown", text="hi")
    queued = owner_view(relay, helper)
    assert queued["outside"]["waiting"] == 1
    [prompt] = [m for m in desk.ok("read_session", relay="this", session=helper.session_id)["messages"] if m["text"] == "ping"]
    helper.refused("reply", "REMOTE_RELAY_INVALID_INPUT", message_id=prompt["id"], text="not taken yet")
    helper.refused("take", "REMOTE_RELAY_INVALID_INPUT", wait_seconds=-1)
    helper.refused("take", "REMOTE_RELAY_INVALID_INPUT", max_items=0)
    assert snapshot(relay) == before


def test_an_mcp_client_waits_in_take_as_a_task_woken_when_a_prompt_arrives(relay: Relay, desk: Agent) -> None:
    helper = relay.conversation("helper")
    created = call_tool(relay, helper, {"action": "take", "wait_seconds": 120})
    assert created["resultType"] == "task" and created["status"] == "working"
    sent = desk.ok("send", relay="this", session=helper.session_id, text="wake up", wait_seconds=0)
    ended = settled_task(relay, helper, created["taskId"])
    [item] = ended["result"]["structuredContent"]["items"]
    assert item["message_id"] == sent["message_id"] and item["text"] == "wake up"
    poll("the prompt taken", lambda: desk.ok("wait", relay="this", session=helper.session_id,
                                              message_id=sent["message_id"], wait_seconds=0)["status"] == "running")
