"""MCP's per-request revision (2026-07-28) on the relay's endpoints (docs/mcp.md): no handshake,
no session; each request carries its protocol version, client capabilities and identity in
`_meta`, mirrored in the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers.

The envelope and headers are checked by the official SDK's own inbound ladder (a pure
function), so the relay refuses exactly what the revision says a server refuses, with its
error codes and HTTP statuses. Results carry `resultType` and the server's identity.
"""

from __future__ import annotations

from typing import Any

from werkzeug.datastructures import Headers

from oar import __version__
from oar.sessions.sessions import Session
from oar.web import mcp_tasks, mcp_wire, runtime
from oar.web.bodies import Answer, JsonAnswer
from oar.web.mcp_calls import run_call
from oar.web.mcp_wire import Message, ToolSet, WireError
from oar.web.plain_request import PlainRequest

# The SDK's inbound ladder is imported in the functions that use it, at a web process's first
# request of this revision: the SDK brings pydantic, anyio and starlette (~55 MB), which a web
# process serving only the API, the page or older MCP clients never needs (docs/limits.md#memory).

NAME_HEADER = "Mcp-Name"
# The Tasks extension's methods; each names its task in `Mcp-Name`.
TASK_METHODS = ("tasks/get", "tasks/cancel", "tasks/update")


def is_modern(message: Message, headers: Headers) -> bool:
    """Whether the request speaks the per-request revision: its `_meta` names a protocol version,
    or its header names a per-request one."""
    header = headers.get("MCP-Protocol-Version")
    return mcp_wire.PROTOCOL_VERSION_KEY in message.meta or (header is not None and mcp_wire.is_modern(header))


def http_status(code: int) -> int:
    """The HTTP status of an error of this revision (its table: 400 for bad requests, 404 for unknown methods)."""
    from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS

    return ERROR_CODE_HTTP_STATUS.get(code, 200)


def answer(tools: ToolSet, caller: Session, token_hash: str, message: Message, http: PlainRequest) -> Answer:
    from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request

    request_id = message.request_id
    headers = {name.lower(): value for name, value in http.headers.items()}
    route = classify_inbound_request(message.payload, headers=headers,
                                     supported_modern_versions=mcp_wire.MODERN_PROTOCOL_VERSIONS)
    if isinstance(route, InboundLadderRejection):
        raise WireError(route.code, route.message, request_id, route.data)
    version = route.protocol_version
    method, params = message.method, message.params
    if method == "server/discover":
        return _ok(tools, request_id, mcp_wire.discover_result(tools))
    if method == "tools/list":
        return _ok(tools, request_id, mcp_wire.tool_list(tools, modern=True))
    if method == "tools/call":
        return _tool_call(tools, caller, token_hash, message, version, http)
    if method in TASK_METHODS and tools.waits:
        return _task_method(tools, token_hash, message, http.headers)
    if method == "subscriptions/listen" and tools.waits:
        _require_tasks(message)
        return mcp_tasks.listen(tools, runtime(), token_hash, request_id, params)
    raise WireError(mcp_wire.METHOD_NOT_FOUND, f"Method not found: {str(method)[:80]}", request_id)


def _tool_call(tools: ToolSet, caller: Session, token_hash: str, message: Message, version: str, http: PlainRequest) -> Answer:
    call = mcp_wire.tool_call(message.params, tools)
    rt = runtime()
    if tools.waits and mcp_wire.declares_tasks(message.meta) and tools.may_wait(call.name, call.arguments):
        created = mcp_tasks.start(tools, rt, caller, token_hash, call, version)
        return _ok(tools, message.request_id, created, result_type="task")

    def shape(body: dict[str, Any]) -> dict[str, Any]:
        return mcp_wire.stamped(mcp_wire.tool_result(body, version, failed=tools.failed(body)), __version__, tools)

    return run_call(tools, rt, caller, call, message.request_id, shape, http)


def _task_method(tools: ToolSet, token_hash: str, message: Message, headers: Headers) -> JsonAnswer:
    from mcp.shared.inbound import decode_header_value

    _require_tasks(message)
    task_id = message.params.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise WireError(mcp_wire.INVALID_PARAMS, f"Invalid params: {message.method} needs taskId (a string).")
    named = headers.get(NAME_HEADER)
    if named is not None and decode_header_value(named) != task_id:
        raise WireError(mcp_wire.HEADER_MISMATCH, f"{NAME_HEADER} header does not match the request body's 'taskId' parameter")
    rt = runtime()
    if message.method == "tasks/get":
        return _ok(tools, message.request_id, mcp_tasks.view(mcp_tasks.current(tools, rt, token_hash, task_id)))
    if message.method == "tasks/cancel":
        mcp_tasks.cancel(tools, rt, token_hash, task_id)
        return _ok(tools, message.request_id, {})
    # tasks/update: the relay never asks the client for input (the owner decides its cards), so
    # there is nothing outstanding to answer; the task must still be the caller's.
    if not isinstance(message.params.get("inputResponses"), dict):
        raise WireError(mcp_wire.INVALID_PARAMS, "Invalid params: tasks/update needs inputResponses (an object).")
    mcp_tasks.current(tools, rt, token_hash, task_id)
    return _ok(tools, message.request_id, {})


def _require_tasks(message: Message) -> None:
    if not mcp_wire.declares_tasks(message.meta):
        raise WireError(
            mcp_wire.MISSING_CLIENT_CAPABILITY, "Missing required client capability", message.request_id,
            {"requiredCapabilities": {"extensions": {mcp_wire.TASKS_EXTENSION: {}}}},
        )


def _ok(tools: ToolSet, request_id: Any, value: dict[str, Any], result_type: str = "complete") -> JsonAnswer:
    return JsonAnswer(mcp_wire.result(request_id, mcp_wire.stamped(value, __version__, tools, result_type)))
