"""OpenClaw's session tools over HTTP and MCP (docs/openclaw.md): `POST /api/v1/openclaw/<tool>`,
the MCP endpoint `/mcp/openclaw`, and the owner's per-session send policy.

The session token authenticates as for `/mcp` and `relay_tool`; each call runs `oar.openclaw.openclaw_tools`,
which dispatches it as relay_tool's actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from oar.actions.context import CallContext
from oar.core.errors import STATUS_BY_CODE, invalid
from oar.core.fields import Param, check_fields
from oar.core.waiting import watched_by
from oar.openclaw import openclaw_tools, policy_store
from oar.openclaw.params import DESCRIPTIONS, PARAMS, TOOL_NAMES, tool_list
from oar.web import mcp_wire, runtime
from oar.web.auth import require_agent, require_owner
from oar.web.bodies import json_body
from oar.web.connection import connection_watch
from oar.web.described import MAYBE_TEXT, OWNER, SESSION, TEXT, Operation, described
from oar.web.mcp import add_endpoint

blueprint = Blueprint("openclaw", __name__)


def run_tool(ctx: CallContext, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    _status, body = openclaw_tools.call(ctx, name, arguments)
    return body


OPENCLAW_TOOLS = mcp_wire.ToolSet(
    server_name="oar-relay-openclaw",
    instructions=(
        "OpenClaw's session tools on this relay, as the session whose token this connection uses: "
        "sessions_list, sessions_history, sessions_send, sessions_spawn. Your own conversation is \"main\"."
    ),
    tools=tool_list,
    call=run_tool,
    failed=openclaw_tools.failed,
    # The tools that wait (for a reply, for a child's first answer): a client of the Tasks extension gets a task for them.
    may_wait=lambda name, _arguments: name in ("sessions_send", "sessions_spawn"),
)

add_endpoint(blueprint, "/mcp/openclaw", OPENCLAW_TOOLS)

# What every tool's answer may hold; the fields of each are in docs/openclaw.md.
ANSWER = {
    "type": "object",
    "properties": {"ok": {"const": True}, "status": TEXT, "runId": TEXT},
}
# Every refusal a tool can give: the relay's, in the reference's shape (docs/openclaw.md#results).
REFUSALS = tuple(sorted({status for status in STATUS_BY_CODE.values() if status < 500} | {503}))


def _tool_view(name: str) -> Callable[[], ResponseReturnValue]:
    def view() -> ResponseReturnValue:
        caller = require_agent()
        payload = json_body()
        if not isinstance(payload, dict):
            payload = {} if payload is None and not request.get_data() else payload
        with watched_by(connection_watch(request.environ)):
            status, body = openclaw_tools.call(CallContext(runtime=runtime(), caller_session=caller, via="http"), name, payload)
        return jsonify(body), status

    view.__name__ = name
    return described(Operation(
        summary=DESCRIPTIONS[name], caller=SESSION, tag="openclaw", body=PARAMS[name], strict=False,
        answer_schema=ANSWER, errors=REFUSALS,
    ))(view)


for _name in TOOL_NAMES:
    blueprint.add_url_rule(f"/api/v1/openclaw/{_name}", _name, _tool_view(_name), methods=["POST"])


SEND_POLICY_FIELDS = {
    "send_policy": Param(
        "str", required=True, choices=policy_store.CHOICES,
        description="allow or deny sends to this session, or inherit the owner's rules",
    ),
}


@blueprint.put("/api/v1/owner/sessions/<session_id>/send-policy")
@described(Operation(
    summary="Set a session's own send policy for sessions_send: allow, deny or inherit (docs/openclaw.md#send-policy)",
    caller=OWNER, tag="owner", body=SEND_POLICY_FIELDS, answer={"session": TEXT, "sendPolicy": MAYBE_TEXT},
    errors=(400, 404),
))
def set_send_policy(session_id: str) -> ResponseReturnValue:
    require_owner(runtime().config)
    payload = json_body()
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object: {send_policy: allow | deny | inherit}. Nothing was changed.")
    args, _ignored = check_fields(
        "send policy", SEND_POLICY_FIELDS, payload, strict=True, nothing="Nothing was changed."
    )
    session, stored = policy_store.set_policy(session_id, args["send_policy"], runtime().relay_name())
    return jsonify({"ok": True, "session": session.id, "sendPolicy": stored})
