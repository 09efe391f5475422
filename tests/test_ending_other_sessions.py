"""Stopping and archiving a session the calling conversation did not start (docs/rules.md#when-a-card-is-asked):
the owner's conversations and other agents' sessions wait on the owner's Allow, remembered per conversation; a
Deny, or a caller that goes away, changes nothing; the sessions a conversation started need no card."""

from __future__ import annotations

from typing import Any

import psutil
import pytest
import requests

from oar.core.db import database
from oar.core.models import Message, Task
from tests.support.clients import Agent, decide_while_waiting, denied_by_owner, poll
from tests.support.conversations import write
from tests.support.relays import Relay
from tests.support.snapshots import snapshot


@pytest.fixture
def ops(relay: Relay) -> Agent:
    """An agent's conversation with no remembered Allows, calling over HTTP (its waiting call shows the card)."""
    return relay.conversation("ops", approvals=())


@pytest.fixture
def main(relay: Relay) -> Agent:
    """The owner's conversation the agent reaches for: a turn running and a background task running in it."""
    relay.settings(allow_shell_tasks=True)
    conversation = relay.conversation("main")
    write(relay, conversation.session_id, "!task sleep 120")
    poll("the task to start", lambda: _task_of(conversation.session_id))
    turn = write(relay, conversation.session_id, "!sleep 120")
    poll("the turn to run", lambda: _status(turn) == "running")
    return conversation


def _task_of(session_id: str) -> Task | None:
    with database.connection_context():
        task = Task.get_or_none(Task.session == session_id)
        return task if task is not None and task.pid else None


def _status(message_id: str) -> str:
    with database.connection_context():
        return Message.get(Message.id == message_id).status


def _running_turn(session_id: str) -> Message | None:
    with database.connection_context():
        return Message.get_or_none((Message.session == session_id) & (Message.status == "running"))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _steady(relay: Relay) -> dict[str, Any]:
    """The relay's state but the cards (each call asks one) and the times a running turn and task move on."""
    taken = snapshot(relay, heartbeats=False)
    taken["counts"].pop("Card")
    return {key: taken[key] for key in ("counts", "settings", "groups", "sessions")}


def _approvals(relay: Relay, session_id: str) -> list[str]:
    return relay.owner.get(f"/api/v1/owner/sessions/{session_id}")["session"]["approvals"]


def test_archiving_the_owners_conversation_waits_on_a_card_and_a_deny_changes_nothing(
    relay: Relay, ops: Agent, main: Agent
) -> None:
    task, turn = _task_of(main.session_id), _running_turn(main.session_id)
    assert task is not None and turn is not None
    before = _steady(relay)
    card, refused = denied_by_owner(relay.owner, ops, "archive", relay="this", session=main.session_id)
    name = relay.owner.get("/api/v1/owner/settings")["settings"]["relay_name"]
    assert card["reason"] == "end_other_sessions" and card["target"] == {"id": main.session_id, "title": "main"}
    assert card["text"] == (
        f'Allow the agent to archive session {main.session_id[:8]} on relay "{name}", which it did not start?'
    )
    assert card["lines"] == [
        "Now: 1 turn running · 1 background task running",
        "Archiving also ends its schedules, its subscriptions and the asks about it.",
    ]
    assert refused["code"] == "REMOTE_RELAY_APPROVAL_DENIED"
    assert refused["error"] == f"The owner denied archive (card {card['id']}). Nothing was archived."
    # Nothing changed: the conversation is not archived, its turn and its task run on.
    assert _steady(relay) == before
    assert _status(turn.id) == "running" and _alive(task.pid)
    with database.connection_context():
        assert Task.get_by_id(task.id).status == "running"
    assert _approvals(relay, ops.session_id) == []  # a Deny remembers nothing

    card, status, body = decide_while_waiting(relay.owner, ops, "allow", "archive", relay="this", session=main.session_id)
    assert status == 200 and body["archived"] is True, body
    assert relay.owner.get(f"/api/v1/owner/sessions/{main.session_id}")["session"]["archived"] is True
    poll("the turn to stop", lambda: _status(turn.id) == "stopped")
    poll("the task's process to be gone", lambda: not _alive(task.pid))
    assert _approvals(relay, ops.session_id) == ["end_other_sessions"]


def test_stopping_the_owners_conversation_waits_on_a_card_remembered_once_allowed(
    relay: Relay, ops: Agent, main: Agent
) -> None:
    turn = _running_turn(main.session_id)
    assert turn is not None
    before = _steady(relay)
    card, refused = denied_by_owner(relay.owner, ops, "stop", relay="this", session=main.session_id)
    assert card["reason"] == "end_other_sessions" and card["lines"] == ["Now: 1 turn running · 1 background task running"]
    assert refused["error"] == f"The owner denied stop (card {card['id']}). Nothing was stopped."
    assert _steady(relay) == before
    with database.connection_context():
        assert (row := Message.get(Message.id == turn.id)).status == "running" and not row.stop_requested

    card, status, body = decide_while_waiting(relay.owner, ops, "allow", "stop", relay="this", session=main.session_id)
    assert status == 200 and body["acknowledgement"] == "stop-queued", body
    poll("the turn to stop", lambda: _status(turn.id) == "stopped")
    # Remembered per conversation: the next stop or archive of a session it did not start asks no one.
    other = relay.conversation("other")
    assert ops.ok("stop", relay="this", session=other.session_id)["acknowledgement"] == "no-active-turn"
    assert ops.ok("archive", relay="this", session=other.session_id)["archived"] is True
    assert relay.owner.get("/api/v1/owner/inbox")["cards"] == []


def test_its_own_sessions_need_no_card_another_agents_do(relay: Relay, ops: Agent, desk: Agent) -> None:
    relay.owner.patch(f"/api/v1/owner/sessions/{ops.session_id}", {"approvals": ["create_sessions"]})
    mine = ops.ok("create_session", relay="this", text="!sleep 120", wait_seconds=0)
    poll("its turn to run", lambda: _status(mine["message_id"]) == "running")
    assert ops.ok("stop", relay="this", session=mine["session"])["acknowledgement"] == "stop-queued"
    assert ops.ok("archive", relay="this", session=mine["session"])["archived"] is True
    assert relay.owner.get("/api/v1/owner/inbox")["cards"] == []

    theirs = desk.ok("create_session", relay="this", text="hello")["session"]  # another agent's session
    before = _steady(relay)
    card, _refused = denied_by_owner(relay.owner, ops, "archive", relay="this", session=theirs)
    assert card["reason"] == "end_other_sessions"
    assert _steady(relay) == before
    assert _approvals(relay, ops.session_id) == ["create_sessions"]


def test_a_caller_gone_archives_nothing_and_its_card_waits_for_the_owner(relay: Relay, ops: Agent, main: Agent) -> None:
    before = _steady(relay)
    with pytest.raises(requests.exceptions.ReadTimeout):
        ops.http.post(ops.base_url + "/api/v1/relay_tool", timeout=1.0,
                      json={"action": "archive", "relay": "this", "session": main.session_id})
    ops.http.close()
    shown = poll("the card marked stopped waiting", lambda: next(
        (c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["stoppedWaiting"]), None
    ))
    assert shown["reason"] == "end_other_sessions"
    relay.owner.post(f"/api/v1/owner/cards/{shown['id']}", {"decision": "allow"})
    after = _steady(relay)
    assert after["counts"].pop("Approval") == before["counts"].pop("Approval") + 1  # the Allow is remembered
    assert after == before  # and runs nothing by itself
    assert relay.owner.get(f"/api/v1/owner/sessions/{main.session_id}")["session"]["archived"] is False
