"""The team tools of seed 004 (docs/team-runs.md): one table of tools, each with its parameter
table (the single source of its JSON Schema) and its handler; `call` checks the arguments, finds
the run, runs the handler and answers flat: `{success: true, …}` or `{success: false, error}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import peewee as pw
import redis

from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.failures import unexpected
from oar.core.fields import Param, check_fields, refuse_unstorable
from oar.core.ratelimit import TEAM_CALLS, refuse_over_limit
from oar.core.schema import object_schema
from oar.team import access, agents, artifacts, board, memory, messages, records, runs, thoughts
from oar.team.access import Scope
from oar.team.kinds import ArtifactType, Priority, ReviewStatus, WorkStatus, values
from oar.team.models import TeamAgent, TeamRun
from oar.team.runs import NOTHING, TeamCall, checked_agent, refuse

log = logging.getLogger(__name__)

TEXT = defaults.TEAM_TEXT_MAX_CHARS
AGENT_ID = Param("str", required=True, max_length=64, description="the calling agent's id")
RUN_ID = Param("str", max_length=40, description="a team run id, YYYY-MM-DD-NNN-XXXX")


@dataclass
class ToolCall:
    """One call as its handler sees it: who calls, their agent id and the run (when the tool acts in one)."""

    call: TeamCall
    agent: str | None
    args: dict[str, Any]
    found_run: TeamRun | None = None
    # The agent id's binding this call made (taken back when the call is refused).
    new_binding: TeamAgent | None = None

    @property
    def run(self) -> TeamRun:
        if self.found_run is None:
            return self.act_in(runs.active_run(self.call, self.agent_id))
        return self.found_run

    def act_in(self, run: TeamRun) -> TeamRun:
        """Act in `run` as `agent_id`: the agent id must be this conversation's there (bound now if new)."""
        self.new_binding = access.bind_agent(run, self.agent_id, self.call.scope) or self.new_binding
        self.found_run = run
        return run

    @property
    def scope(self) -> Scope:
        return self.call.scope

    @property
    def agent_id(self) -> str:
        if self.agent is None:
            raise refuse(f"This tool needs agent_id (the calling agent's id). {NOTHING}")
        return self.agent


Handler = Callable[[ToolCall], dict[str, Any]]


@dataclass(frozen=True)
class TeamTool:
    name: str
    description: str
    params: dict[str, Param]
    handler: Handler
    # Whether the tool acts in the connection's run (a call before start_session is refused).
    in_run: bool = True
    # Whether it changes something: it counts against the team's writes per minute too.
    writes: bool = False


TOOLS: dict[str, TeamTool] = {}


