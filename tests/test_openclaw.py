"""OpenClaw's session tools (docs/openclaw.md) over HTTP and over MCP with the official SDK client:
keys, sessions_list / sessions_history and visibility, sessions_send and its statuses, the send
policy, the reply ping-pong and the announce step, sessions_spawn with its announces and cleanups."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.openclaw import runs
from oar.openclaw.models import Run
from oar.openclaw.params import input_schema
from tests.support.clients import Agent, poll
from tests.support.relays import Relay


def oc(agent: Agent, tool: str, **args: Any) -> tuple[int, dict[str, Any]]:
    """A tool over HTTP: POST /api/v1/openclaw/<tool>."""
    return agent.request("POST", f"/api/v1/openclaw/{tool}", args)


def ok(agent: Agent, tool: str, **args: Any) -> dict[str, Any]:
    status, body = oc(agent, tool, **args)
    assert status == 200 and body["ok"] is True, (status, body)
    return body


def refused(agent: Agent, tool: str, status: int, shape: str, error: str, **args: Any) -> dict[str, Any]:
    got, body = oc(agent, tool, **args)
    assert (got, body["status"], body["error"]) == (status, shape, error), (got, body)
    return body


def over_mcp(relay: Relay, token: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[types.Tool], list[types.CallToolResult]]:
    """The SDK client on /mcp/openclaw: its tool list, then each call's result."""

    async def main() -> tuple[list[types.Tool], list[types.CallToolResult]]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
            async with streamable_http_client(f"{relay.url}/mcp/openclaw", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                    return tools, [await session.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def mcp_json(result: types.CallToolResult) -> dict[str, Any]:
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    body = json.loads(text.text)
    assert result.is_error is (body.get("status") in ("error", "forbidden"))
    return body


def child_of(agent: Agent, title: str) -> str:
    """A session the agent starts with relay_tool (agent-started: channel internal)."""
    return agent.ok("create_session", relay="this", text=f"hello from {title}", title=title, wait_seconds=30)["session"]


def test_it_lists_the_four_tools_over_mcp_with_schemas_from_the_table(relay: Relay, desk: Agent) -> None:
    tools, results = over_mcp(relay, desk.token, [("sessions_list", {}), ("sessions_history", {"sessionKey": "nope"})])
    assert [tool.name for tool in tools] == ["sessions_list", "sessions_history", "sessions_send", "sessions_spawn"]
    for tool in tools:
        assert tool.input_schema == input_schema(tool.name)
    listed = mcp_json(results[0])
    assert [row["key"] for row in listed["sessions"]] == ["main"]
    assert mcp_json(results[1]) == {"ok": False, "status": "error", "error": "Session not found: nope",
                                    "code": "REMOTE_RELAY_NOT_FOUND"}
    # The same call over HTTP gives the same answer, with the code's status.
    assert oc(desk, "sessions_history", sessionKey="nope") == (404, mcp_json(results[1]))


def test_it_names_sessions_by_key_and_shows_them_by_visibility(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "child")
    other = relay.conversation("other")
    listed = {row["sessionId"]: row for row in ok(desk, "sessions_list")["sessions"]}
    assert set(listed) == {desk.session_id, child}  # tree (the default): this conversation and what it started
    assert (listed[desk.session_id]["key"], listed[desk.session_id]["kind"], listed[desk.session_id]["channel"]) == (
        "main", "main", "webchat")
    assert (listed[child]["key"], listed[child]["kind"], listed[child]["channel"]) == (f"oar:{child}", "other", "internal")
    assert listed[child]["displayName"] == "child" and listed[child]["model"] == "echo-1"
    assert isinstance(listed[child]["updatedAt"], int) and listed[child]["sendPolicy"] is None
    assert "messages" not in listed[child]

    relay.settings(sessions_visibility="all")
    rows = ok(desk, "sessions_list", messageLimit=2)["sessions"]
    keys = {row["key"] for row in rows}
    assert keys == {"main", f"oar:{child}", f"oar:{other.session_id}"} and not keys & {"global", "unknown"}
    child_row = next(row for row in rows if row["sessionId"] == child)
    assert [m["role"] for m in child_row["messages"]] == ["user", "assistant"]
    assert child_row["messages"][1]["content"][0]["text"] == "echo: hello from child"
    assert [row["key"] for row in ok(desk, "sessions_list", kinds=["main"])["sessions"]] == ["main"]
    assert len(ok(desk, "sessions_list", limit=1)["sessions"]) == 1

    # History by key, by bare id, by the `global` alias; an agent sees its own conversation as main.
    by_key = ok(desk, "sessions_history", sessionKey=f"oar:{child}")
    assert by_key["sessionKey"] == f"oar:{child}"
    assert [r["content"][0]["text"] for r in by_key["messages"]][1] == "echo: hello from child"
    assert ok(desk, "sessions_history", sessionKey=child)["messages"] == by_key["messages"]
    assert ok(desk, "sessions_history", sessionKey="global")["sessionKey"] == "main"
    refused(desk, "sessions_history", 404, "error", "Session not found: unknown", sessionKey="unknown")

    # self, tree and agent: the reference's refusals.
    relay.settings(sessions_visibility="self")
    assert [row["key"] for row in ok(desk, "sessions_list")["sessions"]] == ["main"]
    refused(desk, "sessions_history", 403, "forbidden",
            "Session history visibility is restricted to the current session (tools.sessions.visibility=self).",
            sessionKey=f"oar:{child}")
    relay.settings(sessions_visibility="tree")
    assert ok(desk, "sessions_history", sessionKey=f"oar:{child}")["messages"]
    refused(desk, "sessions_history", 403, "forbidden",
            "Session history visibility is restricted to the current session tree (tools.sessions.visibility=tree).",
            sessionKey=other.session_id)
    relay.settings(sessions_visibility="agent")
    assert ok(desk, "sessions_history", sessionKey=other.session_id)  # the same agent (provider echo)


def test_history_leaves_tool_results_out_unless_asked(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "worker")
    desk.ok("send", relay="this", session=child, text='!relay {"action": "list_relays"}', wait_seconds=30)
    plain = ok(desk, "sessions_history", sessionKey=child)["messages"]
    assert "toolResult" not in {r["role"] for r in plain}
    with_tools = ok(desk, "sessions_history", sessionKey=child, includeTools=True)["messages"]
    tool_results = [r for r in with_tools if r["role"] == "toolResult"]
    assert [r["content"][0]["text"] for r in tool_results] == ["relay_tool list_relays · this"]
    assert len(ok(desk, "sessions_history", sessionKey=child, limit=1)["messages"]) == 1


def test_keys_of_spawned_children_and_schedules(relay: Relay, desk: Agent) -> None:
    spawned = ok(desk, "sessions_spawn", task="count to three", label="counter")
    key = spawned["childSessionKey"]
    assert key.startswith("agent:echo:subagent:") and spawned["status"] == "accepted"
    row = next(r for r in ok(desk, "sessions_list")["sessions"] if r["key"] == key)
    assert (row["kind"], row["channel"], row["displayName"]) == ("other", "internal", "counter")
    assert ok(desk, "sessions_history", sessionKey=key)["sessionId"] == row["sessionId"]
    child = child_of(desk, "timed")
    schedule = desk.ok("schedule", text="tick", session=child, every_minutes=60)["schedule_id"]
    keyed = {r["sessionId"]: r for r in ok(desk, "sessions_list")["sessions"]}
    assert (keyed[child]["key"], keyed[child]["kind"]) == (f"cron:{schedule}", "cron")
    assert ok(desk, "sessions_history", sessionKey=f"cron:{schedule}")["sessionId"] == child
    poll("the spawned run's end", lambda: _run(spawned["runId"]).step == "done")


def _run(run_id: str) -> Run:
    with database.connection_context():
        return Run.get_by_id(run_id)


def _sweep(relay: Relay, minutes: float = 0) -> dict[str, int]:
    assert relay.runtime is not None
    with database.connection_context():
        return runs.sweep(relay.runtime, utcnow() + timedelta(minutes=minutes))
