"""OpenClaw's session tools (docs/openclaw.md) over HTTP and over MCP with the official SDK client:
keys, sessions_list / sessions_history and visibility, sessions_send and its statuses, the send
policy, the reply ping-pong and the announce step, sessions_spawn with its announces and cleanups."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import threading
from datetime import UTC, timedelta
from typing import Any

import anyio
import httpx2
import mcp.types as types
import requests
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from oar.core.db import database
from oar.core.models import Session
from oar.core.timeutil import utcnow
from oar.engine.reconciler import reconcile
from oar.openclaw import openclaw_runs
from oar.openclaw.models import Run
from oar.openclaw.params import input_schema
from oar.schedules import schedules
from tests.support.clients import Agent, poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay, relay_environment


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
    # The same call over HTTP gives the same answer, with the code's status; the routes are in the OpenAPI
    # document with the same schemas.
    assert oc(desk, "sessions_history", sessionKey="nope") == (404, mcp_json(results[1]))
    paths = requests.get(f"{relay.url}/api/v1/openapi.json", timeout=30).json()["paths"]
    for tool in tools:
        body = paths[f"/api/v1/openclaw/{tool.name}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == input_schema(tool.name)


def test_it_names_sessions_by_key_and_shows_them_by_visibility(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "child")
    other = relay.conversation("other")
    relay.settings(sessions_visibility="tree")
    listed = {row["sessionId"]: row for row in ok(desk, "sessions_list")["sessions"]}
    assert set(listed) == {desk.session_id, child}  # tree: this conversation and what it started
    assert (listed[desk.session_id]["key"], listed[desk.session_id]["kind"], listed[desk.session_id]["channel"]) == (
        "main", "main", "webchat")
    assert (listed[child]["key"], listed[child]["kind"], listed[child]["channel"]) == (f"oar:{child}", "other", "internal")
    assert listed[child]["displayName"] == "child" and listed[child]["model"] == "echo-1"
    # Times are milliseconds since the epoch, in UTC.
    assert abs(listed[child]["updatedAt"] - utcnow().replace(tzinfo=UTC).timestamp() * 1000) < 3_600_000
    assert listed[child]["sendPolicy"] is None
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
    with database.connection_context():  # "other" was last active two hours ago
        Session.update(last_activity_at=utcnow() - timedelta(hours=2)).where(Session.id == other.session_id).execute()
    assert f"oar:{other.session_id}" not in {row["key"] for row in ok(desk, "sessions_list", activeMinutes=60)["sessions"]}
    assert f"oar:{other.session_id}" in {row["key"] for row in ok(desk, "sessions_list", activeMinutes=180)["sessions"]}

    # History by key, by bare id, by the `global` alias; an agent sees its own conversation as main.
    by_key = ok(desk, "sessions_history", sessionKey=f"oar:{child}")
    assert by_key["sessionKey"] == f"oar:{child}"
    assert [r["content"][0]["text"] for r in by_key["messages"]][1] == "echo: hello from child"
    assert by_key["messages"][0]["timestamp"] <= by_key["messages"][1]["timestamp"] <= listed[child]["updatedAt"]
    by_id = ok(desk, "sessions_history", sessionKey=child)
    assert (by_id["sessionKey"], by_id["messages"]) == (f"oar:{child}", by_key["messages"])
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
        return openclaw_runs.sweep(relay.runtime, utcnow() + timedelta(minutes=minutes))


# sessions_send ---------------------------------------------------------------------------------------


def test_sessions_send_answers_ok_accepted_timeout_and_error(relay: Relay, desk: Agent) -> None:
    relay.settings(max_ping_pong_turns=0)  # here only the first run matters
    child = child_of(desk, "helper")
    sent = ok(desk, "sessions_send", sessionKey=f"oar:{child}", message="ping", timeoutSeconds=30)
    assert sent["status"] == "ok" and sent["reply"].endswith("\nping") and sent["runId"]
    assert sent["sessionKey"] == f"oar:{child}"
    accepted = ok(desk, "sessions_send", sessionKey=child, message="later", timeoutSeconds=0)
    assert set(accepted) >= {"runId", "status"} and accepted["status"] == "accepted"
    failed = ok(desk, "sessions_send", label="helper", message="!fail the build broke")
    assert (failed["status"], failed["error"]) == ("error", "the build broke")
    # Over MCP, with the SDK client: the same shape.
    _tools, results = over_mcp(relay, desk.token, [("sessions_send", {"sessionKey": child, "message": "via mcp"})])
    body = mcp_json(results[0])
    assert body["status"] == "ok" and body["reply"].endswith("\nvia mcp")

    # The message carries its provenance, in history and on the page; the target was told an agent wrote it.
    history = ok(desk, "sessions_history", sessionKey=child, limit=50)["messages"]
    ping = next(r for r in history if r["content"][0]["text"].endswith("\nping") and r["role"] == "user")
    assert ping["provenance"] == {"kind": "inter_session", "sourceSessionKey": f"oar:{desk.session_id}",
                                  "sourceTool": "sessions_send"}
    assert ping["content"][0]["text"].startswith(f"[inter-session message from oar:{desk.session_id} via sessions_send")
    page = _page(relay, f"/sessions/{child}")
    assert f"inter-session from oar:{desk.session_id} via sessions_send" in page

    slow = ok(desk, "sessions_send", sessionKey=child, message="!sleep 30", timeoutSeconds=1)
    assert slow["status"] == "timeout" and "the run goes on" in slow["error"] and slow["messageId"]
    desk.ok("archive", relay="this", session=child)  # the run went on: end it


def test_sessions_send_refusals_keep_the_reference_texts(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "target")
    other = relay.conversation("elsewhere")
    relay.settings(sessions_visibility="tree")
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"sessionKey": child}, 400, "error", "message required"),
        ({"sessionKey": child, "message": ""}, 400, "error", "message required"),
        ({"sessionKey": child, "message": 5}, 400, "error", "message required"),
        ({"message": "hi"}, 400, "error", "Either sessionKey or label is required"),
        ({"label": "nobody", "message": "hi"}, 404, "error", "No session found with label: nobody"),
        ({"sessionKey": "main", "message": "hi"}, 400, "error",
         "sessions_send cannot target the calling session; use your own reply instead"),
        ({"sessionKey": desk.session_id, "message": "hi"}, 400, "error",
         "sessions_send cannot target the calling session; use your own reply instead"),
        ({"sessionKey": "oar:nope", "message": "hi"}, 404, "error", "Session not found: oar:nope"),
        ({"sessionKey": other.session_id, "message": "hi"}, 403, "forbidden",
         "Session send visibility is restricted to the current session tree (tools.sessions.visibility=tree)."),
        ({"label": "elsewhere", "message": "hi"}, 404, "error", "No session found with label: elsewhere"),
    ]
    for bad in (-1, 1.5, "5", True, [1]):
        cases.append(({"sessionKey": child, "message": "hi", "timeoutSeconds": bad}, 400, "error",
                      "timeoutSeconds must be a non-negative integer"))
    for args, status, shape, error in cases:
        body = refused(desk, "sessions_send", status, shape, error, **args)
        assert body["runId"], args
    for bad_key in (5, "x" * 301):
        assert oc(desk, "sessions_send", sessionKey=bad_key, message="hi")[0] == 400
    for bad_label in (5, "x" * 201):
        assert oc(desk, "sessions_send", label=bad_label, message="hi")[0] == 400
    assert oc(desk, "sessions_send", sessionKey=child, message="x" * 100_001)[0] == 400
    # Nothing was sent by any of them.
    assert len(ok(desk, "sessions_history", sessionKey=child)["messages"]) == 2

    # self, and a session of another agent (a second provider) under `agent`.
    relay.settings(sessions_visibility="self")
    refused(desk, "sessions_send", 403, "forbidden",
            "Session send visibility is restricted to the current session (tools.sessions.visibility=self).",
            sessionKey=child, message="hi")
    relay.owner.request("PUT", "/api/v1/owner/providers/echo2", {"kind": "echo"})
    foreign = relay.conversation("foreign", provider="echo2")
    relay.settings(sessions_visibility="agent")
    refused(desk, "sessions_send", 403, "forbidden",
            "Session send visibility is restricted. Set tools.sessions.visibility=all to allow cross-agent access.",
            sessionKey=foreign.session_id, message="hi")
    assert ok(desk, "sessions_send", sessionKey=other.session_id, message="same agent", timeoutSeconds=0)["status"] == "accepted"


def test_the_send_policy_rules_and_a_sessions_own_override(relay: Relay, desk: Agent) -> None:
    relay.settings(max_ping_pong_turns=0)
    child = child_of(desk, "guarded")
    relay.settings(send_policy={"rules": [{"match": {"channel": "internal"}, "action": "deny"}], "default": "allow"})
    refused(desk, "sessions_send", 403, "forbidden", "Send blocked by session policy.", sessionKey=child, message="hi")
    assert relay.owner.request("PUT", f"/api/v1/owner/sessions/{child}/send-policy", {"send_policy": "allow"}) == (
        200, {"ok": True, "session": child, "sendPolicy": "allow"})
    assert ok(desk, "sessions_send", sessionKey=child, message="let in", timeoutSeconds=0)["status"] == "accepted"
    row = next(r for r in ok(desk, "sessions_list")["sessions"] if r["sessionId"] == child)
    assert row["sendPolicy"] == "allow"
    relay.owner.request("PUT", f"/api/v1/owner/sessions/{child}/send-policy", {"send_policy": "inherit"})
    relay.settings(send_policy={"rules": [{"match": {"keyPrefix": "oar:"}, "action": "allow"}], "default": "deny"})
    assert ok(desk, "sessions_send", sessionKey=child, message="allowed by rule", timeoutSeconds=0)["status"] == "accepted"
    relay.settings(send_policy={"rules": [{"match": {"keyPrefix": "oar:"}, "action": "allow"},
                                          {"match": {"chatType": "direct"}, "action": "deny"}], "default": "allow"})
    refused(desk, "sessions_send", 403, "forbidden", "Send blocked by session policy.", sessionKey=child, message="hi")
    # The page's form sets the same override.
    browser = _signed_in(relay)
    page = browser.get(f"{relay.url}/sessions/{child}", timeout=30).text
    assert '<option value="inherit" selected>' in page
    saved = browser.post(f"{relay.url}/sessions/{child}/send-policy", data={"csrf_token": _csrf(page), "send_policy": "deny"},
                         allow_redirects=False, timeout=30)
    assert saved.status_code in (302, 303), saved.text[:300]
    assert '<option value="deny" selected>' in browser.get(f"{relay.url}/sessions/{child}", timeout=30).text
    relay.settings(send_policy={"rules": [], "default": "allow"})
    refused(desk, "sessions_send", 403, "forbidden", "Send blocked by session policy.", sessionKey=child, message="hi")
    # Bad policies and overrides change nothing.
    for bad in ({"rules": [{"match": {"color": "red"}, "action": "deny"}]}, {"default": "maybe"}, [], {"rules": "x"}):
        assert relay.owner.request("PATCH", "/api/v1/owner/settings", {"send_policy": bad})[0] == 400
    assert relay.owner.request("PUT", f"/api/v1/owner/sessions/{child}/send-policy", {"send_policy": "sometimes"})[0] == 400
    assert relay.owner.request("PUT", "/api/v1/owner/sessions/nope/send-policy", {"send_policy": "allow"})[0] == 404
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["send_policy"] == {"rules": [], "default": "allow"}


def test_sessions_send_passes_the_dispatchers_rules(relay: Relay, desk: Agent) -> None:
    relay.settings(max_ping_pong_turns=0)
    child = child_of(desk, "ruled")
    relay.settings(rate_calls_per_minute=2)
    ok(desk, "sessions_send", sessionKey=child, message="one", timeoutSeconds=0)
    ok(desk, "sessions_send", sessionKey=child, message="two", timeoutSeconds=0)
    status, body = oc(desk, "sessions_send", sessionKey=child, message="three", timeoutSeconds=0)
    assert (status, body["status"], body["code"]) == (429, "error", "REMOTE_RELAY_RATE_LIMITED") and body["retryAfterSeconds"]
    relay.settings(rate_calls_per_minute=0, agent_sessions_enabled=False)
    status, body = oc(desk, "sessions_send", sessionKey=child, message="off", timeoutSeconds=0)
    assert (status, body["status"], body["code"]) == (403, "forbidden", "REMOTE_RELAY_LOCAL_DISABLED")
    status, body = oc(desk, "sessions_list")
    assert (status, body["code"]) == (403, "REMOTE_RELAY_LOCAL_DISABLED")
    # In ask mode every write waits on an approval card: the owner denies it.
    relay.settings(agent_sessions_enabled=True, sessions_visibility="all")
    asking = relay.conversation("asking", mode="ask")
    status, body = _decided(relay, asking, "deny", "sessions_send", sessionKey=child, message="may I?")
    assert (status, body["status"], body["code"]) == (403, "forbidden", "REMOTE_RELAY_APPROVAL_DENIED")
    # Loop protection: the 31st prompt to other sessions without a word from the owner waits for "keep going?".
    looper = relay.conversation("looper")
    for number in range(30):
        assert ok(looper, "sessions_send", sessionKey=child, message=str(number), timeoutSeconds=0)["status"] == "accepted"
    status, body = _decided(relay, looper, "allow", "sessions_send", sessionKey=child, message="31st", timeoutSeconds=0)
    assert (status, body["status"]) == (200, "accepted")


def _decided(relay: Relay, agent: Agent, decision: str, tool: str, **args: Any) -> tuple[int, dict[str, Any]]:
    """The tool's call over HTTP waits on a card; the owner decides it. Returns the call's answer."""
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(zip(("status", "body"), oc(agent, tool, **args), strict=True)))
    call.start()
    try:
        def card_or_answer() -> dict[str, Any] | None:
            # A call that answered without raising a card ends the wait with what it said.
            assert call.is_alive() or not answer, f"{tool} answered without a card: {answer}"
            return next((c for c in relay.owner.get("/api/v1/owner/inbox")["cards"]
                         if c["session"]["id"] == agent.session_id), None)

        card = poll("the card", card_or_answer)
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": decision})
    finally:
        call.join(60)
    return answer["status"], answer["body"]


def _csrf(page: str) -> str:
    return page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]


def _signed_in(relay: Relay) -> requests.Session:
    http = requests.Session()
    csrf = _csrf(http.get(relay.url + "/", timeout=30).text)
    http.post(relay.url + "/", data={"csrf_token": csrf, "token": relay.config.owner_token}, timeout=30)
    return http


def _page(relay: Relay, path: str) -> str:
    """A page of the owner's, signed in."""
    http = _signed_in(relay)
    return html.unescape(http.get(relay.url + path, timeout=30).text)


