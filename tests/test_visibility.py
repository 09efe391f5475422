"""The owner's sessions_visibility is a boundary (docs/rules.md#visibility): with `tree`, a session outside
the calling conversation's tree is neither listed, read, reached nor watched through any surface its token
opens — relay_tool over HTTP and over MCP as much as OpenClaw's session tools — and a refused call changes
nothing."""

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
from oar.core.models import HeldEvent, Question
from oar.core.timeutil import utcnow
from oar.watching.engine_events import make_heartbeats
from tests.support.clients import Agent, poll
from tests.support.conversations import event_lines, messages_of, write
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

FORBIDDEN = "REMOTE_RELAY_FORBIDDEN"


def hidden_text(session_id: str, nothing: str = "") -> str:
    return (
        f'Session {session_id[:8]} is not visible to this conversation: the owner\'s sessions_visibility is "tree" '
        f"(this conversation and the sessions it started, and theirs). {nothing}"
    ).strip()


def openclaw(agent: Agent, tool: str, **args: Any) -> tuple[int, dict[str, Any]]:
    return agent.request("POST", f"/api/v1/openclaw/{tool}", args)


def relay_tool_over_mcp(relay: Relay, token: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """relay_tool calls through the SDK client on /mcp, each result's JSON."""

    async def main() -> list[types.CallToolResult]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http:
            async with streamable_http_client(f"{relay.url}/mcp", http_client=http) as (read, write_stream):
                async with ClientSession(read, write_stream) as session:
                    await session.initialize()
                    return [await session.call_tool("relay_tool", call) for call in calls]

    answers = []
    for result in anyio.run(main):
        text = result.content[0]
        assert isinstance(text, types.TextContent)
        answers.append(json.loads(text.text))
    return answers


def tree_and_outside(relay: Relay, desk: Agent) -> tuple[str, Agent]:
    """desk's child (in its tree) and another of the owner's conversations (outside it), with a message each."""
    child = desk.ok("create_session", relay="this", text="hello child", title="child", wait_seconds=30)["session"]
    outside = relay.conversation("outside")
    written = write(relay, outside.session_id, "the owner's plan for the launch")
    poll("the outside turn to end", lambda: any(
        m["id"] == written and m["status"] == "done" for m in messages_of(relay, outside.session_id)))
    relay.settings(sessions_visibility="tree")
    return child, outside


def test_with_tree_a_session_outside_is_neither_listed_nor_read_through_openclaw_or_relay_tool(
    relay: Relay, desk: Agent
) -> None:
    child, outside = tree_and_outside(relay, desk)
    # OpenClaw's tools, as before.
    status, history = openclaw(desk, "sessions_history", sessionKey=outside.session_id)
    assert (status, history["status"], history["code"]) == (403, "forbidden", FORBIDDEN), history
    status, listed = openclaw(desk, "sessions_list")
    assert {row["sessionId"] for row in listed["sessions"]} == {desk.session_id, child}

    # relay_tool over HTTP, with the same token.
    for scope in ("recent", "all", "active", "archived"):
        ids = {entry["id"] for entry in desk.ok("list_sessions", relay="this", scope=scope)["sessions"]}
        assert outside.session_id not in ids, scope
    assert {entry["id"] for entry in desk.ok("list_sessions", relay="this", scope="all")["sessions"]} == {
        desk.session_id, child}
    assert desk.ok("list_sessions", relay="this", query="outside")["sessions"] == []
    for reference in (outside.session_id, outside.session_id[:8]):
        refused = desk.refused("read_session", FORBIDDEN, relay="this", session=reference)
        assert refused["error"] == hidden_text(outside.session_id)
        assert "launch" not in json.dumps(refused)
    assert desk.ok("read_session", relay="this", session=child)["messages"][0]["text"] == "hello child"

    # relay_tool over MCP, with the same token.
    listed_mcp, read_mcp, read_child = relay_tool_over_mcp(relay, desk.token, [
        {"action": "list_sessions", "relay": "this", "scope": "all"},
        {"action": "read_session", "relay": "this", "session": outside.session_id},
        {"action": "read_session", "relay": "this", "session": child},
    ])
    assert {entry["id"] for entry in listed_mcp["sessions"]} == {desk.session_id, child}
    assert (read_mcp["ok"], read_mcp["code"], read_mcp["error"]) == (False, FORBIDDEN, hidden_text(outside.session_id))
    assert read_child["ok"] is True

    # The owner's `all` (the default) shows it again.
    relay.settings(sessions_visibility="all")
    assert desk.ok("read_session", relay="this", session=outside.session_id)["messages"][0]["text"] == (
        "the owner's plan for the launch")


def test_with_tree_every_action_naming_a_session_outside_refuses_it_and_changes_nothing(
    relay: Relay, desk: Agent
) -> None:
    relay.settings(allow_shell_tasks=True)
    child, outside = tree_and_outside(relay, desk)
    relay.settings(sessions_visibility="all")
    asked = write(relay, outside.session_id, "!ask Which release? | 2.4 | 2.5")
    question = poll("the outside question", lambda: _question_in(outside.session_id))
    relay.settings(sessions_visibility="tree")
    target = outside.session_id
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("read_task_output", {"session": target, "task_id": "task_x"}, ""),
        ("wait", {"session": target, "message_id": asked, "wait_seconds": 0}, ""),
        ("send", {"session": target, "text": "print your history"}, "Nothing was sent."),
        ("update_session", {"session": target, "title": "mine now"}, "Nothing was changed."),
        ("stop", {"session": target}, "Nothing was stopped."),
        ("archive", {"session": target}, "Nothing was archived."),
        ("subscribe", {"sessions": [target]}, "Nothing was subscribed."),
        ("subscribe", {"sessions": ["all"], "exclude": [target]}, "Nothing was subscribed."),
        ("list_subscriptions", {"watcher": target}, ""),
        ("transfer_subscriptions", {"from": target}, "Nothing was transferred."),
        ("schedule", {"session": target, "text": "later", "every_minutes": 60}, "Nothing was scheduled."),
        ("ask", {"session": target, "question": "Ship it?"}, "Nothing was asked."),
        ("list_questions", {"session": target}, ""),
        ("answer_question", {"question_id": question, "answer": "2.5"}, "Nothing was sent."),
    ]
    before = snapshot(relay, heartbeats=False)
    for action, args, nothing in calls:
        refused = desk.refused(action, FORBIDDEN, relay="this", **args)
        assert refused["error"] == hidden_text(target, nothing), (action, refused)
    assert snapshot(relay, heartbeats=False) == before
    # The sessions in its tree are its to reach.
    assert desk.ok("send", relay="this", session=child, text="more", wait_seconds=30)["status"] == "done"


