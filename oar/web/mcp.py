"""MCP over Streamable HTTP at `/mcp` (docs/mcp.md): the one tool `relay_tool`, run by the dispatcher.

`add_endpoint` serves any `ToolSet` the same way, so the compatibility tool sets (each a
blueprint of its own at `/mcp/<name>`) share this transport, its auth and its waits.

Stateless: each POST holds one JSON-RPC message and is answered on its own. Both eras are
served: handshake-era clients (`initialize`, 2024-11-05 … 2025-11-25) here, per-request
clients (2026-07-28, with the Tasks extension) by `mcp_modern`. No server-initiated stream
and no session: GET and DELETE answer 405.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import Headers
from werkzeug.exceptions import RequestEntityTooLarge

from oar import __version__
from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch, short_read_gate
from oar.actions.registry import ACTIONS
from oar.actions.schema import relay_tool
from oar.core import ids
from oar.core.errors import ActionError
from oar.sessions.sessions import Session
from oar.turns import outside
from oar.web import mcp_modern, mcp_wire, runtime
from oar.web.auth import agent_of, require_agent, token_in
from oar.web.bodies import Answer, JsonAnswer, flask_response
from oar.web.mcp_calls import run_call
from oar.web.mcp_wire import ToolSet, WireError
from oar.web.plain_request import PlainRequest

blueprint = Blueprint("mcp", __name__)

PROTOCOL_HEADER = "MCP-Protocol-Version"
# Methods that may come before the client knows the protocol version (no header to check).
BEFORE_VERSION = ("initialize", "server/discover")


def refused(error: ActionError) -> JsonAnswer:
    """No token or a bad one: HTTP 401 in the relay's shape, before any MCP exchange."""
    challenge = (("WWW-Authenticate", 'Bearer realm="oar-relay"'),) if error.status == 401 else ()
    return JsonAnswer(error.to_dict(), error.status, challenge)


def no_stream() -> ResponseReturnValue:
    """No server-initiated stream and no sessions to end: 405, as the transport says."""
    require_agent()
    return JsonAnswer(
        rpc_error(None, mcp_wire.INVALID_REQUEST, "Method Not Allowed: POST one JSON-RPC message."), 405, (("Allow", "POST"),),
    ).response()


def add_endpoint(on: Blueprint, path: str, tools: ToolSet) -> None:
    """Serve `tools` over Streamable HTTP at `path`, authenticated by a session token."""
    endpoint = path.strip("/").replace("/", "_")

    def post() -> ResponseReturnValue:
        return flask_response(answer_post(tools, PlainRequest.of_flask()))

    on.register_error_handler(ActionError, lambda error: refused(error).response())
    on.add_url_rule(path, f"{endpoint}_no_stream", no_stream, methods=["GET", "DELETE"])
    on.add_url_rule(path, f"{endpoint}_post", post, methods=["POST"])


def answer_post(tools: ToolSet, http: PlainRequest) -> Answer:
    """A POST to an endpoint serving `tools`, by Flask's view or the call lane (oar/web/call_lane.py)."""
    try:
        return serve(tools, http)
    except ActionError as error:
        return refused(error)


def serve(tools: ToolSet, http: PlainRequest) -> Answer:
    token = token_in(http.headers.get("Authorization"))
    caller = agent_of(token)
    if tools.recognises_outside:
        # An MCP client holding an owner's conversation that never had a turn is that conversation's
        # agent, outside the relay (docs/sessions.md#agents-outside-the-relay).
        outside.recognise(caller)
    try:
        body = http.read_body()
    except RequestEntityTooLarge:
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        return JsonAnswer(rpc_error(None, mcp_wire.INVALID_REQUEST, f"Request too large: at most {limit} bytes."), 413)
    modern = False
    try:
        message = mcp_wire.parse(body)
        if not message.is_request:
            return Response(status=202)  # notifications (initialized, cancelled) and responses need no answer
        modern = mcp_modern.is_modern(message, http.headers)
        if modern:
            return mcp_modern.answer(tools, caller, ids.hash_token(token or ""), message, http)
        version = protocol_version(message.method, http.headers)
        return answer(tools, caller, message, version, http)
    except WireError as error:
        if modern:
            status = mcp_modern.http_status(error.code)
        else:
            status = 400 if error.code in (mcp_wire.PARSE_ERROR, mcp_wire.INVALID_REQUEST) else 200
        return JsonAnswer(rpc_error(error.request_id, error.code, error.message, error.data), status)