def test_the_settings_page_sets_the_tools_settings_and_refuses_bad_ones(relay: Relay) -> None:
    browser = _signed_in(relay)
    page = browser.get(f"{relay.url}/settings", timeout=30).text
    assert 'id="openclaw"' in page and 'name="max_ping_pong_turns" value="5"' in page
    form = {"csrf_token": _csrf(page), "max_ping_pong_turns": "2",
            "send_policy_default": "deny", "send_policy_rules": '[{"match": {"keyPrefix": "cron:"}, "action": "allow"}]',
            "spawn_allow_agents": "echo2, echo3", "spawn_archive_after_minutes": "90"}
    saved = browser.post(f"{relay.url}/settings/openclaw", data=form, allow_redirects=False, timeout=30)
    assert saved.status_code == 303 and saved.headers["Location"].endswith("/settings#openclaw"), saved.text[:300]
    stored = relay.owner.get("/api/v1/owner/settings")["settings"]
    try:
        assert (stored["max_ping_pong_turns"], stored["spawn_allow_agents"], stored["spawn_archive_after_minutes"]) == (
            2, ["echo2", "echo3"], 90)
        assert stored["send_policy"] == {"rules": [{"match": {"keyPrefix": "cron:"}, "action": "allow"}], "default": "deny"}
        # Bad values are refused by name and change nothing; a form without the CSRF token does nothing.
        for field, bad, says in (("max_ping_pong_turns", "9", "max_ping_pong_turns"),
                                 ("send_policy_rules", "[{not json", "must be JSON")):
            answer = browser.post(f"{relay.url}/settings/openclaw", data={**form, field: bad}, timeout=30)
            assert says in html.unescape(answer.text), (field, answer.text[:500])
            assert relay.owner.get("/api/v1/owner/settings")["settings"] == stored
        forged = browser.post(f"{relay.url}/settings/openclaw", data={**form, "csrf_token": "x", "max_ping_pong_turns": "0"},
                              allow_redirects=False, timeout=30)
        assert forged.status_code == 400 and relay.owner.get("/api/v1/owner/settings")["settings"] == stored
    finally:
        relay.settings(max_ping_pong_turns=5, send_policy={"rules": [], "default": "allow"},
                       spawn_allow_agents=[], spawn_archive_after_minutes=60)


