"""The Claude Code CLI (npm, pinned in tests/claude_code) connected to the relay as the README says,
its model a scripted fake Anthropic API (tests/fakes/anthropic_script.py).

Its calls go out on MCP 2026-07-28 (`server/discover`, no handshake). In the terminal, as users
run it, it declares the Tasks extension: a long `send` runs as a task that Claude Code moves to
the background, and it is woken with the relay's reply when the task completes. Headless
(`claude -p`) it declares no extension, and the same call streams progress until the reply.
Two Claude Code sessions prompt each other through the relay: one waits in `take` (a task in
its background), the other's `send` gets its `reply`. `.ci/run` installs the CLI; where it is
not installed these tests are skipped, saying why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oar.core.db import database
from oar.mcp_tasks.models import McpTask
from tests.fakes.anthropic_script import ScriptedAnthropic, say, use_tool
from tests.support.claude_code import LOAD_RELAY_TOOL, RELAY_TOOL, ClaudeCode, installed
from tests.support.clients import Agent, poll
from tests.support.relays import FAST_TIMES, Relay, RelayStack
from tests.support.request_log import Received, recording

pytestmark = pytest.mark.skipif(
    not installed(),
    reason="the Claude Code CLI is not installed: npm ci --prefix tests/claude_code (then, if npm held its "
           "postinstall back, node tests/claude_code/node_modules/@anthropic-ai/claude-code/install.cjs)",
)

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
# Longer than an MCP call without progress may wait: only a task or progress carries it to the reply.
SLEEP_SECONDS = int(float(FAST_TIMES["MCP_MAX_WAIT_SECONDS"])) + 2
QUESTION = "Ready for the release?"
# A notification of Claude Code's background tasks holds the call's result between these tags.
RESULT_TAGS = ("<result>", "</result>")


def relay_json(text: str) -> dict[str, Any]:
    """The relay's JSON in what Claude Code passed back to its model (a tool_result, or a task notification)."""
    start, end = RESULT_TAGS
    if start in text:
        text = text.split(start, 1)[1].split(end, 1)[0]
    value = json.loads(text.strip())
    assert isinstance(value, dict), text
    return value


def tasks_of(agent: Agent) -> list[McpTask]:
    with database.connection_context():
        return list(McpTask.select().where(McpTask.caller_id == agent.session_id).order_by(McpTask.created_at))


def calls_of(received: list[Received], agent: Agent) -> list[Received]:
    return [entry for entry in received if entry.token == agent.token]


def declares_tasks(entry: Received) -> bool:
    capabilities = entry.meta.get("io.modelcontextprotocol/clientCapabilities") or {}
    return TASKS in (capabilities.get("extensions") or {})


def assert_per_request_revision(calls: list[Received]) -> None:
    """Discovered, then every request on 2026-07-28, never the handshake."""
    assert calls and calls[0].method == "server/discover" and calls[0].status == 200, calls[:1]
    assert "initialize" not in [entry.method for entry in calls]
    for entry in calls:
        assert entry.headers.get("MCP-Protocol-Version") == MODERN, entry
        assert entry.meta.get("io.modelcontextprotocol/protocolVersion") == MODERN, entry
        assert entry.meta["io.modelcontextprotocol/clientInfo"]["name"] == "claude-code"


def agent_outside(relay: Relay, agent: Agent) -> bool:
    return bool(relay.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["session"]["agentOutside"])


def test_in_the_terminal_a_long_send_runs_as_a_task_and_claude_code_is_woken_with_the_reply(
    stack: RelayStack, relay: Relay, desk: Agent, tmp_path: Path,
) -> None:
    target = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    agent = relay.conversation("claude")
    send = {"action": "send", "relay": "this", "session": target, "text": f"{QUESTION}\n!sleep {SLEEP_SECONDS}", "wait_seconds": 120}
    steps = [
        use_tool("ToolSearch", LOAD_RELAY_TOOL), use_tool(RELAY_TOOL, send),
        say("The desk is on it."), say("The desk answered: {latest}"),
    ]
    assert stack.app is not None
    with ScriptedAnthropic(steps) as model, recording(stack.app) as received:
        claude = ClaudeCode(tmp_path, model)
        claude.add_relay(relay.url, agent.token)
        claude.start("Ask the desk whether we are ready for the release.")
        try:
            claude.until_finished()
        finally:
            claude.stop()
    calls = calls_of(received, agent)
    assert_per_request_revision(calls)
    assert all(declares_tasks(entry) for entry in calls)
    # The send ran as a task, kept in the database, and Claude Code followed it with tasks/get.
    [task] = tasks_of(agent)
    assert task.action == "send" and task.status == "completed", (task.status, task.status_message)
    result = task.result["structuredContent"]
    assert result["status"] == "done" and result["reply"]["text"] == f"echo: {QUESTION}"
    assert any(entry.method == "tasks/get" and entry.headers.get("Mcp-Name") == task.id for entry in calls)
    # Claude Code defers MCP tools: the model first sees ToolSearch, which loads relay_tool.
    offered = model.tool_names()
    assert "ToolSearch" in offered[0] and RELAY_TOOL not in offered[0] and RELAY_TOOL in offered[1]
    # Claude Code moved the call to the background at once, and was woken with the relay's reply.
    _prompt, _tool_search, backgrounded, woken = model.sent_back()
    assert task.id in backgrounded and "moved to the background" in backgrounded
    assert "<status>completed</status>" in woken and relay_json(woken) == result
    assert agent_outside(relay, agent)  # recognised at its first MCP request


