"""MCP over Streamable HTTP at `/mcp` (README "Agents over MCP"): the one tool `relay_tool`, run by the dispatcher.

`add_endpoint` serves any `ToolSet` the same way, so the compatibility tool sets (each a
blueprint of its own at `/mcp/<name>`) share this transport, its auth and its waits.

Stateless: each POST holds one JSON-RPC message and is answered on its own (JSON, or an
event stream for a `tools/call` that gave a progress token, so that progress notifications
keep the client waiting). No server-initiated stream: GET answers 405.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import RequestEntityTooLarge

from oar import __version__
from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch, short_read_gate
from oar.actions.schema import relay_tool
from oar.core.db import database
from oar.core.errors import ActionError
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.waiting import CallerWatch, watched_by
from oar.web import mcp_wire, runtime
from oar.web.auth import require_agent
from oar.web.connection import connection_watch
from oar.web.mcp_wire import ToolSet, WireError

blueprint = Blueprint("mcp", __name__)

PROTOCOL_HEADER = "MCP-Protocol-Version"
# Methods that may come before the client knows the protocol version (no header to check).
BEFORE_VERSION = ("initialize", "server/discover")
# An idle event stream sends a comment this often, which also finds a client that went away.
KEEPALIVE_SECONDS = 5.0


def refused(error: ActionError) -> ResponseReturnValue:
    """No token or a bad one: HTTP 401 in the relay's shape, before any MCP exchange."""
    response = jsonify(error.to_dict())
    response.status_code = error.status
    if error.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="oar-relay"'
    return response


def no_stream() -> ResponseReturnValue:
    """No server-initiated stream and no sessions to end: 405, as the transport says."""
    require_agent()
    response = jsonify(rpc_error(None, mcp_wire.INVALID_REQUEST, "Method Not Allowed: POST one JSON-RPC message."))
    response.status_code = 405
    response.headers["Allow"] = "POST"
    return response


def add_endpoint(on: Blueprint, path: str, tools: ToolSet) -> None:
    """Serve `tools` over Streamable HTTP at `path`, authenticated by a session token."""
    endpoint = path.strip("/").replace("/", "_")

    def post() -> ResponseReturnValue:
        return serve(tools)

    on.register_error_handler(ActionError, refused)
    on.add_url_rule(path, f"{endpoint}_no_stream", no_stream, methods=["GET", "DELETE"])
    on.add_url_rule(path, f"{endpoint}_post", post, methods=["POST"])


def serve(tools: ToolSet) -> ResponseReturnValue:
    caller = require_agent()
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        limit = request.max_content_length or 0
        return jsonify(rpc_error(None, mcp_wire.INVALID_REQUEST, f"Request too large: at most {limit} bytes.")), 413
    try:
        message = mcp_wire.parse(body)
        if not message.is_request:
            return Response(status=202)  # notifications (initialized, cancelled) and responses need no answer
        version = protocol_version(message.method)
        return answer(tools, caller, message, version)
    except WireError as error:
        status = 400 if error.code in (mcp_wire.PARSE_ERROR, mcp_wire.INVALID_REQUEST) else 200
        return jsonify(rpc_error(error.request_id, error.code, error.message)), status


def protocol_version(method: str | None) -> str:
    """The revision this request speaks, from its header; an unknown one is refused."""
    sent = request.headers.get(PROTOCOL_HEADER)
    if method in BEFORE_VERSION or sent is None:
        return sent if sent in mcp_wire.PROTOCOL_VERSIONS else mcp_wire.ASSUMED_PROTOCOL_VERSION
    if sent not in mcp_wire.PROTOCOL_VERSIONS:
        raise WireError(
            mcp_wire.INVALID_REQUEST,
            f"Bad Request: unsupported {PROTOCOL_HEADER} {sent[:40]!r}; supported: {', '.join(mcp_wire.PROTOCOL_VERSIONS)}.",
        )
    return sent