# The reply ping-pong and the announce step ---------------------------------------------------------------


def _history(agent: Agent, key: str) -> list[dict[str, Any]]:
    return ok(agent, "sessions_history", sessionKey=key, limit=50)["messages"]


def _texts(records: list[dict[str, Any]], role: str) -> list[str]:
    return [r["content"][0]["text"] for r in records if r["role"] == role]


def _done(run_id: str) -> Run:
    return poll(f"run {run_id} done", lambda: (run := _run(run_id)).step == "done" and run)


def _settled(agent: Agent, key: str) -> list[dict[str, Any]]:
    """The session's history once no turn of it is open any more."""
    return poll(f"{key} settled", lambda: (h := _history(agent, key)) and all(
        r.get("status") in (None, "done", "failed", "stopped", "cancelled") for r in h) and h)


def test_an_mcp_caller_has_no_ping_pong_side_and_gets_the_announce(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "announcer")
    sent = ok(desk, "sessions_send", sessionKey=child, message="report", timeoutSeconds=30)
    run = _done(sent["runId"])
    assert (run.ping_pong_done, run.outcome, run.requester_runs) == (0, "announced", False)
    target = _settled(desk, child)
    announce_step = target[-2]["content"][0]["text"]
    assert announce_step.startswith(f"[agent-to-agent announce step of sessions_send run {sent['runId']}")
    assert "Original request (from oar:" in announce_step and "> report" in announce_step
    # The target's answer to the announce step is posted into the caller's conversation, with the request and replies.
    own = _settled(desk, "main")
    posted = next(r for r in own if r.get("relayRole") == "event")["content"][0]["text"]
    assert f"sessions_send announce from oar:{child} (run {sent['runId']})" in posted
    assert "Request:\n> report" in posted and "First reply:" in posted and "Latest reply:" in posted

    # ANNOUNCE_SKIP: the target's answer to the announce step; nothing is posted.
    quiet = ok(desk, "sessions_send", sessionKey=child, message="quietly\n!then ANNOUNCE_SKIP", timeoutSeconds=30)
    assert _done(quiet["runId"]).outcome == "skipped"
    assert _texts(_settled(desk, child), "assistant")[-1] == "ANNOUNCE_SKIP"
    assert len([r for r in _settled(desk, "main") if r.get("relayRole") == "event"]) == 1


