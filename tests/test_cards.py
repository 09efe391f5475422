"""Approval cards (docs/rules.md#where-a-card-waits): the call waits on the owner's Allow or Deny, shown in a live turn."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oar.actions.catalog import load_actions
from oar.approvals.cards import DECLARED_REASONS, REMEMBERED, Request, reasons_for, seconds_waited
from oar.core.models import Card, Message, Session
from oar.core.timeutil import utcnow
from tests.support.clients import Agent, denied_by_owner, poll
from tests.support.conversations import decide, pending_card, relay_line, write
from tests.support.relays import FAST_TIMES, Relay, own_relay
from tests.support.snapshots import snapshot


def relay_result(relay: Relay, agent: Agent, session_id: str, message_id: str) -> dict[str, Any]:
    """The turn's reply, and the `relay: {…}` result its `!relay` line produced."""
    done = agent.ok("wait", relay="this", session=session_id, message_id=message_id, wait_seconds=30)
    assert done["status"] == "done", done
    line = next(line for line in done["reply"]["text"].splitlines() if line.startswith("relay: "))
    return json.loads(line[len("relay: "):])


@pytest.fixture
def ops(relay: Relay) -> Agent:
    """A conversation whose agent has no remembered approvals yet."""
    return relay.conversation("ops", approvals=())


def test_the_first_create_session_waits_for_allow_which_is_remembered(relay: Relay, ops: Agent, desk: Agent) -> None:
    prompt = write(relay, ops.session_id, relay_line(
        {"action": "create_session", "relay": "this", "text": "Build the docs site", "wait_seconds": 30}
    ))
    card = pending_card(relay)
    assert card["kind"] == "approval" and card["reason"] == "create_sessions" and card["action"] == "create_session"
    assert card["session"] == {"id": ops.session_id, "title": "ops"}
    assert card["text"].startswith("This agent wants to start sessions on this relay (echo, ")
    assert card["text"].endswith("). Sessions it starts use this relay's accounts.")
    assert card["lines"][0].startswith("Mode: agent · Provider: echo · Model: echo-1 · Folder: ")
    assert card["excerpt"] == "Build the docs site"
    # Hidden from other agents: reading ops shows no card, only the owner's Inbox does.
    assert desk.ok("read_session", relay="this", session=ops.session_id)["pendingQuestions"] == []
    assert relay.owner.get("/api/v1/owner/inbox")["questions"] == []

    assert decide(relay, card["id"], "allow")["status"] == "allowed"
    created = relay_result(relay, desk, ops.session_id, prompt)
    assert created["ok"] is True and created["status"] == "done", created
    view = relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]
    assert view["approvals"] == ["create_sessions"]

    again = write(relay, ops.session_id, relay_line({"action": "create_session", "relay": "this", "text": "more"}))
    assert relay_result(relay, desk, ops.session_id, again)["ok"] is True
    assert relay.owner.get("/api/v1/owner/inbox")["cards"] == []


def test_deny_refuses_the_call_and_creates_nothing(relay: Relay, ops: Agent, desk: Agent) -> None:
    before = Session.select().count()
    prompt = write(relay, ops.session_id, relay_line({"action": "create_session", "relay": "this", "text": "x"}))
    card = pending_card(relay)
    assert decide(relay, card["id"], "deny")["status"] == "denied"
    result = relay_result(relay, desk, ops.session_id, prompt)
    assert result["ok"] is False and result["code"] == "REMOTE_RELAY_APPROVAL_DENIED", result
    assert result["error"] == f"The owner denied create_session (card {card['id']}). Nothing was created."
    assert Session.select().count() == before
    assert relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]["approvals"] == []