def test_headless_claude_code_streams_progress_on_the_2026_revision(
    stack: RelayStack, relay: Relay, desk: Agent, tmp_path: Path,
) -> None:
    target = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    agent = relay.conversation("claude")
    send = {"action": "send", "relay": "this", "session": target, "text": f"{QUESTION}\n!sleep {SLEEP_SECONDS}", "wait_seconds": 120}
    steps = [use_tool("ToolSearch", LOAD_RELAY_TOOL), use_tool(RELAY_TOOL, send), say("The desk answered: {latest}")]
    assert stack.app is not None
    with ScriptedAnthropic(steps) as model, recording(stack.app) as received:
        claude = ClaudeCode(tmp_path, model)
        claude.add_relay(relay.url, agent.token)
        events = claude.print("Ask the desk whether we are ready for the release.")
    calls = calls_of(received, agent)
    assert_per_request_revision(calls)
    # Headless, Claude Code asks for no task: the call carries a progress token and waits in its request.
    assert not any(declares_tasks(entry) for entry in calls) and tasks_of(agent) == []
    [call] = [entry for entry in calls if entry.method == "tools/call"]
    assert call.body["params"]["_meta"]["progressToken"] is not None
    _prompt, _tool_search, answered = model.sent_back()
    body = relay_json(answered)
    assert body["status"] == "done" and body["reply"]["text"] == f"echo: {QUESTION}"  # past the cap, by progress
    final = events[-1]
    assert final["type"] == "result" and final["result"] == f"The desk answered: {answered}"


def taken_prompt(latest: str) -> dict[str, Any]:
    """The prompt a completed `take` brought (from Claude Code's notice of its background task)."""
    [item] = relay_json(latest)["items"]
    assert item["kind"] == "prompt", item
    return dict(item)


def test_two_claude_code_sessions_prompt_each_other_through_the_relay(
    stack: RelayStack, relay: Relay, tmp_path: Path,
) -> None:
    asker, answerer = relay.conversation("claude-a"), relay.conversation("claude-b")
    answer = "Yes: every check is green."
    reply = use_tool(RELAY_TOOL, lambda latest: {"action": "reply", "message_id": taken_prompt(latest)["message_id"], "text": answer})
    answerer_steps = [
        use_tool("ToolSearch", LOAD_RELAY_TOOL), use_tool(RELAY_TOOL, {"action": "take", "wait_seconds": 120}),
        say("Waiting for a prompt."), reply, say("Replied: {latest}"),
    ]
    send = {"action": "send", "relay": "this", "session": answerer.session_id, "text": QUESTION, "wait_seconds": 120}
    asker_steps = [
        use_tool("ToolSearch", LOAD_RELAY_TOOL), use_tool(RELAY_TOOL, send),
        say("Asked; B will answer."), say("B answered: {latest}"),
    ]
    assert stack.app is not None
    with (ScriptedAnthropic(answerer_steps) as b_model, ScriptedAnthropic(asker_steps) as a_model,
          recording(stack.app) as received):
        b_code, a_code = ClaudeCode(tmp_path / "b", b_model), ClaudeCode(tmp_path / "a", a_model)
        b_code.add_relay(relay.url, answerer.token)
        a_code.add_relay(relay.url, asker.token)
        try:
            b_code.start("Take what other agents send you and answer it.")
            poll("B waiting in take", lambda: any(task.action == "take" for task in tasks_of(answerer)), seconds=60)
            a_code.start("Ask B whether we are ready for the release.")
            a_code.until_finished()
            b_code.until_finished()
        finally:
            a_code.stop()
            b_code.stop()
    for agent in (asker, answerer):
        assert_per_request_revision(calls_of(received, agent))
        assert agent_outside(relay, agent)  # each recognised at its first MCP request
    # B's take (a task in its background) brought A's prompt; B replied to it.
    *_, taken_notice, replied = b_model.sent_back()
    prompt = taken_prompt(taken_notice)
    assert prompt["text"] == QUESTION and prompt["from"]["session"] == asker.session_id
    assert relay_json(replied)["reply"]["text"] == answer
    # A's send (a task in its background) completed with B's reply, and A was woken with it.
    [sent] = tasks_of(asker)
    assert sent.action == "send" and sent.status == "completed"
    *_, woken = a_model.sent_back()
    woken_body = relay_json(woken)
    assert woken_body == sent.result["structuredContent"]
    assert woken_body["status"] == "done" and woken_body["reply"]["text"] == answer
    assert woken_body["message_id"] == prompt["message_id"]