def _requester(relay: Relay, title: str) -> Agent:
    """A conversation whose turns the relay runs (echo): its owner's message makes its agent call a tool."""
    return relay.conversation(title)


def _tell(relay: Relay, agent: Agent, text: str) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{agent.session_id}/messages", {"text": text})


def _run_of(agent: Agent) -> str:
    """The runId of the sessions_send the agent's own turn made (from its reply's `openclaw:` line)."""
    def found() -> str | None:
        for text in _texts(_history(agent, "main"), "assistant"):
            for line in text.splitlines():
                if line.startswith("openclaw: "):
                    return str(json.loads(line[len("openclaw: "):])["runId"])
        return None

    return poll("the tool call's runId", found)


def test_the_ping_pong_ends_on_reply_skip(relay: Relay, desk: Agent) -> None:
    relay.settings(sessions_visibility="all")
    target = relay.conversation("target")
    requester = _requester(relay, "requester")
    call = json.dumps({"sessionKey": f"oar:{target.session_id}", "message": "shall we?", "timeoutSeconds": 0})
    _tell(relay, requester, f"!openclaw sessions_send {call}\n!then REPLY_SKIP")
    run = _done(_run_of(requester))
    assert (run.requester_runs, run.ping_pong_done, run.max_ping_pong, run.outcome) == (True, 1, 5, "announced")
    own = _settled(requester, "main")
    step = next(r for r in own if r["content"][0]["text"].startswith("[inter-session message from oar:" + target.session_id))
    assert "agent-to-agent reply step 1 of 5" in step["content"][0]["text"]
    assert step["provenance"] == {"kind": "inter_session", "sourceSessionKey": f"oar:{target.session_id}",
                                  "sourceTool": "sessions_send"}
    assert "REPLY_SKIP" in _texts(own, "assistant")
    # The target had its first turn and the announce step only; its answer reached the requester.
    target_history = _settled(requester, f"oar:{target.session_id}")
    assert len(_texts(target_history, "user")) == 2
    assert any(r.get("relayRole") == "event" and "sessions_send announce from" in r["content"][0]["text"] for r in own)


