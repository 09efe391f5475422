"""Team runs (docs/team-runs.md): the 23 tools of seed 004 at /mcp/team, driven by the official MCP
Python SDK client against a relay of this module's own (gunicorn with two worker processes, so that
concurrent claims race across processes), on SQLite or PostgreSQL; a restart of its web; the stdio
bridge with RELAY_SESSION_ID.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
import requests
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from oar.core.schema import object_schema
from oar.team import tools
from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay, RelayStack, own_relay
from tests.support.snapshots import snapshot
from tests.support.team import body_of, ok, refused, run, team_session

TOOL_NAMES = [
    "get_server_info", "start_session", "send_message", "get_messages", "create_task", "update_task", "claim_task",
    "get_all_tasks", "post_artifact", "get_artifact", "request_review", "submit_review", "read_memory", "write_memory",
    "append_memory", "save_session_summary", "list_sessions", "get_session_summary", "save_orchestrator_state",
    "get_orchestrator_state", "list_agents", "list_pool_agents", "broadcast_thinking",
]
RUN_ID = re.compile(r"^\d{4}-\d{2}-\d{2}-\d{3}-[0-9a-z]{4}$")


@pytest.fixture(scope="module")
def team_stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[RelayStack]:
    with own_relay(tmp_path_factory.mktemp("team"), redis_url=redis_url, web="process", worker=False,
                   env={"WEB_CONCURRENCY": "2", "OAR_WEB_THREADS": "16"}) as running:
        running.bind_database()
        yield running


@pytest.fixture(scope="module")
def team_relay(team_stack: RelayStack) -> Relay:
    assert team_stack.relay is not None
    return team_stack.relay


@pytest.fixture(scope="module")
def keeper(team_relay: Relay) -> Agent:
    """The conversation whose team keeps the project's memory (the first team that writes a memory
    file keeps it: docs/team-runs.md#memory)."""
    return team_relay.conversation("lead")


def test_it_lists_the_23_tools_with_schemas_from_their_tables(team_relay: Relay) -> None:
    agent = team_relay.conversation("lead")

    async def work() -> list[types.Tool]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent.token}"}) as http:
            async with streamable_http_client(f"{team_relay.url}/mcp/team", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return (await session.list_tools()).tools

    listed = run(work)
    assert [tool.name for tool in listed] == TOOL_NAMES
    for tool in listed:
        assert tool.input_schema == object_schema(tools.TOOLS[tool.name].params)
    create = next(tool for tool in listed if tool.name == "create_task").input_schema
    assert create["required"] == ["agent_id", "title", "priority"]
    assert create["properties"]["priority"]["enum"] == ["critical", "high", "medium", "low"]
    # A call with a progress token is answered within its request (the team tools never wait).
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "list_sessions", "arguments": {"agent_id": "lead"}, "_meta": {"progressToken": "p"}}}
    answered = requests.post(f"{team_relay.url}/mcp/team", json=call, timeout=30, headers={
        "Authorization": f"Bearer {agent.token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25"})
    assert answered.headers["Content-Type"].startswith("application/json")
    assert answered.json()["result"]["structuredContent"]["success"] is True
    for token in (None, "oar_s_not_a_token"):
        response = requests.post(f"{team_relay.url}/mcp/team", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                 headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=30)
        assert response.status_code == 401 and response.json()["code"] == "REMOTE_RELAY_UNAUTHORIZED"


