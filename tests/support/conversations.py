"""What the owner does and sees in a conversation: write, read its events, decide its cards."""

from __future__ import annotations

import json
from typing import Any

from tests.support.clients import poll
from tests.support.relays import Relay


def write(relay: Relay, session_id: str, text: str) -> str:
    """The owner writes in the conversation; returns the prompt's message id."""
    return relay.owner.post(f"/api/v1/owner/sessions/{session_id}/messages", {"text": text})["message_id"]


def relay_line(call: dict[str, Any]) -> str:
    """A prompt line that makes the echo provider's turn call relay_tool with `call`."""
    return "!relay " + json.dumps(call)


def pending_card(relay: Relay) -> dict[str, Any]:
    return poll("a pending approval card", lambda: (relay.owner.get("/api/v1/owner/inbox")["cards"] or [None])[0])


def decide(relay: Relay, card_id: str, decision: str) -> dict[str, Any]:
    return relay.owner.post(f"/api/v1/owner/cards/{card_id}", {"decision": decision})["card"]


def messages_of(relay: Relay, session_id: str) -> list[dict[str, Any]]:
    return relay.owner.get(f"/api/v1/owner/sessions/{session_id}")["messages"]


def event_lines(relay: Relay, session_id: str) -> list[str]:
    """The texts of the events delivered into a session, oldest first."""
    return [m["text"] for m in messages_of(relay, session_id) if m["role"] == "event"]