def answer(tools: ToolSet, caller: Session, message: mcp_wire.Message, version: str) -> ResponseReturnValue:
    request_id = message.request_id
    try:
        if message.method == "initialize":
            return jsonify(mcp_wire.result(request_id, mcp_wire.initialize_result(message.params, __version__, tools)))
        if message.method == "ping":
            return jsonify(mcp_wire.result(request_id, {}))
        if message.method == "tools/list":
            return jsonify(mcp_wire.result(request_id, mcp_wire.tool_list(tools)))
        if message.method == "tools/call":
            call = mcp_wire.tool_call(message.params, tools)
            if call.progress_token is not None and tools.waits and accepts_event_stream():
                return streamed_call(tools, runtime(), caller, call, call.progress_token, version, request_id)
            ctx = mcp_context(runtime(), caller, capped=True)
            # A client that cut the call (its own timeout) is seen going away: a card it waited on
            # is kept or withdrawn, and nothing is done for it.
            with watched_by(connection_watch(request.environ)):
                body = tools.call(ctx, call.name, call.arguments)
            return jsonify(mcp_wire.result(request_id, mcp_wire.tool_result(body, version, failed=tools.failed(body))))
    except WireError as error:
        raise WireError(error.code, error.message, request_id) from None
    raise WireError(mcp_wire.METHOD_NOT_FOUND, f"Method not found: {str(message.method)[:80]}", request_id)


def accepts_event_stream() -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


def mcp_context(rt: Runtime, caller: Session, *, capped: bool) -> CallContext:
    """The call as the calling session; without a progress token its waits stop before the
    client's own timeout would cut the call (the reply is kept: `wait` picks it up)."""
    ctx = CallContext(runtime=rt, caller=caller, via="mcp")
    if capped:
        seconds = int(rt.time("MCP_MAX_WAIT_SECONDS"))
        ctx.cap_waits(seconds, (
            f"MCP calls without a progressToken wait at most {seconds} s, as MCP clients cut calls after about 60 s;"
        ))
    return ctx


def streamed_call(
    tools: ToolSet, rt: Runtime, caller: Session, call: mcp_wire.ToolCall, token: str | int, version: str,
    request_id: Any,
) -> Response:
    """Run the call in a thread of its own while the response streams its progress: every
    wait of the call pulses a `notifications/progress`, then the result ends the stream. A
    client that went away is seen at the next write, and the call's waits end (`CallerGone`)."""
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    gone = threading.Event()
    started = time.monotonic()
    pulses = [0]

    def pulse() -> None:
        pulses[0] += 1
        waited = int(time.monotonic() - started)
        events.put(mcp_wire.progress(token, pulses[0], f"waiting ({waited} s)"))

    def run() -> None:
        database.connect(reuse_if_open=True)
        try:
            with watched_by(CallerWatch(pulse=pulse, gone=gone.is_set)):
                body = tools.call(mcp_context(rt, caller, capped=False), call.name, call.arguments)
            # A client gone meanwhile gets an answer too (the dispatcher's REMOTE_RELAY_CALLER_GONE):
            # nobody reads it, and the stream has ended already.
            events.put(mcp_wire.result(request_id, mcp_wire.tool_result(body, version, failed=tools.failed(body))))
        finally:
            if not database.is_closed():
                database.close()

    threading.Thread(target=run, name="mcp-call", daemon=True).start()

    def stream() -> Iterator[str]:
        try:
            while True:
                try:
                    item = events.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    yield ": keepalive\n\n"
                    continue
                yield mcp_wire.sse_event(item)
                if "method" not in item:
                    return
        finally:
            gone.set()

    return Response(stream(), mimetype="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return mcp_wire.error(request_id, code, message)


def relay_tools() -> list[dict[str, Any]]:
    """The one relay_tool, its schema generated from the registry."""
    definition = relay_tool()
    return [{"name": definition.name, "description": definition.description, "inputSchema": definition.parameters}]


def run_relay_tool(ctx: CallContext, _name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with short_read_gate(arguments):
        _status, body = dispatch(ctx, arguments)
    return body


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
    # The tool's earlier name, unlisted and still accepted.
    aliases={"remote_relay": "relay_tool"},
)

add_endpoint(blueprint, "/mcp", RELAY_TOOLS)
