"""Cards for callers the relay does not run (docs/rules.md#where-a-card-waits): the waiting HTTP call is the
card's live turn; Allow/Deny answer it; a caller that goes away leaves a remembered Allow's card in the Inbox
(`stoppedWaiting`) and withdraws the others; a call nobody waits on fails closed."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch
from oar.approvals import cards
from oar.core.models import Card, Session
from oar.core.timeutil import utcnow
from oar.core.waiting import CallerWatch, watched_by
from tests.support.clients import Agent, decide_while_waiting, poll
from tests.support.relays import FAST_TIMES, WEB, Relay, own_relay
from tests.support.snapshots import snapshot


@pytest.fixture
def ops(relay: Relay) -> Agent:
    """A conversation whose agent has no remembered approvals yet, calling over HTTP (no turn of its own)."""
    return relay.conversation("ops", approvals=())


def inbox_cards(relay: Relay) -> list[dict[str, Any]]:
    return relay.owner.get("/api/v1/owner/inbox")["cards"]


def call_and_hang_up(agent: Agent, action: str, seconds: float = 1.0, **args: Any) -> None:
    """The agent's client gives up after `seconds` and closes its connection, as an MCP client or a script
    with a timeout does."""
    with pytest.raises(requests.exceptions.ReadTimeout):
        agent.http.post(agent.base_url + "/api/v1/relay_tool", json={"action": action, **args}, timeout=seconds)
    agent.http.close()


def test_allow_answers_the_waiting_call_and_is_remembered(relay: Relay, ops: Agent) -> None:
    card, status, body = decide_while_waiting(relay.owner, ops, "allow", "create_session", relay="this", text="hi",
                                              wait_seconds=30)
    assert status == 200 and body["ok"] is True and body["status"] == "done", body
    assert card["reason"] == "create_sessions" and card["session"]["id"] == ops.session_id
    assert card["stoppedWaiting"] is False
    assert Card.get_by_id(card["id"]).turn_id is None and Card.get_by_id(card["id"]).status == "allowed"
    assert relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]["approvals"] == ["create_sessions"]
    assert ops.ok("create_session", relay="this", text="again")["ok"] is True  # no card this time
    assert inbox_cards(relay) == []


def test_a_waiting_call_holds_a_lease_on_its_card(relay: Relay, ops: Agent) -> None:
    relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"mode": "plan"})
    card, status, body = decide_while_waiting(relay.owner, ops, "deny", "schedule", text="later", every_minutes=60)
    assert status == 403 and body["code"] == "REMOTE_RELAY_APPROVAL_DENIED"
    row = Card.get_by_id(card["id"])
    assert row.turn_id is None and row.waiter_until is not None and row.waiter_until > row.created_at
    assert ops.ok("list_schedules")["schedules"] == []


def test_a_caller_gone_withdraws_a_card_nobody_remembers(relay: Relay, ops: Agent) -> None:
    relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"mode": "plan", "approvals": list(cards.REMEMBERED)})
    call_and_hang_up(ops, "schedule", text="later", every_minutes=60)
    card = poll("the withdrawn card", lambda: Card.get_or_none((Card.session == ops.session_id) & (Card.status == "withdrawn")))
    assert card.reasons == ["mode"] and card.stopped_waiting_at is None
    assert inbox_cards(relay) == []
    assert ops.ok("list_schedules")["schedules"] == []


def test_a_caller_gone_keeps_a_remembered_allows_card_whose_allow_lets_the_next_call_through(
    relay: Relay, ops: Agent
) -> None:
    before = Session.select().count()
    call_and_hang_up(ops, "create_session", relay="this", text="first")
    shown = poll("the card marked stopped waiting", lambda: next((c for c in inbox_cards(relay) if c["stoppedWaiting"]), None))
    assert shown["reason"] == "create_sessions" and shown["status"] == "pending"
    assert Session.select().count() == before  # nothing was done
    view = relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")
    assert view["session"]["approvals"] == []
    decided = relay.owner.post(f"/api/v1/owner/cards/{shown['id']}", {"decision": "allow"})["card"]
    assert decided["status"] == "allowed"
    assert relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]["approvals"] == ["create_sessions"]
    assert Session.select().count() == before  # the Allow runs nothing by itself
    assert ops.ok("create_session", relay="this", text="first")["ok"] is True
    assert inbox_cards(relay) == []


def test_the_clock_ends_a_turnless_card_whose_lease_ran_out(relay: Relay, ops: Agent, desk: Agent) -> None:
    """A waiting process that died leaves a pending card with an old lease: the sweep takes its caller for gone."""
    now = utcnow()
    common = {"session": ops.session_id, "turn_id": None, "relay": "desk", "text": "t", "details": {},
              "created_at": now, "expires_at": now + timedelta(hours=8), "waiter_until": now - timedelta(seconds=1)}
    Card.create(id="card_lease_create", action="create_session", reasons=["create_sessions"], **common)
    Card.create(id="card_lease_mode", action="schedule", reasons=["mode"], **common)
    Card.create(id="card_lease_alive", action="schedule", reasons=["mode"],
                **{**common, "waiter_until": now + timedelta(seconds=30)})
    assert cards.sweep(now) == 2
    assert Card.get_by_id("card_lease_create").status == "pending"
    assert Card.get_by_id("card_lease_create").stopped_waiting_at is not None
    assert Card.get_by_id("card_lease_mode").status == "withdrawn"
    assert Card.get_by_id("card_lease_alive").status == "pending"
    assert cards.sweep(now) == 0  # a kept card stays until decided or expired
    assert cards.sweep(now + timedelta(hours=9)) == 2


def test_a_call_nobody_waits_on_fails_closed(relay: Relay, ops: Agent) -> None:
    """A call that cannot wait (no turn, and nobody reading the answer) keeps REMOTE_RELAY_NO_ACTIVE_TURN."""
    assert relay.runtime is not None
    before = snapshot(relay)
    ctx = CallContext(runtime=relay.runtime, caller_session=Session.get_by_id(ops.session_id), via="schedule")
    status, body = dispatch(ctx, {"action": "create_session", "relay": "this", "text": "x"})
    assert status == 403 and body["code"] == "REMOTE_RELAY_NO_ACTIVE_TURN", body
    assert body["error"] == (
        "create_session needs the owner's approval (the first session this conversation starts), and nobody "
        "waits on this call for the owner's answer. Nothing was created."
    )
    assert snapshot(relay) == before


def test_a_caller_gone_never_becomes_a_500(relay: Relay, ops: Agent, desk: Agent) -> None:
    assert relay.runtime is not None
    gone = CallerWatch(gone=lambda: True, every_seconds=0.01)
    ctx = CallContext(runtime=relay.runtime, caller_session=Session.get_by_id(ops.session_id), via="mcp")
    with watched_by(gone):
        status, body = dispatch(ctx, {"action": "create_session", "relay": "this", "text": "x"})
    assert status == 403 and body["code"] == "REMOTE_RELAY_APPROVAL_DENIED", body
    assert "stopped waiting" in body["error"] and "The card waits for the owner in the Inbox" in body["error"]
    assert [c["stoppedWaiting"] for c in inbox_cards(relay)] == [True]
    # A wait that is not a card's: what the call started goes on, and the answer says so.
    ctx = CallContext(runtime=relay.runtime, caller_session=Session.get_by_id(desk.session_id), via="mcp")
    target = desk.ok("create_session", relay="this", text="!sleep 5", wait_seconds=0)["session"]
    with watched_by(gone):
        status, body = dispatch(ctx, {"action": "send", "relay": "this", "session": target, "text": "!sleep 1"})
    assert status == 499 and body["code"] == "REMOTE_RELAY_CALLER_GONE", body


@pytest.mark.stack
def test_under_gunicorn_a_closed_connection_and_a_dead_web_process_are_seen(tmp_path: Path) -> None:
    """The web as in production (gunicorn gthread): a client that hangs up is seen through the request's socket;
    a web process killed mid-wait leaves a card the clock ends once its lease runs out."""
    times = {**FAST_TIMES, "CARD_WAITER_LEASE_SECONDS": "2"}
    with own_relay(tmp_path, times, web="process", worker=False, clock=True) as stack:
        relay = stack.relay
        assert relay is not None
        stack.bind_database()
        ops = relay.conversation("ops", approvals=())
        call_and_hang_up(ops, "create_session", relay="this", text="first")
        kept = poll("the card marked stopped waiting", lambda: [c for c in inbox_cards(relay) if c["stoppedWaiting"]])
        assert [c["reason"] for c in kept] == ["create_sessions"]

        relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"mode": "plan", "approvals": list(cards.REMEMBERED)})
        def wait_until_the_web_dies() -> None:
            with pytest.raises(requests.exceptions.ConnectionError):
                ops.call("schedule", text="later", every_minutes=60)

        waiting = threading.Thread(target=wait_until_the_web_dies, daemon=True)
        waiting.start()
        card = poll("the mode card", lambda: next((c for c in inbox_cards(relay) if c["reason"] == "mode"), None))
        stack.kill(WEB)
        stack.start_web()
        poll("the dead wait's card withdrawn", lambda: Card.get_by_id(card["id"]).status == "withdrawn", seconds=30)
        assert [c["id"] for c in inbox_cards(relay)] == [kept[0]["id"]]
        waiting.join(10)


def test_a_card_removed_while_its_call_waits_ends_the_wait_without_a_500(relay: Relay, ops: Agent) -> None:
    """A card row that disappears under a waiting call (removed by hand, or a database restored from a
    copy) reads as withdrawn: the call is refused in the error shape, with no traceback."""
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(zip(
        ("status", "body"), ops.call("create_session", relay="this", text="x", wait_seconds=30), strict=True)))
    call.start()
    try:
        card = poll("the card", lambda: next(iter(inbox_cards(relay)), None))
        Card.delete().where(Card.id == card["id"]).execute()
    finally:
        call.join(60)
    assert answer["status"] == 403 and answer["body"]["code"] == "REMOTE_RELAY_APPROVAL_DENIED", answer
    assert [s["id"] for s in relay.owner.get("/api/v1/owner/sessions")["sessions"]] == [ops.session_id]