def test_the_ping_pong_runs_to_the_limit_and_a_schedules_conversation_has_none(relay: Relay, desk: Agent) -> None:
    relay.settings(sessions_visibility="all", max_ping_pong_turns=3)
    target = relay.conversation("partner")
    requester = _requester(relay, "talker")
    call = json.dumps({"sessionKey": target.session_id, "message": "let's talk", "timeoutSeconds": 0})
    _tell(relay, requester, f"!openclaw sessions_send {call}")
    run = _done(_run_of(requester))
    assert (run.ping_pong_done, run.max_ping_pong, run.outcome) == (3, 3, "announced")
    steps = [t for t in _texts(_settled(requester, "main"), "user")
             if t.startswith("[inter-session") and "agent-to-agent reply step" in t]
    assert [s.split("reply step ")[1][:6] for s in steps] == ["1 of 3", "3 of 3"]  # the requester's turns: 1 and 3
    partner = _settled(requester, f"oar:{target.session_id}")
    assert ["2 of 3"] == [t.split("reply step ")[1][:6] for t in _texts(partner, "user")
                          if t.startswith("[inter-session") and "reply step" in t]
    assert _texts(partner, "user")[-1].startswith("[agent-to-agent announce step")

    # A conversation a schedule fires into gets no ping-pong.
    schedule = desk.ok("schedule", text="tick", session=target.session_id, every_minutes=60)["schedule_id"]
    call = json.dumps({"sessionKey": f"cron:{schedule}", "message": "from cron's view", "timeoutSeconds": 0})
    _tell(relay, requester, f"!openclaw sessions_send {call}")
    latest = poll("a second run", lambda: _runs_of(requester.session_id)[1:] and _runs_of(requester.session_id)[-1])
    assert (_done(latest.id).max_ping_pong, _done(latest.id).ping_pong_done) == (0, 0)
    # Nor does a call made by a turn a schedule started.
    call = json.dumps({"sessionKey": f"oar:{desk.session_id}", "message": "on schedule", "timeoutSeconds": 0})
    requester.ok("schedule", text=f"!openclaw sessions_send {call}", every_minutes=60)
    with database.connection_context():
        # This one, and the schedule into the partner set above.
        assert dict(schedules.fire_due(relay.runtime, utcnow() + timedelta(minutes=61))) == {"fired": 2}
    fired = poll("a third run", lambda: _runs_of(requester.session_id)[2:] and _runs_of(requester.session_id)[-1])
    assert (fired.target_session_id, _done(fired.id).max_ping_pong, _done(fired.id).ping_pong_done) == (desk.session_id, 0, 0)


