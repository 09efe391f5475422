"""`external` providers (docs/providers.md#external): an agent process attached with the session's token
long-polls for its next prompt and streams its reply back; the turn is an ordinary turn
(inFlight, usage, stop) run by the relay's worker."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.clients import Agent, poll
from tests.support.relays import Relay


@pytest.fixture
def attached(relay: Relay) -> Agent:
    """An owner's conversation on an external provider, and the token its process attaches with."""
    status, body = relay.owner.request("PUT", "/api/v1/owner/providers/outside", {"kind": "external", "models": ["own-model"]})
    assert status == 200, body
    return relay.conversation("outside agent", provider="outside")


def next_turn(agent: Agent, wait_seconds: float = 30) -> dict[str, Any] | None:
    status, body = agent.request("GET", f"/api/v1/external/next?wait_seconds={wait_seconds}")
    assert status == 200, body
    return body["turn"]


def post(agent: Agent, turn_id: str, **fields: Any) -> dict[str, Any]:
    status, body = agent.request("POST", f"/api/v1/external/turns/{turn_id}", fields)
    assert status == 200, body
    return body


def test_an_attached_process_gets_the_prompt_and_streams_the_reply(relay: Relay, desk: Agent, attached: Agent) -> None:
    assert next_turn(attached, wait_seconds=0) is None
    found: list[dict[str, Any]] = []
    poller = threading.Thread(target=lambda: found.append(next_turn(attached)))  # type: ignore[arg-type]
    poller.start()
    sent = desk.ok("send", relay="this", session=attached.session_id, text="summarise the logs", wait_seconds=0)
    poller.join(timeout=60)
    turn = found[0]
    assert turn is not None and turn["id"] == sent["message_id"] and turn["text"] == "summarise the logs"
    assert turn["model"] == "own-model"
    assert post(attached, turn["id"], text="The logs ", activity="read 3 files")["stop"] is False
    poll("reply in flight", lambda: (desk.ok("read_session", relay="this", session=attached.session_id)["inFlight"] or {}).get("text") == "The logs ")
    post(attached, turn["id"], text="look fine.", usage={"input_tokens": 30, "output_tokens": 4}, done=True)
    done = desk.ok("wait", relay="this", session=attached.session_id, message_id=sent["message_id"], wait_seconds=30)
    assert done["status"] == "done" and done["reply"]["text"] == "The logs look fine."
    assert next_turn(attached, wait_seconds=0) is None


def test_stop_tells_the_attached_process_to_stop_and_an_error_fails_the_turn(relay: Relay, desk: Agent, attached: Agent) -> None:
    sent = desk.ok("send", relay="this", session=attached.session_id, text="long job", wait_seconds=0)
    turn = next_turn(attached)
    assert turn is not None
    post(attached, turn["id"], text="working ")
    desk.ok("stop", relay="this", session=attached.session_id)
    stopped = desk.ok("wait", relay="this", session=attached.session_id, message_id=sent["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped"
    assert post(attached, turn["id"], text="more")["stop"] is True
    again = desk.ok("send", relay="this", session=attached.session_id, text="try", wait_seconds=0)
    turn = next_turn(attached)
    assert turn is not None and turn["id"] == again["message_id"]
    post(attached, turn["id"], error="the agent lost its workspace")
    failed = desk.ok("wait", relay="this", session=attached.session_id, message_id=again["message_id"], wait_seconds=30)
    assert failed["status"] == "failed" and failed["error"] == "the agent lost its workspace"


def test_only_external_sessions_attach_and_posts_are_checked(relay: Relay, desk: Agent, attached: Agent) -> None:
    status, body = desk.request("GET", "/api/v1/external/next?wait_seconds=0")
    assert status == 400 and "not on an external provider" in body["error"]
    status, body = attached.request("POST", "/api/v1/external/turns/msg_nope", {"text": "x"})
    assert status == 404
    status, body = attached.request("POST", "/api/v1/external/turns/msg_nope", {"colour": "x"})
    assert status == 400 and "does not take: colour" in body["error"]
