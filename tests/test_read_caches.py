"""What the read path keeps between calls must not outlive a change (docs/decisions.md#reads-at-scale).

Against gunicorn as production runs it (several web processes, each with its own copy of the
owner settings): a settings change made through one process is seen by the next call in every
other, and a revoked agent token is refused at once, right after calls that verified it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay, relay_environment

pytestmark = pytest.mark.stack

# Calls made on fresh connections, so that they spread over the web processes.
CALLS = 24


@pytest.fixture(scope="module")
def gunicorn_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    folder: Path = tmp_path_factory.mktemp("caches")
    env = {"WEB_CONCURRENCY": "3", "OAR_WEB_THREADS": "4"}
    with own_relay(folder, web="process", worker=False, env=env) as stack:
        yield stack


def call_fresh(at: Relay, token: str, action: str, **args: object) -> tuple[int, dict[str, object]]:
    """One relay_tool call on a new connection (no keep-alive: the next may reach another process)."""
    response = requests.post(
        f"{at.url}/api/v1/relay_tool", json={"action": action, **args},
        headers={"Authorization": f"Bearer {token}", "Connection": "close"}, timeout=60,
    )
    return response.status_code, response.json()


def test_a_settings_change_is_seen_by_the_next_call_in_every_web_process(gunicorn_relay: RelayStack) -> None:
    relay = gunicorn_relay.relay
    assert relay is not None
    desk = relay.conversation("desk")
    # Every process reads (and keeps) the settings first.
    before = {call_fresh(relay, desk.token, "list_sessions", relay="this")[1].get("relay") for _ in range(CALLS)}
    assert before == {"desk"}

    relay.owner.patch("/api/v1/owner/settings", {"relay_name": "renamed"})
    after = [call_fresh(relay, desk.token, "list_sessions", relay="this") for _ in range(CALLS)]
    assert {(status, body.get("relay")) for status, body in after} == {(200, "renamed")}

    relay.owner.patch("/api/v1/owner/settings", {"agent_sessions_enabled": False})
    refused = [call_fresh(relay, desk.token, "read_session", relay="this", session=desk.session_id) for _ in range(CALLS)]
    assert {(status, body["code"]) for status, body in refused} == {(403, "REMOTE_RELAY_LOCAL_DISABLED")}
    relay.owner.patch("/api/v1/owner/settings", {"agent_sessions_enabled": True, "relay_name": "desk"})


def test_a_revoked_token_is_refused_at_once_right_after_it_was_used(gunicorn_relay: RelayStack) -> None:
    relay = gunicorn_relay.relay
    assert relay is not None
    ops = relay.conversation("ops")
    second = relay.owner.post(f"/api/v1/owner/sessions/{ops.session_id}/tokens")["token"]
    for token in (ops.token, second):
        assert {call_fresh(relay, token, "list_sessions", relay="this")[0] for _ in range(CALLS)} == {200}

    # By another process altogether (`oar token --revoke`), then by the owner API.
    revoked = subprocess.run(
        [sys.executable, "-m", "oar", "token", "--revoke", ops.token], cwd=PROJECT,
        env=relay_environment(relay.config, FAST_TIMES), capture_output=True, text=True, timeout=120,
    )
    assert revoked.returncode == 0, revoked.stderr
    answers = [call_fresh(relay, ops.token, "list_sessions", relay="this") for _ in range(CALLS)]
    assert {(status, body["code"]) for status, body in answers} == {(401, "REMOTE_RELAY_UNAUTHORIZED")}
    assert {call_fresh(relay, second, "list_sessions", relay="this")[0] for _ in range(CALLS)} == {200}

    status, body = relay.owner.request("DELETE", f"/api/v1/owner/sessions/{ops.session_id}/tokens")
    assert status == 200, body
    answers = [call_fresh(relay, second, "read_session", relay="this", session=ops.session_id) for _ in range(CALLS)]
    assert {(status, body["code"]) for status, body in answers} == {(401, "REMOTE_RELAY_UNAUTHORIZED")}
    assert Agent(relay.url, second, ops.session_id).call("list_sessions", relay="this")[0] == 401