def _runs_of(session_id: str) -> list[Run]:
    with database.connection_context():
        return list(Run.select().where(Run.requester_session_id == session_id).order_by(Run.created_at))


def test_the_sweep_takes_a_step_no_worker_took(relay: Relay, desk: Agent) -> None:
    relay.settings(max_ping_pong_turns=0)
    child = child_of(desk, "swept")
    sent = ok(desk, "sessions_send", sessionKey=child, message="once", timeoutSeconds=30)
    run = _done(sent["runId"])
    # As if the worker died between the turn's end and the run's step: the run still waits for that turn.
    with database.connection_context():
        Run.update(step="main", outcome=None, ended_at=None, awaiting_message_id=run.request_message_id).where(
            Run.id == run.id).execute()
    assert _sweep(relay)["advanced"] == 1
    assert _run(run.id).step in ("announce", "done")  # its announce step is queued (or already answered)
    assert _done(run.id).outcome == "announced"
    assert _sweep(relay)["advanced"] == 0


# sessions_spawn ----------------------------------------------------------------------------------------


def _announces(agent: Agent) -> list[str]:
    return [r["content"][0]["text"] for r in _settled(agent, "main")
            if r.get("relayRole") == "event" and "sessions_spawn: subagent" in r["content"][0]["text"]]


