"""MCP's per-request revision (2026-07-28) and the Tasks extension at /mcp, over raw HTTP: the
envelope and header checks, `server/discover`, and tasks made, followed, cancelled and refused.
(The SDK clients drive it in tests/test_mcp.py, test_mcp_stdio.py and test_claude_code.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.clients import Agent, poll
from tests.support.relays import Relay, own_relay
from tests.support.snapshots import snapshot

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def meta(*, tasks: bool = False, version: str = MODERN) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    }


def modern(
    relay: Relay, token: str, method: str, params: dict[str, Any] | None = None, *, tasks: bool = False,
    name: str | None = None, version: str = MODERN, headers: dict[str, str] | None = None, path: str = "/mcp",
) -> requests.Response:
    """One request of the per-request revision, with its headers as a conforming client sends them."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta(tasks=tasks, version=version)}}
    sent = {
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json", "MCP-Protocol-Version": version, "Mcp-Method": method,
    }
    if name is not None:
        sent["Mcp-Name"] = name
    sent.update(headers or {})
    return requests.post(f"{relay.url}{path}", data=json.dumps(body), headers=sent, timeout=60)


def call_tool(relay: Relay, agent: Agent, arguments: dict[str, Any], *, tasks: bool = True) -> dict[str, Any]:
    answer = modern(relay, agent.token, "tools/call", {"name": "relay_tool", "arguments": arguments}, tasks=tasks, name="relay_tool")
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def task_get(relay: Relay, agent: Agent, task_id: str) -> requests.Response:
    return modern(relay, agent.token, "tasks/get", {"taskId": task_id}, tasks=True, name=task_id)


def settled_task(relay: Relay, agent: Agent, task_id: str, seconds: float = 60) -> dict[str, Any]:
    def look() -> dict[str, Any] | None:
        result = task_get(relay, agent, task_id).json()["result"]
        return result if result["status"] in ("completed", "failed", "cancelled") else None

    return poll(f"task {task_id} ended", look, seconds=seconds, every=0.1)


def test_it_discovers_the_revisions_and_the_tasks_extension(relay: Relay, desk: Agent) -> None:
    answer = modern(relay, desk.token, "server/discover")
    assert answer.status_code == 200
    result = answer.json()["result"]
    assert result["supportedVersions"][0] == MODERN and "2025-11-25" in result["supportedVersions"]
    assert result["capabilities"]["extensions"] == {TASKS: {}}
    assert result["resultType"] == "complete" and result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "oar-relay"
    listed = modern(relay, desk.token, "tools/list").json()["result"]
    assert [tool["name"] for tool in listed["tools"]] == ["relay_tool"] and listed["cacheScope"] == "private"
    # The team tools never wait: no tasks there.
    team = modern(relay, desk.token, "server/discover", path="/mcp/team").json()["result"]
    assert "extensions" not in team["capabilities"]


def test_a_call_without_the_extension_answers_within_its_request(relay: Relay, desk: Agent) -> None:
    result = call_tool(relay, desk, {"action": "list_relays"}, tasks=False)
    assert result["resultType"] == "complete" and result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"] == desk.ok("list_relays")
    # The text a model reads is the JSON without spaces.
    assert result["content"][0]["text"] == json.dumps(result["structuredContent"], ensure_ascii=False, separators=(",", ":"))


