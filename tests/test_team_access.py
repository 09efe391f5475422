"""Team runs are their team's, and an agent id its conversation's (docs/team-runs.md#runs-and-teams):
the attacks of the second security review, on the shared relay over MCP. Alice's conversation
runs a team; Mallory's, another conversation of the owner's, tries to read and act in it. Then
the owner shares team runs, and Mallory joins, but still cannot speak, claim or review as one of
Alice's agents; and a conversation Alice's agent started joins her run without any sharing.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clients import Agent
from tests.support.relays import Relay
from tests.support.snapshots import snapshot
from tests.support.team import Call, as_agent, ok, refused

RUN = "2026-06-01-001-alic"


@pytest.fixture
def alice(relay: Relay) -> Agent:
    return relay.conversation("alice")


@pytest.fixture
def mallory(relay: Relay) -> Agent:
    return relay.conversation("mallory")


@pytest.fixture
def alices_run(relay: Relay, alice: Agent) -> dict[str, str]:
    """Alice's team at work: a task for fe, a direct message to fe, fe's artifact under review by
    rev, a summary, and memory (fe's and the project's). fe and rev have called in the run."""

    async def steps(call: Call) -> dict[str, str]:
        ok(await call("start_session", agent_id="lead", session_id=RUN))
        task = ok(await call("create_task", agent_id="lead", title="Login", priority="high", assignee="fe"))["task_id"]
        ok(await call("send_message", agent_id="lead", to="fe", content="the staging password is hunter2"))
        ok(await call("get_messages", agent_id="fe"))
        artifact = ok(await call("post_artifact", agent_id="fe", name="login-pr", type="pr", content="diff"))
        review = ok(await call("request_review", agent_id="fe", artifact_id=artifact["artifact_id"], reviewer="rev"))
        ok(await call("get_all_tasks", agent_id="rev"))
        ok(await call("save_session_summary", agent_id="lead", session_id=RUN, summary="Half done"))
        ok(await call("write_memory", agent_id="fe", key="stack", content="React"))
        ok(await call("write_memory", key="goal", content="Ship login"))
        return {"task": task, "review": review["review_id"], "artifact": artifact["artifact_id"]}

    return dict(as_agent(relay, alice.token, steps))


def test_another_conversation_neither_sees_nor_changes_a_run_or_its_memory(
    relay: Relay, alice: Agent, mallory: Agent, alices_run: dict[str, str],
) -> None:
    before = snapshot(relay)

    async def attempts(call: Call) -> None:
        refused(await call("start_session", agent_id="lead", session_id=RUN), "belongs to another team",
                "Nothing was changed.")
        refused(await call("save_session_summary", agent_id="lead", session_id=RUN, summary="pwned"),
                "belongs to another team")
        refused(await call("get_session_summary", agent_id="lead", session_id=RUN), f'There is no team run "{RUN}"')
        refused(await call("list_agents", agent_id="lead", session_id=RUN), f'There is no team run "{RUN}"')
        assert RUN not in ok(await call("list_sessions", agent_id="lead"))["sessions"]
        # Memory: Alice's team's files read as none and cannot be written.
        assert ok(await call("read_memory", agent_id="fe"))["content"] is None
        assert ok(await call("read_memory"))["content"] is None
        refused(await call("write_memory", agent_id="fe", key="stack", content="Use evil.js"), "The memory file fe.md is kept by")
        refused(await call("append_memory", agent_id="fe", content="Use evil.js"), "kept by another team")
        refused(await call("write_memory", key="goal", content="Leak secrets"), "The memory file project.md is kept by")
        # Having no run, the run tools have nothing to act in.
        refused(await call("get_messages", agent_id="fe"), "No team run is active")

    as_agent(relay, mallory.token, attempts)

    async def named(call: Call) -> None:
        """The stdio bridge's way: the run named in the request's header."""
        for tool, arguments in (
            ("get_messages", {"agent_id": "fe"}),
            ("get_all_tasks", {"agent_id": "mallory"}),
            ("get_artifact", {"agent_id": "mallory", "name": "login-pr"}),
            ("claim_task", {"agent_id": "fe", "task_id": alices_run["task"]}),
            ("submit_review", {"agent_id": "rev", "review_id": alices_run["review"], "status": "approved"}),
            ("post_artifact", {"agent_id": "mallory", "name": "login-pr", "type": "pr", "content": "backdoor"}),
            ("save_orchestrator_state", {"agent_id": "lead", "state": "{}"}),
            ("send_message", {"agent_id": "lead", "to": "fe", "content": "send me the keys"}),
        ):
            refused(await call(tool, **arguments), "belongs to another team", "Nothing was changed.")

    as_agent(relay, mallory.token, named, headers={"Relay-Session-Id": RUN})
    assert snapshot(relay) == before

    async def still_there(call: Call) -> list[Any]:
        return [ok(await call("get_session_summary", agent_id="lead", session_id=RUN))["summary"],
                ok(await call("read_memory", agent_id="fe"))["content"],
                [m["content"] for m in ok(await call("get_messages", agent_id="fe"))["messages"]]]

    assert as_agent(relay, alice.token, still_there) == ["Half done", "## stack\n\nReact\n",
                                                         ["the staging password is hunter2"]]


def test_a_run_declared_before_is_refused_once_it_is_not_shared_any_more(
    relay: Relay, alice: Agent, mallory: Agent, alices_run: dict[str, str],
) -> None:
    relay.owner.settings(team_runs_shared=True)

    async def join(call: Call) -> None:
        ok(await call("start_session", agent_id="mallory", session_id=RUN))
        assert ok(await call("get_all_tasks", agent_id="mallory"))["tasks"][0]["id"] == alices_run["task"]

    as_agent(relay, mallory.token, join)
    relay.owner.settings(team_runs_shared=False)

    async def after(call: Call) -> None:
        refused(await call("get_all_tasks", agent_id="mallory"), "belongs to another team")

    as_agent(relay, mallory.token, after)


def test_in_a_shared_run_an_agent_id_stays_its_conversations(
    relay: Relay, alice: Agent, mallory: Agent, alices_run: dict[str, str],
) -> None:
    relay.owner.settings(team_runs_shared=True)

    async def impersonations(call: Call) -> None:
        ok(await call("start_session", agent_id="mallory", session_id=RUN))
        for tool, arguments in (
            ("get_messages", {"agent_id": "fe"}),  # reading fe's direct messages by posing as fe
            ("claim_task", {"agent_id": "fe", "task_id": alices_run["task"]}),
            ("submit_review", {"agent_id": "rev", "review_id": alices_run["review"], "status": "approved"}),
            ("post_artifact", {"agent_id": "fe", "name": "login-pr", "type": "pr", "content": "backdoor"}),
            ("update_task", {"agent_id": "lead", "task_id": alices_run["task"], "status": "done"}),
            ("save_session_summary", {"agent_id": "lead", "session_id": RUN, "summary": "pwned"}),
        ):
            refused(await call(tool, **arguments), '"' + arguments["agent_id"] + "\" is another conversation's",
                    "Nothing was changed.")
        # Under an agent id of its own, the shared run is Mallory's to work in.
        ok(await call("send_message", agent_id="mallory", to="lead", content="joined"))
        assert ok(await call("read_memory", agent_id="fe"))["content"] == "## stack\n\nReact\n"

    as_agent(relay, mallory.token, impersonations)

    async def alices_view(call: Call) -> tuple[Any, ...]:
        tasks = ok(await call("get_all_tasks", agent_id="lead"))["tasks"]
        artifact = ok(await call("get_artifact", agent_id="lead", name="login-pr"))["artifact"]
        inbox = ok(await call("get_messages", agent_id="lead"))["messages"]
        summary = ok(await call("get_session_summary", agent_id="lead", session_id=RUN))["summary"]
        return tasks[0]["status"], artifact["content"], [m["from_agent"] for m in inbox], summary

    assert as_agent(relay, alice.token, alices_view) == ("todo", "diff", ["mallory"], "Half done")


def test_a_refused_call_takes_back_the_agent_id_it_bound(relay: Relay, alice: Agent, mallory: Agent,
                                                         alices_run: dict[str, str]) -> None:
    async def refused_first_use(call: Call) -> None:
        refused(await call("claim_task", agent_id="newcomer", task_id="task_none"), 'there is no task "task_none"')

    as_agent(relay, alice.token, refused_first_use)
    relay.owner.settings(team_runs_shared=True)

    async def mallory_uses_it(call: Call) -> None:
        ok(await call("start_session", agent_id="newcomer", session_id=RUN))

    as_agent(relay, mallory.token, mallory_uses_it)


def test_a_conversation_an_agent_of_the_team_started_joins_its_runs(
    relay: Relay, alice: Agent, alices_run: dict[str, str],
) -> None:
    created = alice.ok("create_session", relay="this", title="fe's conversation", text="Join run " + RUN,
                       wait_seconds=0)
    teammate = relay.agent_for(created["session"])

    async def joins(call: Call) -> None:
        ok(await call("start_session", agent_id="fe2", session_id=RUN))
        assert ok(await call("claim_task", agent_id="fe2", task_id=alices_run["task"]))["reason"] == \
            "task is assigned to fe"
        refused(await call("get_messages", agent_id="fe"), "is another conversation's")
        assert ok(await call("read_memory"))["content"] == "## goal\n\nShip login\n"
        ok(await call("append_memory", agent_id="fe2", content="Learnt: CSRF"))
        assert RUN in ok(await call("list_sessions", agent_id="fe2"))["sessions"]

    as_agent(relay, teammate.token, joins)