def test_spawn_announces_its_real_outcome_then_keeps_and_archives_or_deletes(relay: Relay, desk: Agent) -> None:
    kept = ok(desk, "sessions_spawn", task="sum the numbers", label="adder")
    assert set(kept) == {"ok", "status", "runId", "childSessionKey"} and kept["status"] == "accepted"
    run = _done(kept["runId"])
    assert run.outcome == "announced" and run.archive_at is not None
    announce = poll("the announce", lambda: _announces(desk))[0]
    assert f'subagent "adder" ({kept["childSessionKey"]}) finished.' in announce
    assert "\nStatus: ok\n" in announce and "Result: echo: [inter-session message from oar:" in announce
    assert "sum the numbers" in announce and f"Notes: run {kept['runId']}; ran " in announce
    assert "cleanup keep: the child is kept and archived later" in announce
    # Archived after spawn_archive_after_minutes (60), not before.
    assert _sweep(relay)["archived"] == 0
    assert _sweep(relay, minutes=61)["archived"] == 1
    assert kept["childSessionKey"] not in {r["key"] for r in ok(desk, "sessions_list")["sessions"]}

    failing = ok(desk, "sessions_spawn", task="!fail no compiler", cleanup="delete", label="builder")
    assert _done(failing["runId"]).outcome == "announced"
    announce = poll("the second announce", lambda: _announces(desk)[1:])[0]
    assert "\nStatus: error: no compiler\n" in announce and "cleanup delete: the child is deleted" in announce
    poll("the child deleted", lambda: oc(desk, "sessions_history", sessionKey=failing["childSessionKey"])[0] == 404)

    # ANNOUNCE_SKIP: nothing is posted. A reply left empty gives the last tool line as the Result.
    quiet = ok(desk, "sessions_spawn", task="!reply ANNOUNCE_SKIP")
    assert _done(quiet["runId"]).outcome == "silent"
    empty = ok(desk, "sessions_spawn", task='!reply\n!relay {"action": "list_relays"}', mode="session")
    assert _done(empty["runId"]).archive_at is None  # mode session: the child stays
    announce = poll("the third announce", lambda: _announces(desk)[2:])[0]
    assert "Result: relay_tool list_relays · this" in announce
    assert len(_announces(desk)) == 3


def test_spawn_times_out_by_runtimeoutseconds(relay: Relay, desk: Agent) -> None:
    slow = ok(desk, "sessions_spawn", task="!sleep 120", runTimeoutSeconds=30)
    poll("the child running", lambda: _history(desk, slow["childSessionKey"])[0].get("status") == "running")
    assert _sweep(relay)["timed_out"] == 0
    assert _sweep(relay, minutes=1)["timed_out"] == 1
    assert _done(slow["runId"]).timed_out
    assert "\nStatus: timeout\n" in poll("the announce", lambda: _announces(desk))[0]


def test_spawn_rules_nesting_agents_and_four_at_work(relay: Relay, desk: Agent) -> None:
    nested = json.dumps({"task": "grandchild"})
    parent = ok(desk, "sessions_spawn", task=f"!openclaw sessions_spawn {nested}")
    _done(parent["runId"])
    announce = poll("the announce", lambda: _announces(desk))[0]
    assert '"status":"forbidden"' in announce and "REMOTE_RELAY_NESTED_SESSION" in announce
    assert "A session that an agent created cannot create sessions." in announce
    child_id = _run(parent["runId"]).target_session_id
    # The owner lets it start sessions (and grants the first-start card ahead, as for the tests' own conversations).
    relay.owner.patch(f"/api/v1/owner/sessions/{child_id}", {"may_create_sessions": True, "approvals": ["create_sessions"]})
    allowed = desk.ok("send", relay="this", session=child_id, text=f"!openclaw sessions_spawn {nested}", wait_seconds=30)
    assert '"status":"accepted"' in allowed["reply"]["text"]

    relay.owner.request("PUT", "/api/v1/owner/providers/echo2", {"kind": "echo"})
    refused(desk, "sessions_spawn", 403, "forbidden", "agentId is not allowed for sessions_spawn (allowed: echo)",
            task="elsewhere", agentId="echo2")
    relay.settings(spawn_allow_agents=["echo2"])
    other_agent = ok(desk, "sessions_spawn", task="elsewhere", agentId="echo2")
    assert other_agent["childSessionKey"].startswith("agent:echo2:subagent:")
    relay.settings(tasks_without_sandbox=True)
    refused(desk, "sessions_spawn", 403, "forbidden",
            'sessions_spawn sandbox="require" needs a sandboxed target: this relay runs tasks outside its sandbox.',
            task="boxed", sandbox="require")
    relay.settings(tasks_without_sandbox=False)
    _done(other_agent["runId"])

    busy = [ok(desk, "sessions_spawn", task="!sleep 60") for _ in range(4)]
    body = refused(desk, "sessions_spawn", 409, "error",
                   "4 sessions you started are still working; wait for one to finish. Nothing was created.", task="fifth")
    assert body["code"] == "REMOTE_RELAY_SESSION_LIMIT" and body["runId"]
    for spawned in busy:
        desk.ok("archive", relay="this", session=_run(spawned["runId"]).target_session_id)