def test_bad_envelopes_and_headers_get_the_revisions_errors_and_change_nothing(relay: Relay, desk: Agent) -> None:
    modern(relay, desk.token, "server/discover")  # its first MCP request marks desk as an agent outside
    before = snapshot(relay)
    base = {"Authorization": f"Bearer {desk.token}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    no_meta = requests.post(f"{relay.url}/mcp", headers=base, timeout=30, data=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
    assert no_meta.status_code == 400 and no_meta.json()["error"]["code"] == -32602
    wrong_type = requests.post(f"{relay.url}/mcp", headers=base, timeout=30, data=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": "2026-07-28"}}))
    assert wrong_type.status_code == 400 and wrong_type.json()["error"]["code"] == -32602
    mismatch = modern(relay, desk.token, "tools/list", headers={"Mcp-Method": "tools/call"})
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020
    wrong_name = modern(relay, desk.token, "tools/call", {"name": "relay_tool", "arguments": {"action": "list_relays"}},
                        name="other_tool")
    assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
    unknown = modern(relay, desk.token, "tools/list", version="2099-01-01")
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert error["code"] == -32022 and error["data"]["requested"] == "2099-01-01" and MODERN in error["data"]["supported"]
    missing = modern(relay, desk.token, "resources/list")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == -32601
    no_capability = modern(relay, desk.token, "tasks/get", {"taskId": "mcptask_x"}, name="mcptask_x")
    assert no_capability.status_code == 400
    assert no_capability.json()["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    unknown_task = modern(relay, desk.token, "tasks/get", {"taskId": "mcptask_nope"}, tasks=True, name="mcptask_nope")
    assert unknown_task.status_code == 400 and unknown_task.json()["error"]["code"] == -32602
    assert snapshot(relay) == before


def test_a_waiting_send_runs_as_a_task_with_the_calls_own_result(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    created = call_tool(relay, desk, {"action": "send", "relay": "this", "session": session, "text": "!sleep 1\nnow"})
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["taskId"].startswith("mcptask_") and created["ttlMs"] > 0 and created["pollIntervalMs"] > 0
    ended = settled_task(relay, desk, created["taskId"])
    assert ended["status"] == "completed" and ended["resultType"] == "complete"
    body = ended["result"]["structuredContent"]
    assert body["ok"] is True and body["status"] == "done" and body["reply"]["text"].endswith("now")
    assert json.loads(ended["result"]["content"][0]["text"]) == body
    # A read answers within its request even from a client of the extension.
    read = call_tool(relay, desk, {"action": "list_sessions"})
    assert read["resultType"] == "complete"


def test_only_the_token_that_made_a_task_sees_or_cancels_it(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("other")
    session = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    created = call_tool(relay, desk, {"action": "send", "relay": "this", "session": session, "text": "!sleep 1"})
    for method in ("tasks/get", "tasks/cancel"):
        refused = modern(relay, other.token, method, {"taskId": created["taskId"]}, tasks=True, name=created["taskId"])
        assert refused.status_code == 400 and refused.json()["error"]["code"] == -32602, refused.text
    ended = settled_task(relay, desk, created["taskId"])
    assert ended["status"] == "completed"
    again = modern(relay, desk.token, "tasks/cancel", {"taskId": created["taskId"]}, tasks=True, name=created["taskId"])
    assert again.status_code == 400 and "already ended" in again.json()["error"]["message"]


def test_a_task_waiting_on_its_card_is_input_required_until_the_owner_decides(relay: Relay) -> None:
    agent = relay.conversation("fresh", approvals=())
    created = call_tool(relay, agent, {"action": "create_session", "relay": "this", "text": "hello"})
    task_id = created["taskId"]
    waiting = poll("input_required", lambda: (r := task_get(relay, agent, task_id).json()["result"])["status"] == "input_required" and r)
    assert "approval card card_" in waiting["statusMessage"] and waiting["inputRequests"] == {}
    card = relay.owner.get("/api/v1/owner/inbox")["cards"][0]
    relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    ended = settled_task(relay, agent, task_id)
    assert ended["status"] == "completed" and ended["result"]["structuredContent"]["reply"]["text"] == "echo: hello"


def test_cancelling_a_task_stops_the_turn_it_waits_on(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    created = call_tool(relay, desk, {"action": "send", "relay": "this", "session": session, "text": "!sleep 30"})
    task_id = created["taskId"]
    poll("the prompt written", lambda: desk.ok("read_session", relay="this", session=session)["messages"][-1]["role"] == "user")
    cancelled = modern(relay, desk.token, "tasks/cancel", {"taskId": task_id}, tasks=True, name=task_id)
    assert cancelled.status_code == 200 and cancelled.json()["result"]["resultType"] == "complete"
    ended = settled_task(relay, desk, task_id)
    assert ended["status"] == "cancelled"

    def prompt() -> dict[str, Any]:
        messages = desk.ok("read_session", relay="this", session=session)["messages"]
        return next(m for m in messages if m["text"] == "!sleep 30")

    poll("the turn stopped", lambda: prompt()["status"] == "stopped")


def test_listening_to_a_task_streams_its_status_until_it_ends(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    created = call_tool(relay, desk, {"action": "send", "relay": "this", "session": session, "text": "!sleep 1\nlater"})
    stranger = "mcptask_" + "x" * 32
    body = {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "notifications": {"tasksStatus": [created["taskId"], stranger]}, "_meta": meta(tasks=True)}}
    headers = {"Authorization": f"Bearer {desk.token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"}
    messages = []
    with requests.post(f"{relay.url}/mcp", data=json.dumps(body), headers=headers, timeout=60, stream=True) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        for line in stream.iter_lines(decode_unicode=True):
            if line.startswith("data: "):
                messages.append(json.loads(line[len("data: "):]))
                if "method" not in messages[-1]:
                    break
    acknowledged, *statuses, ended = messages
    assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
    assert acknowledged["params"]["notifications"] == {"tasksStatus": [created["taskId"]]}  # not another's or unknown
    assert all(m["method"] == "notifications/tasks/status" and m["params"]["taskId"] == created["taskId"] for m in statuses)
    assert statuses[-1]["params"]["status"] == "completed"
    assert statuses[-1]["params"]["result"]["structuredContent"]["reply"]["text"].endswith("later")
    assert ended == {"jsonrpc": "2.0", "id": 7,
                     "result": {"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": "7"}}}
    no_capability = modern(relay, desk.token, "subscriptions/listen", {"notifications": {"tasksStatus": []}})
    assert no_capability.status_code == 400 and no_capability.json()["error"]["code"] == -32021


@pytest.mark.stack
def test_a_task_outlives_the_web_process_that_ran_it(tmp_path: Path) -> None:
    """Killed while its call waited on a written prompt, a task ends with that prompt's outcome;
    killed before its call wrote anything, it fails saying nothing was done."""
    with own_relay(tmp_path, web="process") as stack:
        relay = stack.relay
        assert relay is not None
        desk = relay.conversation("desk")
        fresh = relay.conversation("fresh", approvals=())
        session = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
        sending = call_tool(relay, desk, {"action": "send", "relay": "this", "session": session, "text": "!sleep 4\nsurvived"})
        asking = call_tool(relay, fresh, {"action": "create_session", "relay": "this", "text": "never"})
        poll("the prompt written", lambda: any(m["text"].endswith("survived") for m in
                                               desk.ok("read_session", relay="this", session=session)["messages"]))
        poll("the card shown", lambda: task_get(relay, fresh, asking["taskId"]).json()["result"]["status"] == "input_required")
        stack.kill("web")
        stack.start_web()
        ended = settled_task(relay, desk, sending["taskId"])
        assert ended["status"] == "completed"
        body = ended["result"]["structuredContent"]
        assert body["status"] == "done" and body["reply"]["text"].endswith("survived") and "process" in body["note"]
        lost = settled_task(relay, fresh, asking["taskId"])
        assert lost["status"] == "failed" and "nothing was done" in lost["error"]["message"]
