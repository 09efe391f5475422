"""MCP at /mcp, driven by the official Python SDK client, and its bad input over raw HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
import requests
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from oar.actions.catalog import ordered_actions
from oar.actions.schema import relay_tool
from tests.support.clients import Agent, poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay
from tests.support.servers import free_port

MCP_CAP = float(FAST_TIMES["MCP_MAX_WAIT_SECONDS"])


def with_session(relay: Relay, token: str | None, work: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """Connect the SDK client to the relay's /mcp (initialize included) and run `work`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def main() -> Any:
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as http:
            async with streamable_http_client(f"{relay.url}/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await work(session)

    return anyio.run(main)


def relay_json(result: types.CallToolResult) -> dict[str, Any]:
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    body = json.loads(text.text)
    assert result.structured_content == body
    assert result.is_error is (not body["ok"])
    return body


def rpc(relay: Relay, token: str | None, body: Any, **headers: str) -> requests.Response:
    sent = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(f"{relay.url}/mcp", data=data, headers=sent, timeout=30)


def test_lists_the_one_tool_with_the_registry_schema(relay: Relay, desk: Agent) -> None:
    async def work(session: ClientSession) -> Any:
        return (await session.list_tools()).tools, session.initialize_result

    tools, initialized = with_session(relay, desk.token, work)
    assert [tool.name for tool in tools] == ["relay_tool"]
    assert tools[0].input_schema == relay_tool().parameters
    assert tools[0].description == relay_tool().description
    assert tools[0].input_schema["properties"]["action"]["enum"] == [spec.name for spec in ordered_actions()]
    assert initialized.protocol_version == "2025-11-25"
    assert initialized.capabilities.tools is not None


def test_call_list_relays_a_bad_input_and_the_legacy_name(relay: Relay, desk: Agent) -> None:
    async def work(session: ClientSession) -> Any:
        listed = await session.call_tool("relay_tool", {"action": "list_relays"})
        bad = await session.call_tool("relay_tool", {"action": "send", "relay": "this", "session": "nope", "text": 5})
        legacy = await session.call_tool("remote_relay", {"action": "list_relays"})
        return listed, bad, legacy

    listed, bad, legacy = with_session(relay, desk.token, work)
    body = relay_json(listed)
    assert body == desk.ok("list_relays")
    assert listed.is_error is False
    refused = relay_json(bad)
    assert refused["ok"] is False and refused["code"] == "REMOTE_RELAY_INVALID_INPUT"
    assert refused == desk.call("send", relay="this", session="nope", text=5)[1]
    assert relay_json(legacy) == body


def test_no_token_or_a_bad_one_is_401_before_any_exchange(relay: Relay) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    for token in (None, "oar_s_not_a_token"):
        response = rpc(relay, token, initialize)
        assert response.status_code == 401
        assert response.json()["code"] == "REMOTE_RELAY_UNAUTHORIZED"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert requests.get(f"{relay.url}/mcp", timeout=10).status_code == 401


def test_malformed_messages_get_json_rpc_errors(relay: Relay, desk: Agent) -> None:
    token = desk.token
    cases: list[tuple[Any, int, int]] = [
        (b"{not json", 400, -32700),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], 400, -32600),
        ({"id": 1, "method": "ping"}, 400, -32600),
        ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}, 400, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, 400, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/frobnicate"}, 200, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}, 200, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}, 200, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 3}}, 200, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "relay_tool", "arguments": [1]}}, 200, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "no_such_tool"}}, 200, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, 200, -32602),
    ]
    for body, status, code in cases:
        response = rpc(relay, token, body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
        assert response.json()["jsonrpc"] == "2.0"
    # A request with an id keeps it in the error.
    assert rpc(relay, token, {"jsonrpc": "2.0", "id": "a", "method": "nope"}).json()["id"] == "a"
    # An unsupported protocol version header after initialize.
    response = rpc(relay, token, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, **{"MCP-Protocol-Version": "1999-01-01"})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32600
    # Notifications are accepted with 202 and no body; ping answers {}.
    assert rpc(relay, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    assert rpc(relay, token, {"jsonrpc": "2.0", "id": 2, "method": "ping"}).json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    # Version negotiation: an unknown version is answered with the newest the relay speaks.
    asked = {"jsonrpc": "2.0", "id": 3, "method": "initialize",
             "params": {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    assert rpc(relay, token, asked).json()["result"]["protocolVersion"] == "2025-11-25"
    asked["params"]["protocolVersion"] = "2025-03-26"
    assert rpc(relay, token, asked).json()["result"]["protocolVersion"] == "2025-03-26"
    # An oversized body, GET (no server stream) and DELETE (no sessions).
    huge = rpc(relay, token, b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"a" * 1_000_000 + b'"}')
    assert huge.status_code == 413 and huge.json()["error"]["code"] == -32600
    for method in ("GET", "DELETE"):
        response = requests.request(method, f"{relay.url}/mcp", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert response.status_code == 405 and response.headers["Allow"] == "POST"


def test_a_method_or_tool_name_holding_a_lone_surrogate_is_answered_on_every_endpoint(relay: Relay, desk: Agent) -> None:
    """The error quotes the name it did not find; a lone surrogate there is written as its escape."""
    headers = {"Authorization": f"Bearer {desk.token}", "Content-Type": "application/json"}
    for path in ("/mcp", "/mcp/team", "/mcp/openclaw"):
        method = requests.post(f"{relay.url}{path}", data=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/\\ud800"}',
                               headers=headers, timeout=30)
        assert method.status_code == 200, (path, method.text[:300])
        assert method.json()["error"] == {"code": -32601, "message": "Method not found: tools/\ud800"}
        assert b"\\ud800" in method.content
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x\udfff", "arguments": {}}}
        tool = requests.post(f"{relay.url}{path}", data=json.dumps(call), headers=headers, timeout=30)
        assert tool.status_code == 200 and tool.json()["error"]["code"] == -32602, (path, tool.text[:300])
        assert tool.json()["error"]["message"].startswith("Unknown tool: 'x\\udfff'")


def test_a_long_wait_streams_progress_with_a_token_and_is_capped_without(relay: Relay, desk: Agent) -> None:
    sleep = MCP_CAP + 3
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def work(session: ClientSession) -> Any:
        streamed = await session.call_tool(
            "relay_tool", {"action": "send", "relay": "this", "session": session_id, "text": f"!sleep {sleep}"},
            progress_callback=on_progress,
        )
        with anyio.fail_after(MCP_CAP + 2):
            capped = await session.call_tool(
                "relay_tool", {"action": "send", "relay": "this", "session": session_id, "text": f"!sleep {sleep}"}
            )
        body = relay_json(capped)
        progress.append(-1.0)  # the first call's progress ends here
        waited = await session.call_tool(
            "relay_tool", {"action": "wait", "relay": "this", "session": session_id,
                           "message_id": body["message_id"], "wait_seconds": 30},
            progress_callback=on_progress,
        )
        return streamed, body, waited

    streamed, capped, waited = with_session(relay, desk.token, work)
    finished = relay_json(streamed)
    assert finished["status"] == "done", finished
    first = progress[: progress.index(-1.0)]
    assert len(first) >= 2 and first == sorted(first) and len(set(first)) == len(first)
    assert capped["status"] in ("running", "queued")
    assert "call wait" in capped["note"].lower() and "MCP" in capped["note"]
    assert relay_json(waited)["status"] == "done"


def stdio_environment(relay: Relay, token: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("OAR_TOKEN", "OAR_URL")}
    env["OAR_URL"] = relay.url
    if token:
        env["OAR_TOKEN"] = token
    return env


def test_oar_mcp_over_stdio_lists_the_tool_and_forwards_calls(relay: Relay, desk: Agent) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "oar", "mcp"], env=stdio_environment(relay, desk.token), cwd=str(PROJECT)
    )
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def main() -> Any:
        with anyio.fail_after(60):
            async with stdio_client(server) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                    listed = await session.call_tool("relay_tool", {"action": "list_relays"})
                    bad = await session.call_tool("relay_tool", {"action": "wait", "relay": "this"})
                    long = await session.call_tool(
                        "relay_tool",
                        {"action": "send", "relay": "this", "session": session_id, "text": f"!sleep {MCP_CAP + 3}"},
                        progress_callback=on_progress,
                    )
                    return tools, listed, bad, long

    tools, listed, bad, long = anyio.run(main)
    assert [tool.name for tool in tools] == ["relay_tool"] and tools[0].input_schema == relay_tool().parameters
    assert relay_json(listed) == desk.ok("list_relays")
    assert relay_json(bad)["code"] == "REMOTE_RELAY_INVALID_INPUT"
    assert relay_json(long)["status"] == "done" and len(progress) >= 2


def test_oar_mcp_with_a_bad_or_missing_configuration_says_so_and_exits(relay: Relay) -> None:
    cases = [
        ({"OAR_URL": relay.url}, "set OAR_TOKEN"),
        ({"OAR_URL": relay.url, "OAR_TOKEN": "oar_s_wrong"}, "refused OAR_TOKEN"),
        ({"OAR_URL": f"http://127.0.0.1:{free_port()}", "OAR_TOKEN": "oar_s_wrong"}, "cannot reach the relay"),
    ]
    for env, says in cases:
        base = stdio_environment(relay, None)
        done = subprocess.run(
            [sys.executable, "-m", "oar", "mcp"], env={**base, **env}, cwd=PROJECT,
            stdin=subprocess.PIPE, capture_output=True, text=True, timeout=60,
        )
        assert done.returncode != 0 and says in done.stderr, (env, done.stderr)
        assert done.stdout == ""


def test_the_sdk_client_in_auto_mode_speaks_the_per_request_revision(relay: Relay, desk: Agent) -> None:
    """`mcp.Client` first probes `server/discover`; the relay answers it, and the client stays on
    2026-07-28 (no handshake); the same client pinned to the handshake era still gets 2025-11-25."""

    async def main(mode: str) -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {desk.token}"}) as http:
            async with Client(streamable_http_client(f"{relay.url}/mcp", http_client=http), mode=mode) as client:
                listed = await client.call_tool("relay_tool", {"action": "list_relays"})
                return client.protocol_version, listed

    for mode, expected in (("auto", "2026-07-28"), ("legacy", "2025-11-25")):
        version, listed = anyio.run(main, mode)
        assert version == expected
        assert relay_json(listed)["ok"] is True


def test_a_client_that_goes_away_ends_the_waiting_call(relay: Relay, desk: Agent, caplog: pytest.LogCaptureFixture) -> None:
    """The streamed call's thread sees the closed stream (CallerGone) and ends; nothing is logged as a failure."""
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "relay_tool", "_meta": {"progressToken": "p1"},
        "arguments": {"action": "send", "relay": "this", "session": session_id, "text": "!sleep 30"}}}
    headers = {"Authorization": f"Bearer {desk.token}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    with requests.post(f"{relay.url}/mcp", json=call, headers=headers, stream=True, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        lines = response.iter_lines(decode_unicode=True)
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[len("data: "):])["method"] == "notifications/progress"
    poll("the call's thread ends", lambda: not any(t.name == "mcp-call" for t in threading.enumerate()), seconds=20)
    assert not [record for record in caplog.records if record.levelname == "ERROR"]
    desk.ok("stop", relay="this", session=session_id)


def test_a_client_that_cuts_a_call_waiting_on_its_card_gets_nothing_done(relay: Relay) -> None:
    """An MCP client's own timeout (no progress token) cuts a call that waits for the owner: the relay sees
    the connection close, keeps the first-create card for the owner and creates nothing."""
    ops = relay.conversation("ops", approvals=())
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "relay_tool", "arguments": {"action": "create_session", "relay": "this", "text": "x"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {ops.token}"}
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(f"{relay.url}/mcp", data=json.dumps(call), headers=headers, timeout=1.0)
    kept = poll("the card marked stopped waiting", lambda: next(
        (c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["stoppedWaiting"]), None))
    assert kept["reason"] == "create_sessions" and kept["session"]["id"] == ops.session_id
    assert [s["id"] for s in relay.owner.get("/api/v1/owner/sessions")["sessions"]] == [ops.session_id]


def test_a_card_wait_without_a_progress_token_answers_before_the_clients_timeout(relay: Relay) -> None:
    """Without progress the client would cut the call at its own timeout: at the MCP cap the agent is
    told that the card waits for the owner, and the owner's Allow lets its next call through."""
    ops = relay.conversation("ops", approvals=())

    async def create(session: ClientSession) -> dict[str, Any]:
        return relay_json(await session.call_tool("relay_tool", {"action": "create_session", "relay": "this", "text": "x"}))

    body = with_session(relay, ops.token, create)
    assert body["code"] == "REMOTE_RELAY_APPROVAL_DENIED" and "waits for the owner in the Inbox" in body["error"], body
    kept = [c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["stoppedWaiting"]]
    assert [c["reason"] for c in kept] == ["create_sessions"]
    relay.owner.post(f"/api/v1/owner/cards/{kept[0]['id']}", {"decision": "allow"})
    assert with_session(relay, ops.token, create)["status"] == "done"



def test_a_card_wait_and_the_reply_wait_share_one_mcp_cap(relay: Relay) -> None:
    """Without progress the whole call must answer before the client's timeout: the time the call spent
    waiting for its card comes off the wait for the new session's reply (a cap per wait would let a
    card and then a reply take up to twice the cap)."""
    ops = relay.conversation("ops", approvals=())

    async def create(session: ClientSession) -> dict[str, Any]:
        return relay_json(await session.call_tool(
            "relay_tool", {"action": "create_session", "relay": "this", "text": f"!sleep {MCP_CAP + 5}", "wait_seconds": 600}))

    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(with_session(relay, ops.token, create)))
    call.start()
    try:
        card = poll("the card of the MCP call", lambda: next(
            (c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["session"]["id"] == ops.session_id), None))
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    finally:
        call.join(60)
    assert answer.get("ok") is True and answer["status"] == "running", answer
    note = answer.get("note", "")
    assert "instead of 600 s" in note, json.dumps(answer)
    assert int(note.split("waited ")[1].split(" s")[0]) < MCP_CAP, note


def test_a_reply_within_the_wait_carries_no_note_about_the_cap(relay: Relay, desk: Agent) -> None:
    """The cap is said only when the wait ran out before the reply (not on every capped call)."""

    async def create(session: ClientSession) -> dict[str, Any]:
        return relay_json(await session.call_tool(
            "relay_tool", {"action": "create_session", "relay": "this", "text": "quick", "wait_seconds": 600}))

    answer = with_session(relay, desk.token, create)
    assert answer["status"] == "done" and "note" not in answer, answer
