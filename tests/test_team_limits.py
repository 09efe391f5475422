"""The team tools' rate limits and caps (docs/team-runs.md#limits), on the shared relay over MCP:
calls and writes per minute per conversation, and what a run, a conversation and a team may
store. A call over a cap is refused in the team tools' shape and writes nothing. The counts below
a cap are written into the database first (the relay's own tables), so that a test does not make
ten thousand calls to reach one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from oar.core import defaults
from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.team.access import team_root
from oar.team.models import TeamAgent, TeamArtifact, TeamMemory, TeamMessage, TeamReview, TeamRun
from tests.support.clients import Agent
from tests.support.relays import Relay
from tests.support.snapshots import snapshot
from tests.support.team import Call, as_agent, ok, refused

RUN = "2026-06-02-001-caps"


@pytest.fixture
def lead(relay: Relay) -> Agent:
    agent = relay.conversation("lead")

    async def start(call: Call) -> None:
        ok(await call("start_session", agent_id="lead", session_id=RUN))

    as_agent(relay, agent.token, start)
    return agent


def seed(model: Any, rows: list[dict[str, Any]]) -> None:
    with database.connection_context(), database.atomic():
        for at in range(0, len(rows), 500):
            model.insert_many(rows[at:at + 500]).execute()


def test_team_calls_and_writes_per_minute_are_limited_per_conversation(relay: Relay, lead: Agent) -> None:
    relay.owner.settings(team_calls_per_minute=6, team_writes_per_minute=2)
    other = relay.conversation("other")

    async def steps(call: Call) -> None:
        # Bad arguments are refused before they count.
        refused(await call("send_message", agent_id="lead"), "send_message needs content")
        ok(await call("send_message", agent_id="lead", content="one"))
        ok(await call("create_task", agent_id="lead", title="two", priority="low"))
        limited = await call("send_message", agent_id="lead", content="three")
        refused(limited, "too many team tool calls in the last minute", "limits: 6 calls, 2 writes",
                "Nothing was changed.", extra=("retryAfterSeconds",))
        assert 1 <= limited["retryAfterSeconds"] <= 60
        # Reads go on until the calls' limit.
        for _ in range(4):
            ok(await call("get_all_tasks", agent_id="lead"))
        refused(await call("get_messages", agent_id="lead"), "too many team tool calls", extra=("retryAfterSeconds",))

    as_agent(relay, lead.token, steps)
    with database.connection_context():
        assert [row.content for row in TeamMessage.select()] == ["one"]

    async def other_steps(call: Call) -> None:
        """Another conversation has limits of its own."""
        ok(await call("start_session", agent_id="other"))

    as_agent(relay, other.token, other_steps)


def test_a_runs_stored_text_is_capped(relay: Relay, lead: Agent) -> None:
    limit = defaults.TEAM_RUN_TEXT_MAX_CHARS
    with database.connection_context():
        TeamRun.update(text_chars=limit - 10).where(TeamRun.id == RUN).execute()
    before = snapshot(relay)

    async def over(call: Call) -> None:
        for tool, arguments in (
            ("send_message", {"content": "x" * 11}),
            ("create_task", {"title": "t" * 11, "priority": "low"}),
            ("post_artifact", {"name": "spec", "type": "document", "content": "x" * 11}),
            ("save_orchestrator_state", {"state": '"' + "x" * 9 + '"'}),
            ("save_session_summary", {"session_id": RUN, "summary": "x" * 11}),
        ):
            refused(await call(tool, agent_id="lead", **arguments), f"stores {limit:,} characters of text already",
                    "Nothing was changed.")

    as_agent(relay, lead.token, over)
    assert snapshot(relay) == before

    async def fits(call: Call) -> None:
        ok(await call("post_artifact", agent_id="lead", name="spec", type="document", content="x" * 10))
        # Replacing it with shorter text gives characters back.
        ok(await call("post_artifact", agent_id="lead", name="spec", type="document", content="x" * 4))
        ok(await call("send_message", agent_id="lead", content="x" * 6))

    as_agent(relay, lead.token, fits)
    with database.connection_context():
        assert TeamRun.get(TeamRun.id == RUN).text_chars == limit


def test_messages_artifacts_reviews_and_agent_ids_of_a_run_are_capped(relay: Relay, lead: Agent) -> None:
    now = utcnow()
    with database.connection_context():
        session_id = TeamAgent.get((TeamAgent.run == RUN) & (TeamAgent.agent_id == "lead")).session_id
    seed(TeamMessage, [{"id": f"tmsg_seed{n}", "run": RUN, "from_agent": "lead", "content": "m", "created_at": now}
                       for n in range(defaults.TEAM_MESSAGES_PER_RUN - 1)])
    seed(TeamArtifact, [{"id": f"art_seed{n}", "run": RUN, "name": f"seed-{n}", "type": "document", "content": "a",
                         "created_by": "lead", "created_at": now, "updated_at": now}
                        for n in range(defaults.TEAM_ARTIFACTS_PER_RUN - 1)])
    seed(TeamReview, [{"id": f"rev_seed{n}", "run": RUN, "artifact": "art_seed0", "requested_by": "lead",
                       "reviewer": "qa", "status": "pending", "created_at": now}
                      for n in range(defaults.TEAM_REVIEWS_PER_RUN - 1)])
    seed(TeamAgent, [{"run": RUN, "agent_id": f"seed{n}", "session_id": session_id, "bound_at": now}
                     for n in range(defaults.TEAM_AGENTS_PER_RUN - 2)])  # "lead" is one already

    async def steps(call: Call) -> None:
        ok(await call("send_message", agent_id="lead", content="the last one"))
        refused(await call("send_message", agent_id="lead", content="one more"),
                f"has {defaults.TEAM_MESSAGES_PER_RUN:,} messages, the most a run may have", "Nothing was changed.")
        ok(await call("post_artifact", agent_id="lead", name="last", type="pr", content="diff"))
        refused(await call("post_artifact", agent_id="lead", name="more", type="pr", content="diff"),
                f"has {defaults.TEAM_ARTIFACTS_PER_RUN:,} artifacts")
        ok(await call("post_artifact", agent_id="lead", name="last", type="pr", content="diff v2"))  # a replacement
        ok(await call("request_review", agent_id="lead", artifact_id="art_seed1", reviewer="qa"))
        refused(await call("request_review", agent_id="lead", artifact_id="art_seed1", reviewer="qa"),
                f"has {defaults.TEAM_REVIEWS_PER_RUN:,} reviews")
        ok(await call("get_all_tasks", agent_id="the-100th"))
        refused(await call("get_all_tasks", agent_id="the-101st"),
                f"has {defaults.TEAM_AGENTS_PER_RUN} agent ids already")

    as_agent(relay, lead.token, steps)
    with database.connection_context():
        assert TeamMessage.select().where(TeamMessage.run == RUN).count() == defaults.TEAM_MESSAGES_PER_RUN
        assert TeamArtifact.select().where(TeamArtifact.run == RUN).count() == defaults.TEAM_ARTIFACTS_PER_RUN
        assert TeamReview.select().where(TeamReview.run == RUN).count() == defaults.TEAM_REVIEWS_PER_RUN
        assert TeamAgent.select().where(TeamAgent.run == RUN).count() == defaults.TEAM_AGENTS_PER_RUN


def test_a_conversation_starts_so_many_runs_a_day(relay: Relay, lead: Agent) -> None:
    now = utcnow()
    with database.connection_context():
        session_id = TeamRun.get(TeamRun.id == RUN).started_in_session
        root = team_root(session_id)
    # Today's runs (one is RUN), and one of yesterday that does not count.
    seed(TeamRun, [{"id": f"2026-06-03-{n:03d}-seed", "started_by": "lead", "started_in_session": session_id,
                    "team_root": root, "created_at": now}
                   for n in range(1, defaults.TEAM_RUNS_PER_CONVERSATION_PER_DAY - 1)])
    seed(TeamRun, [{"id": "2026-06-02-999-old1", "started_by": "lead", "started_in_session": session_id,
                    "team_root": root, "created_at": now - timedelta(days=1)}])

    async def steps(call: Call) -> None:
        ok(await call("start_session", agent_id="lead"))
        refused(await call("start_session", agent_id="lead"),
                f"started {defaults.TEAM_RUNS_PER_CONVERSATION_PER_DAY} team runs today", "Nothing was changed.")
        refused(await call("save_session_summary", agent_id="lead", session_id="2026-06-04-001", summary="s"),
                "team runs today")
        ok(await call("start_session", agent_id="lead", session_id="2026-06-03-001-seed"))  # one of its own: fine

    as_agent(relay, lead.token, steps)
    with database.connection_context():
        assert TeamRun.select().where(TeamRun.created_at >= now.replace(hour=0, minute=0, second=0,
                                                                        microsecond=0)).count() == \
            defaults.TEAM_RUNS_PER_CONVERSATION_PER_DAY


def test_a_team_keeps_so_many_memory_files(relay: Relay, lead: Agent) -> None:
    now = utcnow()
    with database.connection_context():
        root = TeamRun.get(TeamRun.id == RUN).team_root
    seed(TeamMemory, [{"owner": f"seed{n}", "content": "m", "updated_at": now, "team_root": root}
                      for n in range(defaults.TEAM_MEMORY_FILES_PER_TEAM - 1)])

    async def steps(call: Call) -> None:
        ok(await call("write_memory", agent_id="last", key="k", content="v"))
        refused(await call("write_memory", agent_id="one-more", key="k", content="v"),
                f"keeps {defaults.TEAM_MEMORY_FILES_PER_TEAM} memory files", "Nothing was changed.")
        refused(await call("append_memory", agent_id="one-more", content="v"), "memory files")
        ok(await call("append_memory", agent_id="seed0", content="a file it keeps"))

    as_agent(relay, lead.token, steps)
    with database.connection_context():
        assert TeamMemory.select().where(TeamMemory.team_root == root).count() == defaults.TEAM_MEMORY_FILES_PER_TEAM