def test_runs_are_declared_per_connection_and_a_call_before_is_refused(team_relay: Relay) -> None:
    lead, other = team_relay.conversation("lead"), team_relay.conversation("other")

    async def work() -> None:
        async with team_session(team_relay, lead.token) as call:
            refused(await call("get_messages", agent_id="lead"), "No team run is active", "start_session")
            info = ok(await call("get_server_info", agent_id="lead"))
            assert info["sessionId"] is None and info["dashboardUrl"] == f"{team_relay.url}/team-runs"
            started = ok(await call("start_session", agent_id="lead"))
            assert RUN_ID.match(started["session_id"]), started
            assert ok(await call("start_session", agent_id="lead", session_id="2026-03-14-007"))["session_id"] == \
                "2026-03-14-007"
            info = ok(await call("get_server_info", agent_id="lead"))
            assert info == {"success": True, "dashboardUrl": f"{team_relay.url}/team-runs/2026-03-14-007",
                            "dashboardAvailable": True, "port": team_relay.config.port, "sessionId": "2026-03-14-007",
                            "instanceId": team_relay.name}
            refused(await call("start_session", agent_id="lead", session_id="2026-02-30-001"), "not a team run id")
            refused(await call("start_session", agent_id="lead", session_id="yesterday"), "YYYY-MM-DD-NNN-XXXX")
            refused(await call("start_session", agent_id="../etc", session_id="2026-03-14-007"), "not an agent id")
            assert ok(await call("get_server_info", agent_id="lead"))["sessionId"] == "2026-03-14-007"
            sessions = ok(await call("list_sessions", agent_id="lead"))["sessions"]
            assert sessions[0] == started["session_id"] and "2026-03-14-007" in sessions
        # Another token's connection has no run yet; a new connection of the same token keeps its run.
        async with team_session(team_relay, other.token) as call:
            refused(await call("get_all_tasks", agent_id="fe"), "No team run is active")
        async with team_session(team_relay, lead.token) as call:
            ok(await call("get_all_tasks", agent_id="fe"))

    run(work)


async def started(relay: Relay, token: str, run_id: str) -> None:
    async with team_session(relay, token) as call:
        ok(await call("start_session", agent_id="lead", session_id=run_id))


