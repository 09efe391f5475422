"""`oar token` as a subprocess against a live relay: minting an agent token for a session, and
revoking one token or all of a session's, after which the token's next call is 401."""

from __future__ import annotations

import subprocess
import sys

from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay, relay_environment


def oar_token(relay: Relay, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oar", "token", *args], cwd=PROJECT, env=relay_environment(relay.config, FAST_TIMES),
        capture_output=True, text=True, timeout=120,
    )


def status_of(relay: Relay, token: str) -> int:
    status, _ = Agent(relay.url, token, "").call("list_sessions", relay="this")
    return status


def test_it_mints_an_agent_token_and_revokes_it(relay: Relay, desk: Agent) -> None:
    minted = oar_token(relay, "--session", desk.session_id)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert status_of(relay, token) == 200

    revoked = oar_token(relay, "--revoke", token)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == f"revoked an agent token of session {desk.session_id}"
    status, answer = Agent(relay.url, token, desk.session_id).call("list_sessions", relay="this")
    assert (status, answer["code"]) == (401, "REMOTE_RELAY_UNAUTHORIZED")
    assert status_of(relay, desk.token) == 200  # the session's other tokens stay valid

    again = oar_token(relay, "--revoke", token)
    assert again.returncode == 1
    assert "not an agent token on this relay" in again.stderr


def test_it_revokes_every_token_of_a_session(relay: Relay, desk: Agent) -> None:
    second = oar_token(relay, "--session", desk.session_id).stdout.strip()
    revoked = oar_token(relay, "--session", desk.session_id, "--revoke")
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == f"revoked 2 agent tokens of session {desk.session_id}"
    assert status_of(relay, desk.token) == 401
    assert status_of(relay, second) == 401


def test_it_refuses_unclear_revocations(relay: Relay, desk: Agent) -> None:
    alone = oar_token(relay, "--revoke")
    assert alone.returncode == 2 and "--session <id> --revoke" in alone.stderr
    both = oar_token(relay, "--session", desk.session_id, "--revoke", desk.token)
    assert both.returncode == 2 and "not both" in both.stderr
    unknown = oar_token(relay, "--session", "nosuchsession", "--revoke")
    assert unknown.returncode == 1 and "Nothing was changed." in unknown.stderr
    assert status_of(relay, desk.token) == 200


def test_the_owner_api_revokes_a_sessions_tokens(relay: Relay, desk: Agent) -> None:
    status, answer = relay.owner.request("DELETE", f"/api/v1/owner/sessions/{desk.session_id}/tokens")
    assert (status, answer) == (200, {"ok": True, "revoked": 1, "session": desk.session_id})
    assert status_of(relay, desk.token) == 401
    fresh = relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/tokens")["token"]
    assert status_of(relay, fresh) == 200