def test_without_a_relay_run_turn_the_waiting_call_shows_the_card(relay: Relay, ops: Agent) -> None:
    # An HTTP caller's waiting call is its live turn (tests/test_waiting_cards.py); Deny refuses it, nothing changed.
    before = snapshot(relay)
    card, refused = denied_by_owner(relay.owner, ops, "create_session", relay="this", text="x")
    assert card["reason"] == "create_sessions" and card["stoppedWaiting"] is False
    assert refused["error"] == f"The owner denied create_session (card {card['id']}). Nothing was created."
    assert Card.get_by_id(card["id"]).turn_id is None
    after = snapshot(relay)
    assert after["counts"]["Card"] == before["counts"]["Card"] + 1
    assert {key: after[key] for key in ("sessions", "settings")} == {key: before[key] for key in ("sessions", "settings")}


WRITES = [
    ("send", {"session": "<other>", "text": "hi"}),
    ("create_session", {"text": "hi"}),
    ("update_session", {"session": "<other>", "title": "renamed"}),
    ("answer_question", {"question_id": "<question>", "answer": "yes"}),
    ("stop", {"session": "<other>"}),
    ("archive", {"session": "<other>"}),
    ("subscribe", {"sessions": ["<other>"]}),
    ("unsubscribe", {"subscription_id": "all"}),
    ("transfer_subscriptions", {"from": "<other>"}),
    ("schedule", {"text": "later", "every_minutes": 60}),
    ("unschedule", {"schedule_id": "<schedule>"}),
    ("ask", {"question": "Ship it?", "session": "<other>"}),
    ("withdraw", {"question_id": "<ask>"}),
]


@pytest.mark.parametrize("mode", ["ask", "plan"])
def test_in_ask_and_plan_mode_every_write_needs_a_card(relay: Relay, desk: Agent, mode: str) -> None:
    other = relay.conversation("other")
    other.ok("subscribe", sessions=[desk.session_id])
    schedule = desk.ok("schedule", text="tick", every_minutes=60)["schedule_id"]
    asked = desk.ok("ask", question="Deploy?")["question_id"]
    waiting = desk.ok("create_session", relay="this", text="!ask Which? | a | b", wait_seconds=30)
    assert waiting["status"] == "waiting_for_answer"
    refs = {"<other>": other.session_id, "<schedule>": schedule, "<ask>": asked,
            "<question>": waiting["pendingQuestions"][0]["id"]}
    relay.owner.patch(f"/api/v1/owner/sessions/{desk.session_id}", {"mode": mode})

    def steady() -> dict[str, Any]:  # without the rows the waiting turn's heartbeat keeps changing
        taken = snapshot(relay)
        taken["counts"].pop("Card")  # each write asks its card (and the owner denies it)
        return {key: taken[key] for key in ("counts", "settings", "groups", "sessions")}

    before = steady()
    for name, args in WRITES:
        filled = {k: ([refs.get(x, x) for x in v] if isinstance(v, list) else refs.get(v, v)) for k, v in args.items()}
        card, _refused = denied_by_owner(relay.owner, desk, name, relay="this", **filled)
        assert card["reason"] == ("transfer" if name == "transfer_subscriptions" else "mode"), (name, card)
    assert steady() == before
    # Reads need no card.
    assert desk.ok("list_sessions", relay="this")["sessions"]
    assert desk.ok("read_session", relay="this", session=other.session_id)["session"]["id"] == other.session_id


def test_a_card_in_plan_mode_shows_what_the_send_will_do(relay: Relay, desk: Agent) -> None:
    target = relay.conversation("target")
    relay.owner.patch(f"/api/v1/owner/sessions/{desk.session_id}", {"mode": "plan"})
    text = "Summarise the release notes " + "x" * 300
    prompt = write(relay, desk.session_id, relay_line(
        {"action": "send", "relay": "this", "session": target.session_id, "text": text, "wait_seconds": 30}
    ))
    card = pending_card(relay)
    assert card["reason"] == "mode" and card["target"] == {"id": target.session_id, "title": "target"}
    name = relay.owner.get("/api/v1/owner/settings")["settings"]["relay_name"]
    assert card["text"] == f'Allow the agent to send on relay "{name}" (session {target.session_id[:8]})?'
    assert card["lines"][0].startswith("Mode: plan · Provider: echo · Model: echo-1")
    assert len(card["excerpt"]) == 200 and card["excerpt"].endswith("…")
    decide(relay, card["id"], "allow")
    sent = relay_result(relay, target, desk.session_id, prompt)
    assert sent["ok"] is True and sent["status"] == "done"
    # The mode card is not remembered: the next write asks again.
    write(relay, desk.session_id, relay_line({"action": "stop", "relay": "this", "session": target.session_id}))
    assert pending_card(relay)["action"] == "stop"