def test_messages_go_to_one_agent_or_everyone(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")

    async def work() -> None:
        await started(team_relay, lead.token, "2026-04-01-001-msgs")
        async with team_session(team_relay, lead.token) as call:
            direct = ok(await call("send_message", agent_id="lead", to="fe", content="Start with login", thread_id="t1"))
            # An argument the tool does not take (the seed's clients add session_id) is ignored and said so.
            assert ok(await call("send_message", agent_id="lead", content="Standup in 5",
                                 session_id="2026-04-01-001-msgs"))["ignored"] == ["session_id"]
            ok(await call("send_message", agent_id="be", to="lead", content="API ready"))
            inbox = ok(await call("get_messages", agent_id="fe"))["messages"]
            assert [(m["from_agent"], m["to_agent"], m["content"], m["thread_id"]) for m in inbox] == [
                ("lead", "fe", "Start with login", "t1"), ("lead", None, "Standup in 5", None)]
            assert inbox[0]["id"] == direct["message_id"] and isinstance(inbox[0]["created_at"], int)
            # The sender does not receive its own broadcast.
            assert [m["content"] for m in ok(await call("get_messages", agent_id="lead"))["messages"]] == ["API ready"]
            refused(await call("send_message", agent_id="lead"), "send_message needs content")
            refused(await call("send_message", agent_id="lead", content=5), "content must be text")
            refused(await call("send_message", agent_id="lead", content="x" * 100_001), "the limit is 100,000")

    run(work)


def test_the_board_dependencies_idempotency_updates_and_claims(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")

    async def work() -> None:
        await started(team_relay, lead.token, "2026-04-01-002-else")
        async with team_session(team_relay, lead.token) as call:
            foreign = ok(await call("create_task", agent_id="lead", title="Other run", priority="low"))["task_id"]
        await started(team_relay, lead.token, "2026-04-01-012-brd1")
        async with team_session(team_relay, lead.token) as call:
            design = ok(await call("create_task", agent_id="lead", title="Design", priority="high", assignee="ux",
                                   description="Figma frames for login"))["task_id"]
            build = ok(await call("create_task", agent_id="lead", title="Build", priority="critical",
                                  depends_on=[design], idempotency_key="build-1"))["task_id"]
            again = ok(await call("create_task", agent_id="lead", title="Build (retry)", priority="low",
                                  idempotency_key="build-1"))
            assert again == {"success": True, "task_id": build, "duplicate": True}
            refused(await call("create_task", agent_id="lead", title="X", priority="urgent"), "priority must be one of")
            refused(await call("create_task", agent_id="lead", title="X"), "create_task needs priority")
            refused(await call("create_task", agent_id="lead", title="X", priority="low", depends_on=[foreign]),
                    "another team run")
            refused(await call("create_task", agent_id="lead", title="X", priority="low", depends_on=["task_nope"]),
                    "do not exist: task_nope")
            # A dependency not done: no claim, and why.
            assert ok(await call("claim_task", agent_id="fe", task_id=build)) == {
                "success": True, "claimed": False, "reason": f"dependencies not done: {design}"}
            # Assigned to someone else.
            assert ok(await call("claim_task", agent_id="fe", task_id=design))["reason"] == "task is assigned to ux"
            assert ok(await call("claim_task", agent_id="ux", task_id=design)) == {"success": True, "claimed": True}
            assert ok(await call("claim_task", agent_id="ux", task_id=design))["reason"] == "task is in_progress by ux, not todo"
            ok(await call("update_task", agent_id="ux", task_id=design, status="done"))
            assert ok(await call("claim_task", agent_id="fe", task_id=build))["claimed"] is True
            refused(await call("claim_task", agent_id="fe", task_id=foreign), "belongs to another team run")
            refused(await call("update_task", agent_id="fe", task_id=build), "needs status, assignee or depends_on")
            refused(await call("update_task", agent_id="fe", task_id=build, status="finished"), "status must be one of")
            # A cycle through update_task's depends_on is refused and changes nothing.
            refused(await call("update_task", agent_id="lead", task_id=design, depends_on=[build]),
                    f"cycle: {design} → {build} → {design}")
            ok(await call("update_task", agent_id="lead", task_id=build, status="todo", assignee="fe2"))
            tasks = ok(await call("get_all_tasks", agent_id="lead"))["tasks"]
            assert [(t["id"], t["status"], t["assignee"], t["priority"], t["depends_on"]) for t in tasks] == [
                (design, "done", "ux", "high", []), (build, "todo", "fe2", "critical", [design])]
            assert [t["id"] for t in ok(await call("get_all_tasks", agent_id="lead", assignee="fe2"))["tasks"]] == [build]

    run(work)


def test_the_circuit_breaker_holds_depth_one_and_three_per_parent(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")

    async def work() -> None:
        await started(team_relay, lead.token, "2026-04-01-003-brkr")
        async with team_session(team_relay, lead.token) as call:
            parent = ok(await call("create_task", agent_id="lead", title="Login", priority="high"))["task_id"]
            children = [ok(await call("create_task", agent_id="qa", title=f"Bug {n}", priority="medium",
                                      parent_task_id=parent, derived_reason=f"found bug {n}"))["task_id"] for n in range(3)]
            refused(await call("create_task", agent_id="qa", title="Bug 4", priority="medium", parent_task_id=parent),
                    "Circuit breaker", "has 3 derived tasks already", "Nothing was created")
            refused(await call("create_task", agent_id="qa", title="Grandchild", priority="low",
                               parent_task_id=children[0]), "Circuit breaker", "nest only 1 deep")
            refused(await call("create_task", agent_id="qa", title="Y", priority="low", parent_task_id="task_none"),
                    'parent_task_id: there is no task "task_none"')
            refused(await call("create_task", agent_id="qa", title="Y", priority="low", derived_reason="why"),
                    "derived_reason needs parent_task_id")
            tasks = ok(await call("get_all_tasks", agent_id="lead"))["tasks"]
            assert len(tasks) == 4
            assert [t["parent_task_id"] for t in tasks[1:]] == [parent] * 3

    run(work)


def at_once(relay: Relay, token: str, count: int, tool: str, arguments: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """`count` SDK clients, each its own connection (two web processes serve them), call `tool` at
    the same moment (a barrier after their handshakes); their answers."""
    ready = threading.Barrier(count)
    answers: list[dict[str, Any]] = []

    def one(index: int) -> None:
        async def work() -> None:
            async with team_session(relay, token) as call:
                await anyio.to_thread.run_sync(ready.wait)
                answers.append(await call(tool, **arguments(index)))

        run(work)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == count, answers
    return answers


def test_of_many_concurrent_claims_exactly_one_wins(team_relay: Relay) -> None:
    """Eight clients claim the same task at once, three tasks in a row: one `claimed: true` each time."""
    lead = team_relay.conversation("lead")
    run(lambda: started(team_relay, lead.token, "2026-04-01-004-race"))

    async def create() -> list[str]:
        async with team_session(team_relay, lead.token) as call:
            return [ok(await call("create_task", agent_id="lead", title=f"Race {n}", priority="high"))["task_id"]
                    for n in range(3)]

    for task_id in run(create):
        answers = at_once(team_relay, lead.token, 8, "claim_task",
                          lambda index, task_id=task_id: {"agent_id": f"agent{index}", "task_id": task_id})
        winners = [answer for answer in answers if answer["claimed"]]
        assert len(winners) == 1, answers
        assert all(answer["reason"].startswith("task is in_progress by agent") for answer in answers if not answer["claimed"])


def test_the_breaker_and_idempotency_keys_hold_under_concurrent_creates(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    run(lambda: started(team_relay, lead.token, "2026-04-01-014-conc"))

    async def parent() -> str:
        async with team_session(team_relay, lead.token) as call:
            return str(ok(await call("create_task", agent_id="lead", title="Parent", priority="high"))["task_id"])

    parent_id = run(parent)
    derived = at_once(team_relay, lead.token, 6, "create_task", lambda index: {
        "agent_id": "qa", "title": f"Derived {index}", "priority": "low", "parent_task_id": parent_id})
    assert sum(answer["success"] for answer in derived) == 3, derived
    assert all("has 3 derived tasks already" in answer["error"] for answer in derived if not answer["success"])
    keyed = at_once(team_relay, lead.token, 6, "create_task", lambda index: {
        "agent_id": "lead", "title": f"Keyed {index}", "priority": "low", "idempotency_key": "once"})
    assert len({ok(answer)["task_id"] for answer in keyed}) == 1, keyed
    assert sum(not answer.get("duplicate") for answer in keyed) == 1, keyed

    async def tasks() -> list[dict[str, Any]]:
        async with team_session(team_relay, lead.token) as call:
            return list(ok(await call("get_all_tasks", agent_id="lead"))["tasks"])

    assert len(run(tasks)) == 1 + 3 + 1


def test_artifacts_and_reviews_only_by_the_named_reviewer_and_once(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")

    async def work() -> None:
        await started(team_relay, lead.token, "2026-04-01-005-arts")
        async with team_session(team_relay, lead.token) as call:
            task = ok(await call("create_task", agent_id="lead", title="PR", priority="high"))["task_id"]
            posted = ok(await call("post_artifact", agent_id="fe", name="login-fe-pr", type="pr", content="diff…",
                                   task_id=task))
            assert ok(await call("get_artifact", agent_id="be", name="login-fe-pr"))["artifact"] == {
                "id": posted["artifact_id"], "name": "login-fe-pr", "type": "pr", "content": "diff…",
                "created_by": "fe", "task_id": task}
            assert await call("get_artifact", agent_id="be", name="nope") == {
                "success": False, "artifact": None, "error": "artifact not found"}
            refused(await call("post_artifact", agent_id="fe", name="x", type="video", content="y"), "type must be one of")
            replaced = ok(await call("post_artifact", agent_id="fe", name="login-fe-pr", type="pr", content="diff v2"))
            assert replaced == {"success": True, "artifact_id": posted["artifact_id"], "replaced": True}
            review = ok(await call("request_review", agent_id="fe", artifact_id=posted["artifact_id"], reviewer="fe2"))
            refused(await call("request_review", agent_id="fe", artifact_id="art_nope", reviewer="fe2"), "no artifact")
            refused(await call("submit_review", agent_id="be", review_id=review["review_id"], status="approved"),
                    "Permission denied", "only the named reviewer")
            submitted = ok(await call("submit_review", agent_id="fe2", review_id=review["review_id"],
                                      status="changes_requested", comments="Add tests"))
            assert submitted["review"] == {"id": review["review_id"], "status": "changes_requested", "reviewer": "fe2",
                                           "comments": "Add tests"}
            refused(await call("submit_review", agent_id="fe2", review_id=review["review_id"], status="approved"),
                    "submitted already (changes_requested)")
            refused(await call("submit_review", agent_id="fe2", review_id=review["review_id"], status="pending"),
                    "status must be one of")

    run(work)


def test_memory_sections_dated_entries_and_the_project_file(team_relay: Relay, keeper: Agent) -> None:
    lead = keeper

    async def work() -> None:
        async with team_session(team_relay, lead.token) as call:
            assert ok(await call("read_memory", agent_id="mem-fe")) == {"success": True, "content": None}
            ok(await call("write_memory", agent_id="mem-fe", key="tech-stack", content="React"))
            ok(await call("write_memory", agent_id="mem-fe", key="conventions", content="- hooks only"))
            ok(await call("write_memory", agent_id="mem-fe", key="tech-stack", content="React 19\nVite"))
            ok(await call("append_memory", agent_id="mem-fe", content="Learnt: login needs CSRF"))
            text = ok(await call("read_memory", agent_id="mem-fe"))["content"]
            assert text.startswith("## tech-stack\n\nReact 19\nVite\n\n## conventions\n\n- hooks only\n\n## ")
            assert re.search(r"## \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC\n\nLearnt: login needs CSRF\n$", text)
            ok(await call("write_memory", key="goal", content="Ship login"))
            assert ok(await call("read_memory"))["content"] == "## goal\n\nShip login\n"
            refused(await call("append_memory", content="no agent"), "append_memory needs agent_id")
            refused(await call("write_memory", agent_id="project", key="k", content="c"), "names the project's memory")
            refused(await call("write_memory", agent_id="mem-fe", key="a\nb", content="c"), "key must be one line")
            ok(await call("write_memory", agent_id="mem-fe", key="big", content="x" * 100_000))
            refused(await call("write_memory", agent_id="mem-fe", key="big2", content="x" * 100_000), "the limit is 200,000")

    run(work)


def test_run_records_and_the_orchestrator_state(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")

    async def work() -> None:
        await started(team_relay, lead.token, "2026-04-01-006-recs")
        async with team_session(team_relay, lead.token) as call:
            assert ok(await call("get_orchestrator_state", agent_id="lead")) == {"success": True, "state": None}
            state = json.dumps({"iteration": 3, "done_agents": ["fe"]})
            ok(await call("save_orchestrator_state", agent_id="lead", state=state))
            assert ok(await call("get_orchestrator_state", agent_id="lead"))["state"] == state
            refused(await call("save_orchestrator_state", agent_id="lead", state="{not json"), "must be a JSON string")
            ok(await call("save_session_summary", agent_id="lead", session_id="2026-04-01-006-recs", summary="Shipped"))
            assert ok(await call("get_session_summary", agent_id="lead", session_id="2026-04-01-006-recs")) == {
                "success": True, "summary": "Shipped"}
            refused(await call("get_session_summary", agent_id="lead", session_id="2026-04-01-099"), "no team run")
            refused(await call("save_session_summary", agent_id="lead", session_id="nope", summary="x"), "not a team run id")

    run(work)


POOL = """\
shared:
  engineer:
    tools: [Read, Edit, Bash]
    systemPrompt: You write careful code.
agents:
  fe:
    extends: engineer
    name: Frontend
    emoji: "🎨"
    description: Builds the UI
    tags: [web, ui]
  be:
    extends: engineer
    name: Backend
    tools: [Read, Bash]
  qa:
    name: QA
    system_prompt: You test.
"""

TEAM = """\
agents:
  fe: {extends: fe}
  fe2: {extends: fe, name: Frontend 2}
  lead: {name: Lead, emoji: "🧭", systemPrompt: You coordinate.}
"""


def test_team_and_pool_definitions_from_the_data_folder(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    folder = Path(team_relay.config.data_dir) / ".relay"

    async def work() -> None:
        async with team_session(team_relay, lead.token) as call:
            assert ok(await call("list_pool_agents", agent_id="lead"))["agents"] == []
            folder.mkdir(exist_ok=True)
            (folder / "agents.pool.yml").write_text(POOL, encoding="utf-8")
            (folder / "session-agents-2026-04-01-007-agts.yml").write_text(TEAM, encoding="utf-8")
            pool = ok(await call("list_pool_agents", agent_id="lead"))["agents"]
            assert pool[0] == {"id": "fe", "name": "Frontend", "emoji": "🎨", "description": "Builds the UI",
                               "tags": ["web", "ui"], "tools": ["Read", "Edit", "Bash"]}
            assert [(a["id"], a["tools"], a["tags"]) for a in pool[1:]] == [("be", ["Read", "Bash"], None), ("qa", [], None)]
            team = ok(await call("list_agents", agent_id="lead", session_id="2026-04-01-007-agts"))["agents"]
            assert [(a["id"], a["name"], a["systemPrompt"]) for a in team] == [
                ("fe", "Frontend", "You write careful code."), ("fe2", "Frontend 2", "You write careful code."),
                ("lead", "Lead", "You coordinate.")]
            refused(await call("list_agents", agent_id="lead", session_id="2026-04-01-099"), "has no team file")
            await started(team_relay, lead.token, "2026-04-01-007-agts")
        async with team_session(team_relay, lead.token) as call:
            assert len(ok(await call("list_agents", agent_id="lead"))["agents"]) == 3
            (folder / "agents.pool.yml").write_text("agents:\n  a: {extends: b}\n  b: {extends: a}\n", encoding="utf-8")
            refused(await call("list_pool_agents", agent_id="lead"), "goes round in a circle")
            (folder / "agents.pool.yml").write_text("agents: [\n", encoding="utf-8")
            refused(await call("list_pool_agents", agent_id="lead"), "not valid YAML")
            (folder / "agents.pool.yml").write_text(POOL, encoding="utf-8")

    run(work)


SAMPLES: dict[str, Any] = {
    "agent_id": "lead", "to": "fe", "content": "c", "thread_id": "t", "title": "T", "description": "d",
    "assignee": "fe", "priority": "low", "depends_on": ["task_x"], "idempotency_key": "k", "parent_task_id": "task_x",
    "derived_reason": "r", "task_id": "task_x", "status": "done", "name": "n", "type": "pr", "artifact_id": "art_x",
    "reviewer": "fe2", "review_id": "rev_x", "comments": "c", "key": "k", "session_id": "2026-04-01-008-badi",
    "summary": "s", "state": "{}",
}
# Where one tool's sample differs from the others'.
TOOL_SAMPLES = {"submit_review": {"status": "approved"}}
WRONG = {"str": 12345, "list": "not a list"}


def bad_calls() -> Iterator[tuple[str, dict[str, Any], str]]:
    """From every tool's parameter table: each required parameter left out, each parameter of the wrong type."""
    for name, spec in tools.TOOLS.items():
        samples = {**SAMPLES, **TOOL_SAMPLES.get(name, {})}
        required = {key: samples[key] for key, param in spec.params.items() if param.required}
        for key in required:
            yield name, {k: v for k, v in required.items() if k != key}, f"{name} needs {key}"
        for key, param in spec.params.items():
            yield name, {**required, key: WRONG[param.kind]}, f"{name}: {key} must be"


def test_bad_input_for_every_tool_is_refused_in_a_sentence_and_changes_nothing(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    run(lambda: started(team_relay, lead.token, "2026-04-01-008-badi"))
    before = snapshot(team_relay)
    cases = list(bad_calls())
    assert {name for name, _args, _words in cases} == set(TOOL_NAMES)

    async def work() -> None:
        async with team_session(team_relay, lead.token) as call:
            for name, arguments, words in cases:
                error = refused(await call(name, **arguments), words)
                assert error.endswith("Nothing was changed."), (name, arguments, error)
            # Text no database can store, and unknown ids.
            refused(await call("send_message", agent_id="lead", content="a\x00b"), "cannot store")
            refused(await call("claim_task", agent_id="lead", task_id="task_none"), 'there is no task "task_none"')
            refused(await call("update_task", agent_id="lead", task_id="task_none", status="done"), "there is no task")
            refused(await call("submit_review", agent_id="lead", review_id="rev_none", status="approved"), "no review")
            refused(await call("post_artifact", agent_id="lead", name="n", type="pr", content="c", task_id="task_none"),
                    "there is no task")

    run(work)
    assert snapshot(team_relay) == before


def test_everything_survives_a_restart_of_the_web(team_stack: RelayStack, team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    run_id = "2026-04-01-009-rstr"

    async def before() -> dict[str, Any]:
        await started(team_relay, lead.token, run_id)
        async with team_session(team_relay, lead.token) as call:
            first = ok(await call("create_task", agent_id="lead", title="Persist", priority="high"))["task_id"]
            ok(await call("create_task", agent_id="lead", title="After", priority="low", depends_on=[first]))
            ok(await call("claim_task", agent_id="fe", task_id=first))
            ok(await call("send_message", agent_id="lead", to="fe", content="still here?"))
            ok(await call("post_artifact", agent_id="fe", name="spec", type="document", content="# Spec"))
            ok(await call("write_memory", agent_id="rst", key="k", content="kept"))
            ok(await call("save_orchestrator_state", agent_id="lead", state='{"iteration": 7}'))
            ok(await call("save_session_summary", agent_id="lead", session_id=run_id, summary="Half done"))
            return {"tasks": ok(await call("get_all_tasks", agent_id="lead"))["tasks"],
                    "messages": ok(await call("get_messages", agent_id="fe"))["messages"]}

    seen = run(before)
    team_stack.stop("web")
    team_stack.start_web()

    async def after() -> None:
        # A new connection of the same token: the run it declared is still its run.
        async with team_session(team_relay, lead.token) as call:
            assert ok(await call("get_all_tasks", agent_id="lead"))["tasks"] == seen["tasks"]
            assert seen["tasks"][0]["status"] == "in_progress" and seen["tasks"][0]["claimed_by"] == "fe"
            assert ok(await call("get_messages", agent_id="fe"))["messages"] == seen["messages"]
            assert ok(await call("get_artifact", agent_id="fe", name="spec"))["artifact"]["content"] == "# Spec"
            assert ok(await call("read_memory", agent_id="rst"))["content"] == "## k\n\nkept\n"
            assert ok(await call("get_orchestrator_state", agent_id="lead"))["state"] == '{"iteration": 7}'
            assert ok(await call("get_session_summary", agent_id="lead", session_id=run_id))["summary"] == "Half done"
            assert ok(await call("get_server_info", agent_id="lead"))["sessionId"] == run_id

    run(after)


def test_the_stdio_bridge_serves_the_team_tools_in_the_run_of_relay_session_id(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    run_id = "2026-04-01-010-stdo"
    env = {key: value for key, value in os.environ.items() if key not in ("OAR_TOKEN", "OAR_URL")}
    env.update(OAR_URL=team_relay.url, OAR_TOKEN=lead.token, RELAY_SESSION_ID=run_id)
    server = StdioServerParameters(command=sys.executable, args=["-m", "oar", "mcp", "--tools", "team"], env=env,
                                   cwd=str(PROJECT))

    async def main() -> tuple[list[types.Tool], list[dict[str, Any]]]:
        with anyio.fail_after(60):
            async with stdio_client(server) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    listed = (await session.list_tools()).tools
                    answers = [body_of(await session.call_tool(name, arguments)) for name, arguments in (
                        ("get_server_info", {"agent_id": "fe"}),
                        ("create_task", {"agent_id": "fe", "title": "Via stdio", "priority": "medium"}),
                        ("get_all_tasks", {"agent_id": "fe"}),
                        ("start_session", {"agent_id": "fe", "session_id": "2026-04-01-011-next"}),
                        ("get_all_tasks", {"agent_id": "fe"}),
                    )]
                    return listed, answers

    listed, answers = anyio.run(main)
    assert [tool.name for tool in listed] == TOOL_NAMES
    assert answers[0]["sessionId"] == run_id
    assert [task["title"] for task in answers[2]["tasks"]] == ["Via stdio"]
    # start_session moves the bridge's connection to the new run.
    assert answers[3]["session_id"] == "2026-04-01-011-next" and answers[4]["tasks"] == []


def test_the_owner_exports_memory_as_files_and_imports_them_back(team_relay: Relay, keeper: Agent,
                                                                 tmp_path: Path) -> None:
    lead = keeper
    project = tmp_path / "repo"
    project.mkdir()
    owner = team_relay.owner
    kept_roots = owner.get("/api/v1/owner/settings")["settings"]["allowed_roots"]
    owner.settings(allowed_roots=[str(tmp_path)])
    try:
        async def write() -> None:
            async with team_session(team_relay, lead.token) as call:
                ok(await call("write_memory", agent_id="exp-be", key="db", content="PostgreSQL"))
                ok(await call("write_memory", key="goal", content="Ship it"))

        run(write)
        exported = owner.post("/api/v1/owner/team-runs/memory/export", {"folder": str(project)})
        assert {".relay/memory/exp-be.md", ".relay/memory/project.md"} <= set(exported["files"])
        files = project / ".relay" / "memory"
        assert (files / "exp-be.md").read_text(encoding="utf-8") == "## db\n\nPostgreSQL\n"
        # The team edits the files in git; the owner imports them back.
        (files / "exp-be.md").write_text("## db\n\nSQLite first\n", encoding="utf-8")
        (files / "exp-new.md").write_text("## hello\n\nfrom git\n", encoding="utf-8")
        (files / ".hidden.md").write_text("x", encoding="utf-8")
        imported = owner.post("/api/v1/owner/team-runs/memory/import", {"folder": str(project)})
        assert ".relay/memory/exp-new.md" in imported["imported"]
        assert imported["skipped"] == [".hidden.md: its name is not an agent id"]

        async def read() -> list[Any]:
            async with team_session(team_relay, lead.token) as call:
                return [ok(await call("read_memory", agent_id=agent))["content"] for agent in ("exp-be", "exp-new")]

        assert run(read) == ["## db\n\nSQLite first\n", "## hello\n\nfrom git\n"]
        status, refused_body = owner.request("POST", "/api/v1/owner/team-runs/memory/export", {"folder": "/etc"})
        assert status == 400 and "may not use folder" in refused_body["error"] and not Path("/etc/.relay").exists()
        status, refused_body = owner.request("POST", "/api/v1/owner/team-runs/memory/import", {})
        assert status == 400 and "needs folder" in refused_body["error"]
    finally:
        owner.settings(allowed_roots=kept_roots)


def test_the_owner_api_shows_the_runs_and_a_runs_board(team_relay: Relay) -> None:
    lead = team_relay.conversation("lead")
    run_id = "2026-04-01-013-ownr"

    async def work() -> str:
        await started(team_relay, lead.token, run_id)
        async with team_session(team_relay, lead.token) as call:
            first = ok(await call("create_task", agent_id="lead", title="One", priority="high"))["task_id"]
            ok(await call("create_task", agent_id="lead", title="Two", priority="low", depends_on=[first]))
            ok(await call("claim_task", agent_id="fe", task_id=first))
            return str(first)

    first = run(work)
    listed = team_relay.owner.get("/api/v1/owner/team-runs")["runs"]
    line = next(item for item in listed if item["id"] == run_id)
    assert line["tasks"] == {"todo": 1, "in_progress": 1, "in_review": 0, "done": 0}
    assert line["session"] == {"id": lead.session_id, "title": "lead"}
    view = team_relay.owner.get(f"/api/v1/owner/team-runs/{run_id}")["run"]
    assert [task["title"] for task in view["board"]["in_progress"]] == ["One"]
    assert view["board"]["todo"][0]["depends_on"] == [first]
    status, missing = team_relay.owner.request("GET", "/api/v1/owner/team-runs/2026-04-01-099")
    assert status == 404 and missing["code"] == "REMOTE_RELAY_NOT_FOUND"
