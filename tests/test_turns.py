"""Turns over real HTTP with real RQ workers: send, create_session, wait, stop, streaming."""

from __future__ import annotations

import json
import time

from tests.support.clients import Agent
from tests.support.relays import Relay


def test_it_creates_a_session_and_returns_the_echo_reply(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello there")
    assert body["status"] == "done"
    assert body["reply"]["text"] == "echo: hello there"
    assert body["reply"]["model"] == "echo-1"
    assert body["provider"] == "echo" and body["mode"] == "agent" and body["title"] == "hello there"
    assert body["openUrl"].endswith(f"/sessions/{body['session']}")
    assert body["summary"].startswith(f"create_session → desk: session {body['session'][:8]}")


def test_it_sends_to_a_session_and_runs_turns_in_order(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="first")
    session = created["session"]
    queued = [desk.ok("send", relay="this", session=session, text=f"!sleep 0.2\nn{i}", wait_seconds=0) for i in range(3)]
    assert all(q["status"] in ("queued", "running") for q in queued)
    results = [desk.ok("wait", relay="this", session=session, message_id=q["message_id"], wait_seconds=30) for q in queued]
    assert [r["reply"]["text"] for r in results] == ["echo: n0", "echo: n1", "echo: n2"]
    history = desk.ok("read_session", relay="this", session=session, last=50)["messages"]
    prompts = [m for m in history if m["role"] == "user"]
    replies = [m for m in history if m["role"] == "assistant"]
    assert len(prompts) == 4 and len(replies) == 4
    # Never two turns at once: each reply comes after its prompt and before the next prompt's start.
    assert [m["text"] for m in replies] == ["echo: first", "echo: n0", "echo: n1", "echo: n2"]


def test_it_shows_the_reply_in_flight_while_it_streams(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="!stream 20 150", wait_seconds=0)
    session = created["session"]
    seen = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        in_flight = desk.ok("read_session", relay="this", session=session)["inFlight"]
        if in_flight and "chunk 2" in in_flight["text"]:
            seen = in_flight["text"]
            break
        time.sleep(0.05)
    assert "chunk 2" in seen and "chunk 20" not in seen
    done = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert done["status"] == "done"
    assert done["reply"]["text"].endswith("chunk 20")


def test_it_stops_a_running_turn_at_once(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="!sleep 60", wait_seconds=0)
    session = created["session"]
    running = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=1)
    assert running["status"] in ("queued", "running")
    stop = desk.ok("stop", relay="this", session=session)
    assert stop["stopRequested"] is True
    started = time.monotonic()
    stopped = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=10)
    assert stopped["status"] == "stopped"
    assert time.monotonic() - started < 5
    again = desk.ok("stop", relay="this", session=session)
    assert again == {**again, "stopRequested": False, "acknowledgement": "no-active-turn"}


def test_it_reports_a_failed_turn(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="!fail the disk is full")
    assert body["status"] == "failed"
    assert body["error"] == "the disk is full"


def test_a_short_wait_returns_running_with_a_note(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="!sleep 3", wait_seconds=1)
    assert body["status"] in ("queued", "running")
    assert "Call wait with this message_id." in body["note"]
    assert body["progress"]["status"] in ("queued", "running")
    done = desk.ok("wait", relay="this", session=body["session"], message_id=body["message_id"], wait_seconds=30)
    assert done["status"] == "done"


def test_archiving_cancels_queued_prompts(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="!sleep 30", wait_seconds=0)
    session = created["session"]
    queued = desk.ok("send", relay="this", session=session, text="later", wait_seconds=0)
    assert desk.ok("archive", relay="this", session=session)["archived"] is True
    first = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=10)
    second = desk.ok("wait", relay="this", session=session, message_id=queued["message_id"], wait_seconds=10)
    assert first["status"] in ("stopped", "cancelled")
    assert second["status"] == "cancelled"
    refused = desk.refused("send", "REMOTE_RELAY_NOT_FOUND", relay="this", session=session, text="more")
    assert "is archived. Nothing was sent." in refused["error"]


def test_relay_tool_inside_a_turn_acts_as_that_session(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="hi")
    relay.owner.patch(f"/api/v1/owner/sessions/{created['session']}", {"may_create_sessions": True})
    body = desk.ok("send", relay="this", session=created["session"], text='!relay {"action": "list_relays"}')
    assert '"summary":"list_relays: 1 relay, 1 unlocked"' in body["reply"]["text"]


def test_worker_processes_run_many_turns_at_once(relay: Relay, desk: Agent) -> None:
    """Two worker processes run six turns concurrently: turns run in threads, not one per process."""
    targets = [relay.conversation(f"target {i}") for i in range(6)]
    sent = [desk.ok("send", relay="this", session=t.session_id, text="!sleep 2", wait_seconds=0) for t in targets]
    done = [desk.ok("wait", relay="this", session=s["session"], message_id=s["message_id"], wait_seconds=60) for s in sent]
    assert [d["status"] for d in done] == ["done"] * 6
    from oar.core.db import database
    from oar.core.models import Message

    with database.connection_context():
        turns = list(Message.select().where(Message.id.in_([s["message_id"] for s in sent])))
    # Every turn had started before the first one finished.
    assert max(t.started_at for t in turns) < min(t.completed_at for t in turns)


def test_a_turn_can_wait_on_another_sessions_turn(relay: Relay, desk: Agent) -> None:
    helper = desk.ok("create_session", relay="this", text="hi")["session"]
    inner = relay.conversation("inner")
    prompt = "!relay " + json.dumps({"action": "send", "relay": "this", "session": inner.session_id, "text": "inner question"})
    body = desk.ok("send", relay="this", session=helper, text=prompt, wait_seconds=60)
    assert body["status"] == "done"
    assert '"reply":{"text":"echo: inner question"' in body["reply"]["text"]
    read = relay.owner.get(f"/api/v1/owner/sessions/{inner.session_id}")
    prompt_message = next(m for m in read["messages"] if m["role"] == "user")
    assert prompt_message["from"]["kind"] == "agent" and prompt_message["from"]["session"] == helper
