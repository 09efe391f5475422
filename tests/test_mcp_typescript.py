"""MCP driven by the official TypeScript SDK clients (run by node), over Streamable HTTP at /mcp and over
stdio through `oar mcp`: v1 (@modelcontextprotocol/sdk, the handshake revisions) and v2
(@modelcontextprotocol/client, 2026-07-28). `.ci/run` installs both into tests/mcp_ts (npm); without
node or an SDK these tests are skipped, saying why.

The v2 client declares no Tasks extension: its codecs refuse a `resultType: "task"` answer and
`tasks/*` on 2026-07-28 (tasks need @modelcontextprotocol/ext-tasks with a request path of the
host's own), so tasks are driven by the Python SDK's client (tests/test_mcp_stdio.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from oar.actions.schema import relay_tool
from tests.support.clients import Agent, poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay

CLIENT = PROJECT / "tests" / "mcp_ts"
MCP_CAP = float(FAST_TIMES["MCP_MAX_WAIT_SECONDS"])

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def installed(package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not (CLIENT / "node_modules" / "@modelcontextprotocol" / package).is_dir(),
        reason=f"@modelcontextprotocol/{package} is not installed: npm ci --prefix tests/mcp_ts",
    )


def run_client(mode: str, relay: Relay, desk: Agent) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the client; allow the card its `create_session` waits on when it shows in the Inbox.
    Returns what the client printed and the card as the Inbox showed it."""
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    asker = relay.conversation("asker", approvals=())
    env = {
        **os.environ, "OAR_URL": relay.url, "OAR_TOKEN": desk.token, "SESSION_ID": session_id,
        "CARD_TOKEN": asker.token, "SLEEP_SECONDS": str(MCP_CAP + 6), "TIMEOUT_MS": str(int((MCP_CAP + 3) * 1000)),
        "PYTHON": sys.executable, "PROJECT": str(PROJECT),
    }
    client = subprocess.Popen(
        ["node", "client.mjs", mode], cwd=CLIENT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        card = poll("the card of the client's create_session", lambda: next((
            c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["session"]["id"] == asker.session_id
        ), None), seconds=90)
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
        stdout, stderr = client.communicate(timeout=120)
    finally:
        client.kill()
    assert client.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1]), card


@installed("sdk")
@pytest.mark.parametrize("mode", ["http", "stdio"])
def test_the_typescript_sdk_client(mode: str, relay: Relay, desk: Agent) -> None:
    out, card = run_client(mode, relay, desk)
    assert out["tools"] == [{"name": "relay_tool", "inputSchema": relay_tool().parameters}]
    assert out["listRelays"]["json"] == desk.ok("list_relays") and out["listRelays"]["isError"] is False
    assert out["listRelays"]["structured"] == out["listRelays"]["json"]
    assert out["bad"]["isError"] is True and out["bad"]["json"]["code"] == "REMOTE_RELAY_INVALID_INPUT"
    assert out["legacy"]["json"] == out["listRelays"]["json"]
    assert out["unknownTool"] is not None and out["unknownTool"]["code"] == -32602
    # The long call outlived the client's request timeout, kept alive by progress.
    assert out["streamed"]["json"]["status"] == "done", out["streamed"]
    assert out["progress"] >= 2 and out["streamedSeconds"] > (MCP_CAP + 3)
    assert out["capped"]["json"]["status"] in ("running", "queued")
    assert out["waited"]["json"]["status"] == "done"
    # The card's wait ended with the owner's Allow, and the new session answered in the same call.
    assert card["action"] == "create_session" and not card["stoppedWaiting"]
    assert out["carded"]["isError"] is False and out["carded"]["json"]["status"] == "done", out["carded"]
    assert out["carded"]["json"]["reply"]["text"] == "echo: carded"
    if mode == "http":
        assert out["protocolVersion"] == "2025-11-25"


@installed("client")
@pytest.mark.parametrize("mode", ["http", "stdio"])
def test_the_typescript_sdk_v2_client_on_2026_07_28(mode: str, relay: Relay, desk: Agent) -> None:
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    env = {**os.environ, "OAR_URL": relay.url, "OAR_TOKEN": desk.token, "SESSION_ID": session_id,
           "SLEEP_SECONDS": str(MCP_CAP + 3), "PYTHON": sys.executable, "PROJECT": str(PROJECT)}
    done = subprocess.run(["node", "client_modern.mjs", mode], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["era"], out["protocolVersion"]) == ("modern", "2026-07-28")
    assert out["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert out["capabilities"]["tools"] == {"listChanged": False} and "relay_tool" in out["instructions"]
    assert out["tools"] == ["relay_tool"]
    assert out["listRelays"] == {"isError": False, "json": desk.ok("list_relays")}
    # Progress kept the call alive past the relay's cap; without it the relay answered within the cap.
    assert out["streamed"]["json"]["status"] == "done" and out["progress"] >= 2, out["streamed"]
    assert out["capped"]["json"]["status"] in ("running", "queued")