def tool(name: str, description: str, params: dict[str, Param], *, in_run: bool = True,
         writes: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        TOOLS[name] = TeamTool(name, description, params, handler, in_run, writes)
        return handler

    return register


def definitions() -> list[dict[str, Any]]:
    """`tools/list`: every tool, its input schema generated from its parameter table."""
    return [{"name": spec.name, "description": spec.description, "inputSchema": object_schema(spec.params)}
            for spec in TOOLS.values()]


def call(team_call: TeamCall, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call; every refusal is `{success: false, error}` and changes nothing.

    The order: the arguments, the conversation's rate limits (a call with bad arguments is not
    counted), the run (its team's), the agent id (its conversation's in that run), the tool."""
    spec = TOOLS[name]
    context: ToolCall | None = None
    try:
        refuse_unstorable(arguments, f"{name}: the arguments hold", NOTHING)
        args, ignored = check_fields(name, spec.params, arguments, strict=False, nothing=NOTHING)
        agent = checked_agent("agent_id", args["agent_id"]) if args.get("agent_id") else None
        refuse_over_limit(team_call.runtime, team_call.session_id, is_write=spec.writes, nothing=NOTHING,
                          budget=TEAM_CALLS)
        context = ToolCall(team_call, agent, args)
        if spec.in_run:
            context.act_in(runs.active_run(team_call, context.agent_id))
        body = spec.handler(context)
    except ActionError as error:
        take_back(context)
        return {"success": False, **error.extra, "error": error.message}
    except Exception as error:  # noqa: BLE001 - `unexpected` logs it with its traceback
        take_back(context)
        # Never a stack trace to an agent: the same flat shape, with a reference into the log.
        return {"success": False, "error": unexpected(error, f"team tool {name}", log, running=name).message}
    answer = {"success": True, **body}
    if ignored:
        answer["ignored"] = ignored
    return answer


def take_back(context: ToolCall | None) -> None:
    """A refused or failed call changes nothing: the agent id it bound first is unbound again."""
    if context is None or context.new_binding is None:
        return
    try:
        access.unbind(context.new_binding)
    except pw.PeeweeException as error:  # the database that failed the call may fail this too; the binding stays
        log.warning("team tools: agent id %s stays bound after a failed call (%s)", context.new_binding.agent_id, error)


def failed(body: dict[str, Any]) -> bool:
    return body.get("success") is not True


# Server and runs ------------------------------------------------------------------------------


def run_view_url(call: TeamCall, run_id: str | None) -> str:
    base = call.runtime.config.base_url
    return f"{base}/team-runs/{run_id}" if run_id else f"{base}/team-runs"


@tool("get_server_info", "The dashboard's URL (the run's view on the relay's page) and the server's metadata.",
      {"agent_id": AGENT_ID}, in_run=False)
def get_server_info(ctx: ToolCall) -> dict[str, Any]:
    run_id = runs.declared_run(ctx.call)
    base = urlsplit(ctx.call.runtime.config.base_url)
    port = base.port or (443 if base.scheme == "https" else 80)
    return {"dashboardUrl": run_view_url(ctx.call, run_id), "dashboardAvailable": True, "port": port,
            "sessionId": run_id, "instanceId": ctx.call.runtime.relay_name()}


@tool("start_session", "Declare this connection's active team run; call it once, before the other tools. "
      "Without session_id the relay starts a new run and answers its id.",
      {"agent_id": AGENT_ID, "session_id": RUN_ID}, in_run=False, writes=True)
def start_session(ctx: ToolCall) -> dict[str, Any]:
    run = ctx.act_in(runs.declared(ctx.call, ctx.agent_id, ctx.args.get("session_id")))
    runs.declare(ctx.call, run, ctx.agent_id)
    return {"session_id": run.id, "dashboardUrl": run_view_url(ctx.call, run.id)}


# Messages ----------------------------------------------------------------------------------


@tool("send_message", "Send a message to one agent of the run, or to everyone when `to` is left out.", {
    "agent_id": AGENT_ID,
    "to": Param("str", max_length=64, description="the receiving agent's id; leave out to broadcast"),
    "content": Param("str", required=True, max_length=TEXT, description="the message"),
    "thread_id": Param("str", max_length=200, description="a thread to file it under"),
}, writes=True)
def send_message(ctx: ToolCall) -> dict[str, Any]:
    to = checked_agent("to", ctx.args["to"]) if ctx.args.get("to") else None
    message_id = messages.send(ctx.run, ctx.agent_id, to, ctx.args["content"], ctx.args.get("thread_id"), ctx.call.now)
    return {"message_id": message_id}


@tool("get_messages", "Messages for this agent: those sent to it and broadcasts by others, oldest first.",
      {"agent_id": AGENT_ID})
def get_messages(ctx: ToolCall) -> dict[str, Any]:
    return {"messages": messages.inbox(ctx.run, ctx.agent_id)}


# Tasks --------------------------------------------------------------------------------------

TASK_ID = Param("str", required=True, max_length=64, description="the task's id")
DEPENDS_ON = Param("list", items=Param("str", max_length=64), max_items=defaults.TEAM_DEPENDENCIES_MAX,
                   description="tasks of this run that must be done before this one starts")


@tool("create_task", "Create a task on the run's board. A derived task (parent_task_id) is held by the circuit "
      f"breaker: depth at most {defaults.TEAM_DERIVED_DEPTH}, at most {defaults.TEAM_DERIVED_PER_PARENT} per parent.", {
    "agent_id": AGENT_ID,
    "title": Param("str", required=True, max_length=300, description="the task's title"),
    "description": Param("str", max_length=TEXT, description="what is to be done, with a clear definition of done"),
    "assignee": Param("str", max_length=64, description="the agent it is for"),
    "priority": Param("str", required=True, choices=values(Priority), description="how urgent it is"),
    "depends_on": DEPENDS_ON,
    "idempotency_key": Param("str", max_length=200, description="the same key answers the task it created before"),
    "parent_task_id": Param("str", max_length=64, description="the task this one is derived from"),
    "derived_reason": Param("str", max_length=TEXT, description="why it was derived from its parent"),
}, writes=True)
def create_task(ctx: ToolCall) -> dict[str, Any]:
    task_id, existing = board.create_task(ctx.run, ctx.agent_id, ctx.args, ctx.call.now)
    return {"task_id": task_id, **({"duplicate": True} if existing else {})}


@tool("update_task", "Change a task's status, assignee or dependencies.", {
    "agent_id": AGENT_ID,
    "task_id": TASK_ID,
    "status": Param("str", choices=values(WorkStatus), description="the new status"),
    "assignee": Param("str", max_length=64, description="the new assignee"),
    "depends_on": DEPENDS_ON,
}, writes=True)
def update_task(ctx: ToolCall) -> dict[str, Any]:
    task = board.update_task(ctx.run, ctx.args, ctx.call.now)
    return {"task_id": task.id, "status": task.status, "assignee": task.assignee}


@tool("claim_task", "Claim a task atomically: only a todo task assigned to the caller or to nobody, whose "
      "dependencies are done. Answers claimed, and the reason when not.", {"agent_id": AGENT_ID, "task_id": TASK_ID}, writes=True)
def claim_task(ctx: ToolCall) -> dict[str, Any]:
    claimed, reason = board.claim_task(ctx.run, ctx.agent_id, ctx.args["task_id"], ctx.call.now)
    return {"claimed": claimed, **({"reason": reason} if reason else {})}


@tool("get_all_tasks", "Every task of the run, or the given assignee's.", {
    "agent_id": AGENT_ID,
    "assignee": Param("str", max_length=64, description="only this agent's tasks"),
})
def get_all_tasks(ctx: ToolCall) -> dict[str, Any]:
    return {"tasks": board.all_tasks(ctx.run, ctx.args.get("assignee"))}


# Artifacts and reviews ---------------------------------------------------------------------------


@tool("post_artifact", "Share a deliverable (a spec, a PR, a report…) under a name; the same name again replaces it.", {
    "agent_id": AGENT_ID,
    "name": Param("str", required=True, max_length=200, description='its name, e.g. "login-fe-pr"'),
    "type": Param("str", required=True, choices=values(ArtifactType), description="what kind of artifact it is"),
    "content": Param("str", required=True, max_length=TEXT, description="text or a JSON string"),
    "task_id": Param("str", max_length=64, description="the task it belongs to"),
}, writes=True)
def post_artifact(ctx: ToolCall) -> dict[str, Any]:
    artifact_id, replaced = artifacts.post(ctx.run, ctx.agent_id, ctx.args, ctx.call.now)
    return {"artifact_id": artifact_id, **({"replaced": True} if replaced else {})}


@tool("get_artifact", "An artifact of the run, by name.", {
    "agent_id": AGENT_ID,
    "name": Param("str", required=True, max_length=200, description="the artifact's name"),
})
def get_artifact(ctx: ToolCall) -> dict[str, Any]:
    found = artifacts.by_name(ctx.run, ctx.args["name"])
    if found is None:
        raise refuse("artifact not found", artifact=None)
    return {"artifact": artifacts.artifact_view(found)}


@tool("request_review", "Ask an agent to review an artifact.", {
    "agent_id": AGENT_ID,
    "artifact_id": Param("str", required=True, max_length=64, description="the artifact to review"),
    "reviewer": Param("str", required=True, max_length=64, description="the reviewing agent's id"),
}, writes=True)
def request_review(ctx: ToolCall) -> dict[str, Any]:
    review_id = artifacts.request_review(ctx.run, ctx.agent_id, ctx.args["artifact_id"], ctx.args["reviewer"],
                                         ctx.call.now)
    return {"review_id": review_id}


@tool("submit_review", "Submit a review: only the named reviewer, and only once.", {
    "agent_id": AGENT_ID,
    "review_id": Param("str", required=True, max_length=64, description="the review"),
    "status": Param("str", required=True, choices=(ReviewStatus.APPROVED.value, ReviewStatus.CHANGES_REQUESTED.value),
                    description="the verdict"),
    "comments": Param("str", max_length=TEXT, description="the reviewer's comments"),
}, writes=True)
def submit_review(ctx: ToolCall) -> dict[str, Any]:
    review = artifacts.submit_review(ctx.run, ctx.agent_id, ctx.args["review_id"], ctx.args["status"],
                                     ctx.args.get("comments"), ctx.call.now)
    return {"review": review}


# Memory ---------------------------------------------------------------------------------------

MEMORY_OWNER = Param("str", max_length=64, description="the agent whose memory; leave out for the project's")


@tool("read_memory", "An agent's memory, or the project's (markdown; null when there is none).",
      {"agent_id": MEMORY_OWNER}, in_run=False)
def read_memory(ctx: ToolCall) -> dict[str, Any]:
    return {"content": memory.read(memory.memory_owner(ctx.agent), ctx.scope)}


@tool("write_memory", "Replace the section `key` of an agent's memory (or the project's), or add it.", {
    "agent_id": MEMORY_OWNER,
    "key": Param("str", required=True, max_length=200, description='the section, e.g. "tech-stack"'),
    "content": Param("str", required=True, max_length=TEXT, description="the section's new text"),
}, in_run=False, writes=True)
def write_memory(ctx: ToolCall) -> dict[str, Any]:
    memory.write_section(memory.memory_owner(ctx.agent), ctx.args["key"], ctx.args["content"], ctx.call.now, ctx.scope)
    return {}


@tool("append_memory", "Add a dated entry to the agent's own memory.", {
    "agent_id": Param("str", required=True, max_length=64, description="the agent whose memory (required)"),
    "content": Param("str", required=True, max_length=TEXT, description="what to add"),
}, in_run=False, writes=True)
def append_memory(ctx: ToolCall) -> dict[str, Any]:
    memory.append(memory.memory_owner(ctx.agent_id), ctx.args["content"], ctx.call.now, ctx.scope)
    return {}


# Run records ------------------------------------------------------------------------------------


@tool("save_session_summary", "Save a run's summary (its lasting record, beside the board that stays too).", {
    "agent_id": AGENT_ID,
    "session_id": Param("str", required=True, max_length=40, description="the run, YYYY-MM-DD-NNN-XXXX"),
    "summary": Param("str", required=True, max_length=TEXT, description="the summary"),
}, in_run=False, writes=True)
def save_session_summary(ctx: ToolCall) -> dict[str, Any]:
    run = ctx.act_in(runs.ensure_run(ctx.call, runs.checked_run_id(ctx.args["session_id"]), ctx.agent_id))
    records.save_summary(run, ctx.agent_id, ctx.args["summary"], ctx.call.now)
    return {}


@tool("list_sessions", "Team run ids, newest first.", {"agent_id": AGENT_ID}, in_run=False)
def list_sessions(ctx: ToolCall) -> dict[str, Any]:
    return {"sessions": [run.id for run in runs.runs_newest_first(ctx.scope)]}


@tool("get_session_summary", "A run's saved summary.", {
    "agent_id": AGENT_ID,
    "session_id": Param("str", required=True, max_length=40, description="the run"),
}, in_run=False)
def get_session_summary(ctx: ToolCall) -> dict[str, Any]:
    return {"summary": records.summary_of(ctx.scope, ctx.args["session_id"])}


@tool("save_orchestrator_state", "Save the orchestrator's event-loop state (a JSON string) for this run.", {
    "agent_id": AGENT_ID,
    "state": Param("str", required=True, max_length=TEXT, description="the state, serialised as JSON"),
}, writes=True)
def save_orchestrator_state(ctx: ToolCall) -> dict[str, Any]:
    try:
        json.loads(ctx.args["state"])
    except ValueError as error:
        raise refuse(f"state must be a JSON string (it did not parse: {error}). {NOTHING}") from None
    records.save_state(ctx.run, ctx.agent_id, ctx.args["state"], ctx.call.now)
    return {}


@tool("get_orchestrator_state", "The orchestrator's saved state for this run (null when none).", {"agent_id": AGENT_ID})
def get_orchestrator_state(ctx: ToolCall) -> dict[str, Any]:
    return {"state": records.state_of(ctx.run)}


# Agents ---------------------------------------------------------------------------------------


@tool("list_agents", "The run's team, from the owner's .relay/session-agents-<run>.yml (system prompts included).", {
    "agent_id": AGENT_ID,
    "session_id": Param("str", max_length=40, description="the run whose team; leave out for this connection's run"),
}, in_run=False)
def list_agents(ctx: ToolCall) -> dict[str, Any]:
    given = ctx.args.get("session_id")
    run_id = runs.checked_run_id(given) if given else runs.active_run(ctx.call, ctx.agent_id).id
    if given and runs.run_by_id(run_id) is not None and runs.visible_run(ctx.scope, run_id) is None:
        # Another team's run: as if there were none (a run not declared yet may have its file).
        raise refuse(f'There is no team run "{run_id}" for this conversation. Nothing was read.')
    team = agents.team(ctx.call.runtime.config.data_dir, run_id)
    if team is None:
        if given:
            raise refuse(f"Team run {run_id} has no team file (.relay/session-agents-{run_id}.yml in the relay's data "
                         "folder). Nothing was read.")
        return {"agents": [], "note": f"Team run {run_id} has no team file (.relay/session-agents-{run_id}.yml)."}
    return {"agents": team}


@tool("list_pool_agents", "Every pool agent a team may be made of (.relay/agents.pool.yml), without system prompts.",
      {"agent_id": AGENT_ID}, in_run=False)
def list_pool_agents(ctx: ToolCall) -> dict[str, Any]:
    found = agents.pool(ctx.call.runtime.config.data_dir)
    if found is None:
        return {"agents": [], "note": "The relay has no pool file (.relay/agents.pool.yml in its data folder)."}
    return {"agents": agents.pool_metadata(found)}


# Thoughts -------------------------------------------------------------------------------------


@tool("broadcast_thinking", "Show what you are about to do on the run's live Thoughts panel (not stored).", {
    "agent_id": AGENT_ID,
    "content": Param("str", required=True, max_length=defaults.TEAM_THOUGHT_MAX_CHARS,
                     description="what the agent is about to do or thinking"),
}, writes=True)
def broadcast_thinking(ctx: ToolCall) -> dict[str, Any]:
    rt = ctx.call.runtime
    try:
        thoughts.broadcast(rt.redis, rt.config.namespace, ctx.run.id, ctx.agent_id, ctx.args["content"], ctx.call.now,
                           rt.time("TEAM_THOUGHTS_KEEP_SECONDS"))
    except redis.RedisError as error:
        raise refuse(f"The thought was not shown: the relay's Redis did not answer ({type(error).__name__}). "
                     "Nothing was stored.") from None
    return {}
