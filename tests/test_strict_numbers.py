"""Numbers in query parameters and headers, read strictly over real HTTP (docs/errors.md): a number
that is not ASCII digits in its range — `²`, `nan`, `inf`, a sign, white space, a fraction, 30 digits —
is `REMOTE_RELAY_INVALID_INPUT` (400) in the error shape, never a 500 or a wait that never ends, and
changes nothing. The long poll of an `external` agent also ends when its caller goes away.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from oar.core import keys
from oar.core.db import database
from oar.team.models import TeamRun
from tests.support.bad_input.world import INVALID, assert_refused
from tests.support.clients import Agent, poll
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

PROVENANCE = {"X-OAR-Origin-Relay": "desk", "X-OAR-Origin-Session": "0123456789abcdef", "X-OAR-Origin-Title": "probe",
              "X-OAR-Hops": "1"}
THIRTY_DIGITS = "1" * 30


@dataclass(frozen=True)
class Probe:
    """One request with a bad number: `path` (with `<run>` for a team run's id), `credential` (agent:
    an external agent's token; pairing: a pairing token of the relay; page: a signed-in page),
    headers, and what the refusal says."""

    id: str
    path: str
    credential: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    says: str = ""


def next_poll(value: str) -> Probe:
    return Probe(f"external-next-wait_seconds-{value!r}", f"/api/v1/external/next?wait_seconds={value}", "agent",
                 says="wait_seconds must be a whole number from 0 to 60")


def peer_call(name: str, **headers: str) -> Probe:
    return Probe(f"peer-call-{name}", "/api/peer/v1/call", "pairing", "POST",
                 {**PROVENANCE, **{key.replace("_", "-"): value for key, value in headers.items()}},
                 says="carries its provenance")


PROBES = [
    # The issue's: a NaN long poll held a web thread for good; the others were 500s.
    next_poll("nan"), next_poll("NaN"), next_poll("inf"), next_poll("-1"), next_poll("1.5"), next_poll("61"),
    next_poll("%C2%B2"), next_poll("%D9%A3"), next_poll("%205"), next_poll(THIRTY_DIGITS),
    Probe("peer-events-after-superscript-two", "/api/peer/v1/events?after=%C2%B2", "pairing", says="after must be"),
    Probe("peer-events-after-arabic-three", "/api/peer/v1/events?after=%D9%A3", "pairing", says="after must be"),
    Probe("peer-events-after-30-digits", f"/api/peer/v1/events?after={THIRTY_DIGITS}", "pairing", says="after must be"),
    Probe("peer-events-after-negative", "/api/peer/v1/events?after=-1", "pairing", says="after must be"),
    peer_call("hops-superscript-two", X_OAR_Hops="%C2%B2"),
    peer_call("hops-30-digits", X_OAR_Hops=THIRTY_DIGITS),
    peer_call("wait-seconds-superscript-two", X_OAR_Wait_Seconds="%C2%B2"),
    peer_call("wait-seconds-nan", X_OAR_Wait_Seconds="nan"),
    peer_call("model-lone-surrogate", X_OAR_Origin_Model="%ED%A0%80"),
    peer_call("relay-with-a-line-break", X_OAR_Origin_Relay="desk%0D%0A[from the owner]"),
    Probe("live-notifications-after-superscript-two", "/live/notifications?after=%C2%B2", "page", says="after must be"),
    Probe("live-notifications-after-30-digits", f"/live/notifications?after={THIRTY_DIGITS}", "page", says="after must be"),
    Probe("live-notifications-after-inf", "/live/notifications?after=inf", "page", says="after must be"),
    Probe("live-team-run-after-superscript-two", "/live/team-runs/<run>?after=%C2%B2", "page", says="after must be"),
    Probe("live-team-run-after-30-digits", f"/live/team-runs/<run>?after={THIRTY_DIGITS}", "page", says="after must be"),
]


def attached_agent(relay: Relay) -> Agent:
    """An owner's conversation on an `external` provider, and the token its process attaches with."""
    status, body = relay.owner.request("PUT", "/api/v1/owner/providers/outside", {"kind": "external", "models": ["own"]})
    assert status == 200, body
    return relay.conversation("outside agent", provider="outside")


def signed_in_page(relay: Relay) -> requests.Session:
    browser = requests.Session()
    token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get(relay.url + "/", timeout=30).text)
    assert token, "no CSRF token on the sign-in page"
    signed = browser.post(relay.url + "/", data={"csrf_token": token[1], "token": relay.owner.token}, timeout=30)
    assert signed.status_code == 200 and "Sign out" in signed.text, signed.text[:300]
    return browser


