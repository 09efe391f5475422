"""The team tools of seed 004 over MCP at `/mcp/team` (docs/team-runs.md), authenticated by a
session token as `/mcp` is.

The run a call acts in is the one the token's connection declared with `start_session`, or the
one the request names in `Relay-Session-Id` (the stdio bridge's `RELAY_SESSION_ID`); either
must be a run of the calling conversation's team (oar.team.access). The tools
never wait, so every call is answered within its request.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from oar.actions.context import CallContext
from oar.core import ids
from oar.team import access, tools
from oar.team.runs import RUN_HEADER, TeamCall
from oar.web import mcp_wire
from oar.web.auth import bearer_token
from oar.web.mcp import add_endpoint
from oar.web.mcp_wire import ToolSet

blueprint = Blueprint("mcp_team", __name__)


def run_team_tool(ctx: CallContext, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    token = bearer_token() or ""  # require_agent has accepted it before any call runs
    named = request.headers.get(RUN_HEADER, "").strip() or None
    scope = access.scope_of(ctx.caller_session.id, shared=bool(ctx.settings["team_runs_shared"]))
    call = TeamCall(runtime=ctx.runtime, session_id=ctx.caller_session.id, token_hash=ids.hash_token(token),
                    named_run=named, now=ctx.now, scope=scope)
    return tools.call(call, name, arguments)


TEAM_TOOLS = ToolSet(
    server_name=f"{mcp_wire.SERVER_NAME}-team",
    instructions=(
        "Team coordination tools: call start_session {agent_id, session_id} once first; every call carries your "
        "agent_id. Results are flat JSON: success true with the fields, or success false and error."
    ),
    tools=tools.definitions,
    call=run_team_tool,
    failed=tools.failed,
    waits=False,
)

add_endpoint(blueprint, "/mcp/team", TEAM_TOOLS)