def _question_in(session_id: str) -> str | None:
    with database.connection_context():
        question = Question.get_or_none(Question.session == session_id)
        return question.id if question is not None else None


def test_with_tree_relay_info_and_group_members_leave_sessions_outside_out(relay: Relay, desk: Agent) -> None:
    child, outside = tree_and_outside(relay, desk)
    group = desk.ok("read_session", relay="this", session=child)["group"]
    relay.owner.patch(f"/api/v1/owner/sessions/{outside.session_id}", {"group_id": group["id"]})
    members = desk.ok("read_session", relay="this", session=child)["group"]["members"]
    assert [member["id"] for member in members] == [desk.session_id]
    [listed] = desk.ok("relay_info", relay="this")["groups"]
    assert (listed["id"], listed["memberCount"]) == (group["id"], 2)


def test_with_tree_a_watcher_of_all_gets_no_event_and_no_heartbeat_line_of_a_session_outside(
    relay: Relay, desk: Agent
) -> None:
    relay.settings(sessions_visibility="tree")
    child = desk.ok("create_session", relay="this", text="hello", title="child", wait_seconds=30)["session"]
    outside = relay.conversation("outside")
    sub = desk.ok("subscribe", sessions=["all"], events=["turn_end"], heartbeat_minutes=5)["subscription"]
    written = write(relay, outside.session_id, "the owner's plan for the launch")
    poll("the outside turn to end", lambda: any(
        m["id"] == written and m["status"] == "done" for m in messages_of(relay, outside.session_id)))
    # Events are matched in order: once the child's later event is delivered, the outside one was matched too.
    desk.ok("send", relay="this", session=child, text="step two", wait_seconds=0)
    poll("the child's event", lambda: any("step two" in line for line in event_lines(relay, desk.session_id)))
    delivered = "\n".join(event_lines(relay, desk.session_id))
    assert "launch" not in delivered and outside.session_id[:4] not in delivered, delivered

    assert relay.runtime is not None
    with database.connection_context():
        assert make_heartbeats(relay.runtime, utcnow() + timedelta(minutes=6)) >= 1
        [line] = [row.line for row in HeldEvent.select().where(
            (HeldEvent.watcher == desk.session_id) & (HeldEvent.kind == "heartbeat"))]
    assert line == (
        f'[relay event] heartbeat: 0 of 1 watched session at work; idle: "child" ({child[:4]}…) '
        f'(subscription {sub["id"]})'
    )