def test_bad_input_for_every_parameter(relay: Relay, desk: Agent) -> None:
    child = child_of(desk, "quiet")
    cases: dict[str, list[dict[str, Any]]] = {
        "sessions_list": [{"kinds": ["bogus"]}, {"kinds": "main"}, {"kinds": [3]}, {"limit": 0}, {"limit": 201},
                          {"limit": "x"}, {"activeMinutes": 0}, {"activeMinutes": 1.5}, {"messageLimit": -1},
                          {"messageLimit": 51}],
        "sessions_history": [{}, {"sessionKey": 7}, {"sessionKey": "x" * 301}, {"sessionKey": child, "limit": 0},
                             {"sessionKey": child, "limit": 51}, {"sessionKey": child, "includeTools": "yes"}],
        "sessions_spawn": [{}, {"task": 5}, {"task": "x" * 100_001}, {"task": "t", "label": "x" * 201},
                           {"task": "t", "agentId": 3}, {"task": "t", "model": ["m"]}, {"task": "t", "model": "gpt-none"},
                           {"task": "t", "thinking": "extreme"}, {"task": "t", "runTimeoutSeconds": -1},
                           {"task": "t", "runTimeoutSeconds": "soon"}, {"task": "t", "mode": "forever"},
                           {"task": "t", "cleanup": "burn"}, {"task": "t", "sandbox": "maybe"}],
    }
    for tool, bad in cases.items():
        for args in bad:
            status, body = oc(desk, tool, **args)
            assert status == 400 and body["status"] == "error" and body["error"], (tool, args, body)
    status, body = desk.request("POST", "/api/v1/openclaw/sessions_list", [1])
    assert (status, body["status"]) == (400, "error")
    # Nothing was started by any of them.
    assert [r["key"] for r in ok(desk, "sessions_list")["sessions"]] == ["main", f"oar:{child}"] or {
        r["key"] for r in ok(desk, "sessions_list")["sessions"]} == {"main", f"oar:{child}"}
    with database.connection_context():
        assert Run.select().count() == 0
    # Bad owner settings for the tools change nothing.
    for setting, value in (("max_ping_pong_turns", 6), ("max_ping_pong_turns", -1), ("sessions_visibility", "some"),
                           ("spawn_allow_agents", "echo"), ("spawn_archive_after_minutes", 0)):
        assert relay.owner.request("PATCH", "/api/v1/owner/settings", {setting: value})[0] == 400, setting


def test_the_cli_calls_the_tools(relay: Relay, desk: Agent) -> None:
    relay.settings(max_ping_pong_turns=0)
    child = child_of(desk, "from the shell")
    env = {**relay_environment(relay.config, FAST_TIMES), "OAR_TOKEN": desk.token, "OAR_URL": relay.url}

    def oar(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "oar", *args], cwd=PROJECT, env=env, capture_output=True,
                              text=True, timeout=120)

    sent = oar("call", "sessions_send", f"sessionKey=oar:{child}", "message=from the CLI", "timeoutSeconds=30")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["status"] == "ok"
    refused_call = oar("call", "sessions_send", f"sessionKey={child}", "message=x", "timeoutSeconds=-1")
    assert refused_call.returncode == 1 and json.loads(refused_call.stdout)["error"] == "timeoutSeconds must be a non-negative integer"
    shown = oar("call", "sessions_send", "--help")
    assert shown.returncode == 0 and "timeoutSeconds" in shown.stdout and "message" in shown.stdout
    assert "sessions_spawn" in oar("call", "--help").stdout


def test_a_spawned_run_whose_worker_is_killed_is_still_announced(recovery: Any) -> None:
    """The turn's worker dies: the reconciler fails the turn, the sweep takes the run's step that the
    worker never took, and the announce says the real outcome."""
    stack, relay, _redis = recovery
    desk = relay.conversation("desk")
    spawned = ok(desk, "sessions_spawn", task="!sleep 60", label="doomed")
    poll("the child running", lambda: _history(desk, spawned["childSessionKey"])[0].get("status") == "running", seconds=60)
    stack.kill("worker")
    with database.connection_context():
        poll("the orphaned turn failed", lambda: reconcile(relay.runtime, utcnow()).failed_turns, seconds=30)
    assert _run(spawned["runId"]).step == "main"  # no worker took the step
    assert _sweep(relay)["advanced"] == 1
    run = _run(spawned["runId"])
    assert (run.step, run.outcome) == ("done", "announced")
    posted = next(r for r in _history(desk, "main") if r.get("relayRole") == "event")["content"][0]["text"]
    assert "\nStatus: error: " in posted and 'subagent "doomed"' in posted