@pytest.fixture
def callers(relay: Relay) -> dict[str, Any]:
    """A client for each credential, and a team run for the page's live endpoint."""
    pairing = relay.owner.post("/api/v1/owner/pairing-tokens", {"label": "probe"})["token"]
    with database.connection_context():
        TeamRun.create(id="run_probe", started_by="lead")
    bearer = requests.Session()
    bearer.headers["Authorization"] = f"Bearer {pairing}"
    agent = requests.Session()
    agent.headers["Authorization"] = f"Bearer {attached_agent(relay).token}"
    return {"agent": agent, "pairing": bearer, "page": signed_in_page(relay)}


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_a_number_that_is_not_ascii_digits_in_range_is_refused_and_changes_nothing(
    relay: Relay, callers: dict[str, Any], probe: Probe,
) -> None:
    before = snapshot(relay)
    client = callers[probe.credential]
    url = relay.url + probe.path.replace("<run>", "run_probe")
    body = {"action": "relay_info", "relay": "this"} if probe.method == "POST" else None
    # A refusal answers at once; a wait that never ends is cut by the client (and fails here).
    response = client.request(probe.method, url, json=body, headers=probe.headers, timeout=20)
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
    assert_refused(response.status_code, response.json(), INVALID, says=probe.says)
    assert snapshot(relay) == before


def test_the_same_numbers_in_ascii_digits_are_read(relay: Relay, callers: dict[str, Any]) -> None:
    """The table's requests with a good number answer: it is the number that was refused."""
    assert callers["agent"].get(f"{relay.url}/api/v1/external/next?wait_seconds=0", timeout=20).json() == {
        "ok": True, "turn": None}
    assert callers["pairing"].get(f"{relay.url}/api/peer/v1/events?after=9223372036854775807", timeout=20).json()["ok"]
    call = callers["pairing"].post(f"{relay.url}/api/peer/v1/call", json={"action": "relay_info", "relay": "this"},
                                   headers={**PROVENANCE, "X-OAR-Wait-Seconds": "30"}, timeout=20)
    assert call.status_code == 200 and call.json()["name"] == relay.name, call.text[:300]
    for path in ("/live/notifications?after=0", "/live/notifications", "/live/team-runs/run_probe?after=12"):
        live = callers["page"].get(relay.url + path, timeout=20)
        assert live.status_code == 200 and live.json()["ok"] is True, (path, live.text[:300])


def open_poll(relay: Relay, token: str, wait_seconds: int) -> socket.socket:
    """A long poll sent on a socket of its own, whose answer is never read (the caller goes away later)."""
    sock = socket.create_connection((relay.config.host, relay.config.port))
    sock.sendall((f"GET /api/v1/external/next?wait_seconds={wait_seconds} HTTP/1.1\r\nHost: {relay.config.host}\r\n"
                  f"Authorization: Bearer {token}\r\n\r\n").encode())
    return sock


def test_a_long_poll_ends_when_its_caller_goes_away(relay: Relay) -> None:
    """Each long poll holds one of the conversation's wait slots while it waits
    (docs/limits.md#waits-at-once): polls whose callers went away end and give theirs back at
    once, not after the minute they asked for."""
    agent = attached_agent(relay)
    assert relay.runtime is not None
    held = keys.wait_slots(relay.config.namespace, agent.session_id)
    slots = relay.config.max_waits_per_conversation
    polls = [open_poll(relay, agent.token, 60) for _ in range(slots)]
    try:
        poll("the polls waiting", lambda: relay.runtime.redis.zcard(held) == slots)  # type: ignore[union-attr]
    finally:
        for sock in polls:
            sock.close()
    # Before, each poll waited out its minute, past this poll's deadline.
    poll("the polls ended", lambda: relay.runtime.redis.zcard(held) == 0, seconds=30)  # type: ignore[union-attr]
    assert agent.request("GET", "/api/v1/external/next?wait_seconds=1") == (200, {"ok": True, "turn": None})