def test_changing_a_session_it_did_not_start_asks_once(relay: Relay, ops: Agent, desk: Agent) -> None:
    first, second = relay.conversation("first"), relay.conversation("second")
    prompt = write(relay, ops.session_id, relay_line(
        {"action": "update_session", "relay": "this", "session": first.session_id, "model": "echo-2", "title": "One"}
    ))
    card = pending_card(relay)
    assert card["reason"] == "change_other_sessions"
    assert card["text"].startswith(f"Allow the agent to change session {first.session_id[:8]} on relay")
    assert card["lines"] == ["Model: echo-2 · Title: One"]
    decide(relay, card["id"], "deny")
    denied = relay_result(relay, desk, ops.session_id, prompt)
    assert denied["code"] == "REMOTE_RELAY_PERMISSION", denied
    assert denied["error"].endswith("Nothing was changed.")
    assert relay.owner.get(f"/api/v1/owner/sessions/{first.session_id}")["session"]["title"] == "first"

    prompt = write(relay, ops.session_id, relay_line(
        {"action": "update_session", "relay": "this", "session": first.session_id, "title": "One"}
    ))
    decide(relay, pending_card(relay)["id"], "allow")
    assert relay_result(relay, desk, ops.session_id, prompt)["changed"] == ["title"]
    # Remembered: another session it did not start changes without a card, even over HTTP.
    assert ops.ok("update_session", relay="this", session=second.session_id, title="Two")["changed"] == ["title"]


def test_a_card_ends_when_the_turn_it_waits_in_ends(relay: Relay, ops: Agent) -> None:
    """An agent's HTTP call during its conversation's running turn shows the card in that turn."""
    running = write(relay, ops.session_id, "!sleep 60")
    poll("the turn runs", lambda: Message.get(Message.id == running).status == "running")
    outcome: dict[str, Any] = {}
    call = threading.Thread(target=lambda: outcome.update(
        answer=ops.call("subscribe", sessions=["all"])
    ))
    call.start()
    card = pending_card(relay)
    assert card["reason"] == "watch_sessions" and card["lines"][0].startswith("Watch: all sessions · Events: ")
    relay.owner.post(f"/api/v1/owner/sessions/{ops.session_id}/archive")  # ends the turn
    call.join(timeout=30)
    status, body = outcome["answer"]
    assert status == 403 and body["code"] == "REMOTE_RELAY_APPROVAL_DENIED", body
    assert body["error"] == (
        f"The turn ended before the owner decided the approval card {card['id']}; it was withdrawn. Nothing was subscribed."
    )
    assert Card.get_by_id(card["id"]).status == "withdrawn"
    assert relay.owner.get("/api/v1/owner/inbox")["cards"] == []


def test_a_card_stays_with_its_waiting_call_when_the_turn_it_showed_in_ends_on_its_own(relay: Relay, ops: Agent) -> None:
    """The turn ends by itself (its question answered) while the HTTP call still waits: the call keeps its card."""
    asking = write(relay, ops.session_id, "!ask Which way? | left | right")
    question = poll("the question", lambda: (relay.owner.get("/api/v1/owner/inbox")["questions"] or [None])[0])
    outcome: dict[str, Any] = {}
    call = threading.Thread(target=lambda: outcome.update(answer=ops.call("subscribe", sessions=["all"])))
    call.start()
    card = pending_card(relay)
    assert Card.get_by_id(card["id"]).turn_id == asking  # shown in the conversation's live turn
    relay.owner.post(f"/api/v1/owner/questions/{question['id']}", {"choices": ["left"]})
    poll("the turn to end", lambda: Message.get(Message.id == asking).status == "done")
    poll("the card handed to the call", lambda: Card.get_by_id(card["id"]).turn_id is None)
    assert [c["id"] for c in relay.owner.get("/api/v1/owner/inbox")["cards"]] == [card["id"]]
    decide(relay, card["id"], "allow")
    call.join(timeout=30)
    status, body = outcome["answer"]
    assert status == 200 and body["ok"] is True, body
    assert Card.get_by_id(card["id"]).status == "allowed"


