"""HTTP clients for the owner and for agents, and a deadline-bound poll."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from oar.core.errors import STATUS_BY_CODE

# The approvals an owner grants a test's conversations ahead, so that tests about other things
# are not stopped by first-use cards (card tests ask for none).
PRE_APPROVED = ("create_sessions", "watch_sessions", "change_other_sessions", "end_other_sessions")


def poll(what: str, check: Callable[[], Any], seconds: float = 30, every: float = 0.05) -> Any:
    """`check()` until it returns something truthy, for at most `seconds` (a deadline, not a sleep)."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(every)


class Client:
    """A JSON client for one bearer token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.token = token

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        response = self.http.request(method, self.base_url + path, json=body, timeout=120, **kwargs)
        return response.status_code, response.json()

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", path)
        assert status == 200, body
        return body

    def post(self, path: str, body: Any = None) -> dict[str, Any]:
        status, body = self.request("POST", path, body)
        assert status in (200, 201), body
        return body

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        status, body = self.request("PATCH", path, body)
        assert status == 200, body
        return body


class Agent(Client):
    """An agent calling relay_tool as one session."""

    def __init__(self, base_url: str, token: str, session_id: str) -> None:
        super().__init__(base_url, token)
        self.session_id = session_id

    def call(self, action: str, **args: Any) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/api/v1/relay_tool", {"action": action, **args})

    def ok(self, action: str, **args: Any) -> dict[str, Any]:
        status, body = self.call(action, **args)
        assert status == 200 and body["ok"] is True, body
        return body

    def refused(self, action: str, code: str, **args: Any) -> dict[str, Any]:
        status, body = self.call(action, **args)
        assert body["ok"] is False and body["code"] == code, body
        assert status == STATUS_BY_CODE[code], (status, body)
        return body


class Owner(Client):
    """The owner's client of one relay, with the few things most tests ask of it."""

    def settings(self, **changes: Any) -> dict[str, Any]:
        return self.patch("/api/v1/owner/settings", changes)["settings"]

    def open_for_agents(self) -> None:
        """Agent sessions on and no rate limits: what every relay of the tests starts with."""
        self.settings(agent_sessions_enabled=True, rate_calls_per_minute=0, rate_writes_per_minute=0,
                      team_calls_per_minute=0, team_writes_per_minute=0)

    def conversation(self, title: str = "desk", approvals: tuple[str, ...] = PRE_APPROVED, **fields: Any) -> Agent:
        """An owner's conversation and the agent that works in it, granted `approvals` ahead."""
        body = self.post("/api/v1/owner/sessions", {"title": title, **fields})
        session_id = body["session"]["id"]
        if approvals:
            self.patch(f"/api/v1/owner/sessions/{session_id}", {"approvals": list(approvals)})
        return Agent(self.base_url, body["token"], session_id)

    def agent_for(self, session_id: str) -> Agent:
        token = self.post(f"/api/v1/owner/sessions/{session_id}/tokens")["token"]
        return Agent(self.base_url, token, session_id)


def decide_while_waiting(
    owner: Owner, agent: Agent, decision: str, action: str, *, meanwhile: Callable[[], None] | None = None, **args: Any
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """`agent` calls `action` over HTTP (no turn of its own: the waiting call is the card's live turn);
    the owner decides the card the call waits on, through the owner API, after `meanwhile` (what
    happens while the card waits) has run. Returns the card as the Inbox showed it, and the
    call's status and body."""
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(zip(("status", "body"), agent.call(action, **args), strict=True)))
    call.start()
    try:
        card = poll(f"the card of {action}", lambda: next((
            c for c in owner.get("/api/v1/owner/inbox")["cards"]
            if c["session"]["id"] == agent.session_id and c["action"] == action and not c["stoppedWaiting"]
        ), None))
        if meanwhile is not None:
            meanwhile()
        owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": decision})
    finally:
        call.join(60)
    assert not call.is_alive() and answer, f"{action} did not answer after the owner's {decision}"
    return card, answer["status"], answer["body"]


def denied_by_owner(owner: Owner, agent: Agent, action: str, **args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`action` waits on a card that the owner denies: returns the card and the refusal."""
    card, status, body = decide_while_waiting(owner, agent, "deny", action, **args)
    assert body["ok"] is False and body["code"] in ("REMOTE_RELAY_APPROVAL_DENIED", "REMOTE_RELAY_PERMISSION"), body
    assert status == 403, (status, body)
    return card, body