def protocol_version(method: str | None, headers: Headers) -> str:
    """The revision this request speaks, from its header; an unknown one is refused."""
    sent = headers.get(PROTOCOL_HEADER)
    if method in BEFORE_VERSION or sent is None:
        return sent if sent in mcp_wire.PROTOCOL_VERSIONS else mcp_wire.ASSUMED_PROTOCOL_VERSION
    if sent not in mcp_wire.PROTOCOL_VERSIONS:
        raise WireError(
            mcp_wire.INVALID_REQUEST,
            f"Bad Request: unsupported {PROTOCOL_HEADER} {sent[:40]!r}; supported: {', '.join(mcp_wire.SUPPORTED_VERSIONS)}.",
        )
    return sent


def answer(tools: ToolSet, caller: Session, message: mcp_wire.Message, version: str, http: PlainRequest) -> Answer:
    """A request of the handshake era."""
    request_id = message.request_id
    try:
        if message.method == "initialize":
            return JsonAnswer(mcp_wire.result(request_id, mcp_wire.initialize_result(message.params, __version__, tools)))
        if message.method == "ping":
            return JsonAnswer(mcp_wire.result(request_id, {}))
        if message.method == "tools/list":
            return JsonAnswer(mcp_wire.result(request_id, mcp_wire.tool_list(tools)))
        if message.method == "tools/call":
            call = mcp_wire.tool_call(message.params, tools)

            def shape(body: dict[str, Any]) -> dict[str, Any]:
                return mcp_wire.tool_result(body, version, failed=tools.failed(body))

            return run_call(tools, runtime(), caller, call, request_id, shape, http)
    except WireError as error:
        raise WireError(error.code, error.message, request_id, error.data) from None
    raise WireError(mcp_wire.METHOD_NOT_FOUND, f"Method not found: {str(message.method)[:80]}", request_id)


def rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return mcp_wire.error(request_id, code, message, data)


def relay_tools() -> list[dict[str, Any]]:
    """The one relay_tool, its schema generated from the registry."""
    definition = relay_tool()
    return [{"name": definition.name, "description": definition.description, "inputSchema": definition.parameters}]


def run_relay_tool(ctx: CallContext, _name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with short_read_gate(arguments):
        _status, body = dispatch(ctx, arguments)
    return body


def relay_tool_may_wait(_name: str, arguments: dict[str, Any]) -> bool:
    """A relay_tool call that may wait: a write (its approval card) or an action with a wait."""
    spec = ACTIONS.get(str(arguments.get("action")))
    return spec is not None and (spec.writes or "wait_seconds" in spec.params)


RELAY_TOOLS = ToolSet(
    server_name=mcp_wire.SERVER_NAME,
    instructions=(
        "relay_tool acts on OAR relays as the session whose token this connection uses. "
        "Pass `action` and its arguments; results are the relay's JSON (ok, and code and error when refused). "
        "A reply that is not ready within the wait answers status running: call wait with its message_id."
    ),
    tools=relay_tools,
    call=run_relay_tool,
    failed=lambda body: not body.get("ok", False),
    may_wait=relay_tool_may_wait,
    recognises_outside=True,
    # The tool's earlier name, unlisted and still accepted.
    aliases={"remote_relay": "relay_tool"},
)

add_endpoint(blueprint, "/mcp", RELAY_TOOLS)