def test_the_31st_agent_prompt_asks_to_keep_going(relay: Relay, ops: Agent, desk: Agent) -> None:
    target = relay.conversation("target")
    relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"approvals": ["create_sessions"]})
    for _ in range(30):
        ops.ok("send", relay="this", session=target.session_id, text="ping", wait_seconds=0)
    card, _refused = denied_by_owner(relay.owner, ops, "send", relay="this", session=target.session_id, text="31st")
    assert card["reason"] == "loop"
    # A prompt from another agent starts a turn in ops without resetting its count.
    prompt = desk.ok("send", relay="this", session=ops.session_id, wait_seconds=0, text=relay_line(
        {"action": "send", "relay": "this", "session": target.session_id, "text": "31st", "wait_seconds": 0}
    ))["message_id"]
    card = pending_card(relay)
    assert card["reason"] == "loop"
    assert card["text"].startswith("This agent has sent 30 prompts to other sessions since you last wrote here. Keep going?")
    decide(relay, card["id"], "allow")
    sent = relay_result(relay, desk, ops.session_id, prompt)
    assert sent["ok"] is True
    assert Session.get_by_id(ops.session_id).loop_prompt_count == 1  # Allow started the count over


def test_transfer_subscriptions_always_asks_and_moves_them(relay: Relay, ops: Agent, desk: Agent) -> None:
    old = relay.conversation("old")
    watched = relay.conversation("watched")
    first = old.ok("subscribe", sessions=[watched.session_id], digest_minutes=30)["subscription_id"]
    old.ok("subscribe", sessions=["all"], events=["error"])
    relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"approvals": list(("watch_sessions",))})
    prompt = write(relay, ops.session_id, relay_line({"action": "transfer_subscriptions", "from": old.session_id}))
    card = pending_card(relay)
    assert card["reason"] == "transfer"
    assert card["text"] == f"Allow the agent to move the subscriptions of session {old.session_id[:8]} to this conversation?"
    assert card["lines"][0].startswith("2 subscriptions: ")
    decide(relay, card["id"], "allow")
    moved = relay_result(relay, desk, ops.session_id, prompt)
    assert moved["ok"] is True and len(moved["subscriptions"]) == 2
    mine = ops.ok("list_subscriptions")["subscriptions"]
    assert {s["scope"] for s in mine} == {"sessions", "all"}
    assert next(s for s in mine if s["scope"] == "sessions")["digestMinutes"] == 30
    ended = old.ok("list_subscriptions")["subscriptions"]
    assert {s["endReason"] for s in ended} == {"transferred"} and first in {s["id"] for s in ended}


def test_card_decisions_on_bad_cards_are_refused_and_change_nothing(relay: Relay, ops: Agent, desk: Agent) -> None:
    prompt = write(relay, ops.session_id, relay_line({"action": "create_session", "relay": "this", "text": "x"}))
    card = pending_card(relay)
    owner = relay.owner
    status, body = owner.request("POST", f"/api/v1/owner/cards/{card['id']}", {"decision": "maybe"})
    assert status == 400 and body["code"] == "REMOTE_RELAY_INVALID_INPUT"
    status, body = owner.request("POST", "/api/v1/owner/cards/card_000000000000", {"decision": "allow"})
    assert status == 404 and body["code"] == "REMOTE_RELAY_NOT_FOUND"
    assert Card.get_by_id(card["id"]).status == "pending"
    decide(relay, card["id"], "allow")
    before = snapshot(relay)
    status, body = owner.request("POST", f"/api/v1/owner/cards/{card['id']}", {"decision": "deny"})
    assert status == 400 and body["error"] == f"Card {card['id']} is allowed, not pending. Nothing was changed."
    assert relay_result(relay, desk, ops.session_id, prompt)["ok"] is True
    assert snapshot(relay)["counts"]["Card"] == before["counts"]["Card"]


@pytest.mark.stack
def test_an_undecided_card_expires(tmp_path: Path) -> None:
    with own_relay(tmp_path, {**FAST_TIMES, "CARD_EXPIRY_SECONDS": "2"}) as running:
        relay = running.relay
        assert relay is not None
        ops = relay.conversation("ops", approvals=())
        desk = relay.conversation("desk")
        prompt = write(relay, ops.session_id, relay_line({"action": "subscribe", "sessions": [desk.session_id]}))
        card = pending_card(relay)
        result = relay_result(relay, desk, ops.session_id, prompt)
        assert result["code"] == "REMOTE_RELAY_APPROVAL_DENIED", result
        assert result["error"] == (
            f"Nobody decided the approval card {card['id']} before it expired; it was withdrawn. Nothing was subscribed."
        )
        assert Card.get_by_id(card["id"]).status == "expired"
        assert ops.ok("list_subscriptions")["subscriptions"] == []


def test_which_calls_need_a_card_is_a_pure_decision() -> None:
    caller = Session(id="c" * 16, mode="agent", loop_prompt_count=0)
    mine = Session(id="m" * 16, created_by_session=caller.id)
    theirs = Session(id="t" * 16, created_by_session=None)

    def reasons(action: str, approved: set[str], **request: Any) -> list[str]:
        # The reasons each action declares in its spec (`@action(..., approval=...)`).
        return reasons_for(caller, Request(action, "", **request), load_actions()[action].approval, approved)

    assert reasons("send", set(), target=theirs, counted=True) == []
    assert reasons("create_session", set(), counted=True) == ["create_sessions"]
    assert reasons("create_session", {"create_sessions"}, counted=True) == []
    assert reasons("subscribe", {"create_sessions"}) == ["watch_sessions"]
    assert reasons("update_session", set(), target=mine) == []
    assert reasons("update_session", set(), target=theirs) == ["change_other_sessions"]
    for ending in ("stop", "archive"):
        assert reasons(ending, set(), target=mine) == []
        assert reasons(ending, set(), target=theirs) == ["end_other_sessions"]
        assert reasons(ending, {"change_other_sessions"}, target=theirs) == ["end_other_sessions"]
        assert reasons(ending, {"end_other_sessions"}, target=theirs) == []
    assert reasons("transfer_subscriptions", set(REMEMBERED)) == ["transfer"]
    caller.loop_prompt_count = 30
    assert reasons("send", set(), target=theirs, counted=True) == ["loop"]
    assert reasons("update_session", set(), target=mine, counted=False) == []
    caller.mode = "plan"
    assert reasons("create_session", set(), counted=True) == ["loop", "create_sessions", "mode"]
    assert reasons("stop", set(REMEMBERED), target=mine) == ["mode"]


def test_only_six_actions_declare_approval_reasons() -> None:
    declared = {name: spec.approval for name, spec in load_actions().items() if spec.approval}
    assert declared == {
        "create_session": ("create_sessions",),
        "subscribe": ("watch_sessions",),
        "update_session": ("change_other_sessions",),
        "stop": ("end_other_sessions",),
        "archive": ("end_other_sessions",),
        "transfer_subscriptions": ("transfer",),
    }
    assert set(REMEMBERED) <= set(DECLARED_REASONS)


def test_time_on_cards_is_what_the_turn_time_limit_leaves_out(relay: Relay, ops: Agent) -> None:
    now = utcnow()
    for number, (start, decided) in enumerate([(100, 40), (30, None)]):
        Card.create(
            id=f"card_{number:012d}", session=ops.session_id, turn_id="msg_turn", action="send", relay="this",
            text="?", created_at=now - timedelta(seconds=start), expires_at=now + timedelta(hours=8),
            decided_at=now - timedelta(seconds=decided) if decided is not None else None,
        )
    assert seconds_waited("msg_turn", now) == 60 + 30
    assert seconds_waited("msg_other", now) == 0
