"""The MCP wire, without Flask: JSON-RPC messages, protocol versions and the tool's shapes (docs/mcp.md).

The relay speaks both eras of Streamable HTTP, stateless: no `Mcp-Session-Id`, every POST
carries one message and is answered on its own. Handshake-era clients (2024-11-05 …
2025-11-25) send `initialize`, then requests; clients of the per-request revision
(2026-07-28) carry their version, capabilities and identity in every request's `_meta` and
may probe `server/discover` first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from oar.actions.context import CallContext
from oar.core import tracing

# Handshake-era revisions, oldest to newest; `initialize` answers the client's version when it is
# here, else the newest.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = PROTOCOL_VERSIONS[-1]
# Per-request revisions (no handshake: each request carries its version in `_meta`).
MODERN_PROTOCOL_VERSIONS = ("2026-07-28",)
# What `server/discover` lists, newest first.
SUPPORTED_VERSIONS = (*reversed(MODERN_PROTOCOL_VERSIONS), *reversed(PROTOCOL_VERSIONS))
# The `_meta` keys of the per-request revision, and the Tasks extension's identifier.
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# How long a client may keep `tools/list` and `server/discover` answers (the tool never changes while a relay runs).
LIST_TTL_MS = 300_000
# A request without the MCP-Protocol-Version header is taken as this revision (the spec's rule).
ASSUMED_PROTOCOL_VERSION = "2025-03-26"
# `structuredContent` in tool results exists from this revision on.
STRUCTURED_CONTENT_SINCE = "2025-06-18"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Errors of the per-request revision (its reserved range).
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

SERVER_NAME = "oar-relay"


@dataclass(frozen=True)
class ToolSet:
    """What one MCP endpoint offers (`/mcp`, and the compatibility tool sets beside it): its
    tools, and how a call runs as the calling session."""

    server_name: str
    instructions: str
    # `tools/list` entries: name, description, inputSchema (generated, never written by hand).
    tools: Callable[[], list[dict[str, Any]]]
    # Runs one call: (context, tool name, arguments) → the JSON answer.
    call: Callable[[CallContext, str, dict[str, Any]], dict[str, Any]]
    # Whether an answer is a refusal or a failure (the tool result's `isError`).
    failed: Callable[[dict[str, Any]], bool]
    # Unlisted names still accepted by tools/call, and the listed tool each stands for.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # Whether its calls may wait: then a call that gave a progress token streams its progress from a
    # thread of its own, and a client of the Tasks extension gets a task. Tools that never wait
    # answer within the request (and may read its headers).
    waits: bool = True
    # Whether its clients are the agents of the conversations whose tokens they hold (`/mcp`): an owner's
    # conversation that never had a turn is then recognised as one whose agent is outside the relay.
    recognises_outside: bool = False
    # Which calls (tool name, arguments) a client of the Tasks extension gets as a task: the ones that may wait.
    may_wait: Callable[[str, dict[str, Any]], bool] = lambda _name, _arguments: True

    def tool_names(self) -> list[str]:
        return [tool["name"] for tool in self.tools()]


class WireError(Exception):
    """A JSON-RPC error to answer: its code, message, the request id (None when unknown) and `data`."""

    def __init__(self, code: int, message: str, request_id: Any = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.data = data


@dataclass(frozen=True)
class Message:
    """One JSON-RPC message from the client: a request has an id, a notification none, and a
    response (to a request of ours, which the relay never sends) a result or an error."""

    method: str | None
    params: dict[str, Any]
    request_id: Any
    is_request: bool
    # The message as it came (the per-request revision checks its envelope and headers against it).
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.params.get("_meta")
        return meta if isinstance(meta, dict) else {}


def parse(body: bytes) -> Message:
    """The one message of a POST, or WireError (parse error, invalid request)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise WireError(PARSE_ERROR, f"Parse error: the body is not JSON ({type(error).__name__}).") from None
    if isinstance(payload, list):
        raise WireError(INVALID_REQUEST, "Invalid Request: send one JSON-RPC message per POST (no batches).")
    if not isinstance(payload, dict) or payload.get("jsonrpc") != "2.0":
        raise WireError(INVALID_REQUEST, 'Invalid Request: a JSON-RPC 2.0 object with "jsonrpc": "2.0" is required.')
    request_id = payload.get("id")
    has_id = "id" in payload
    if has_id and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
        raise WireError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer.")
    method = payload.get("method")
    if method is None:
        if has_id and ("result" in payload or "error" in payload):
            return Message(method=None, params={}, request_id=request_id, is_request=False, payload=payload)
        raise WireError(INVALID_REQUEST, "Invalid Request: method is missing.", request_id)
    if not isinstance(method, str) or not method:
        raise WireError(INVALID_REQUEST, "Invalid Request: method must be a string.", request_id)
    params = payload.get("params", {})
    if not isinstance(params, dict):
        raise WireError(INVALID_PARAMS, "Invalid params: params must be an object.", request_id)
    return Message(method=method, params=params, request_id=request_id, is_request=has_id, payload=payload)


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def is_modern(version: str) -> bool:
    return version in MODERN_PROTOCOL_VERSIONS


def stamped(value: dict[str, Any], server_version: str, tools: ToolSet, result_type: str = "complete") -> dict[str, Any]:
    """A result of the per-request revision: its `resultType` and the server's identity in `_meta`."""
    meta = dict(value.get("_meta") or {})
    meta[SERVER_INFO_KEY] = {"name": tools.server_name, "version": server_version}
    return {**value, "resultType": result_type, "_meta": meta}


def discover_result(tools: ToolSet) -> dict[str, Any]:
    """The answer to `server/discover`: the revisions served, the capabilities (the Tasks extension
    where the tools may wait) and the server's instructions."""
    capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
    if tools.waits:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    return {
        "supportedVersions": list(SUPPORTED_VERSIONS), "capabilities": capabilities,
        "instructions": tools.instructions, "ttlMs": LIST_TTL_MS, "cacheScope": "private",
    }


def declares_tasks(meta: dict[str, Any]) -> bool:
    """Whether the request's client capabilities include the Tasks extension."""
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def initialize_result(params: dict[str, Any], server_version: str, tools: ToolSet) -> dict[str, Any]:
    """The answer to `initialize`: the client's protocol version when the relay speaks it, else its newest."""
    asked = params.get("protocolVersion")
    if not isinstance(asked, str):
        raise WireError(INVALID_PARAMS, "Invalid params: initialize needs protocolVersion (a string).")
    version = asked if asked in PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": tools.server_name, "version": server_version},
        "instructions": tools.instructions,
    }


def tool_list(tools: ToolSet, *, modern: bool = False) -> dict[str, Any]:
    """The answer to `tools/list` (with the per-request revision's cache hints when `modern`)."""
    if modern:
        return {"tools": tools.tools(), "ttlMs": LIST_TTL_MS, "cacheScope": "private"}
    return {"tools": tools.tools()}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    progress_token: str | int | None
    trace_carrier: dict[str, str] | None = None


def tool_call(params: dict[str, Any], tools: ToolSet) -> ToolCall:
    """The tool (an alias resolved), arguments and progress token of a `tools/call`, or
    WireError (unknown tool, bad params)."""
    name = params.get("name")
    if not isinstance(name, str):
        raise WireError(INVALID_PARAMS, "Invalid params: tools/call needs name (a string).")
    name = tools.aliases.get(name, name)
    known = tools.tool_names()
    if name not in known:
        offered = f"one tool, {known[0]}" if len(known) == 1 else f"the tools {', '.join(known)}"
        raise WireError(INVALID_PARAMS, f"Unknown tool: {name[:80]!r}. This server has {offered}.")
    arguments = params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise WireError(INVALID_PARAMS, "Invalid params: arguments must be an object.")
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if isinstance(token, bool) or not isinstance(token, (str, int)):
        token = None
    # The trace context a client puts in `_meta` (the 2026-07-28 revision reserves `traceparent` there).
    return ToolCall(name=name, arguments=arguments, progress_token=token, trace_carrier=tracing.read_carrier(meta))


def tool_result(body: dict[str, Any], protocol_version: str, *, failed: bool) -> dict[str, Any]:
    """A tool's JSON answer as a tool result: one text item holding it, `structuredContent`
    where the revision has it, and `isError` when the call was refused or failed."""
    text = compact_text(body)
    value: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failed}
    if is_modern(protocol_version) or (
        protocol_version in PROTOCOL_VERSIONS
        and PROTOCOL_VERSIONS.index(protocol_version) >= PROTOCOL_VERSIONS.index(STRUCTURED_CONTENT_SINCE)
    ):
        value["structuredContent"] = body
    return value


def compact_text(value: Any) -> str:
    """JSON without spaces, as a model reads it (fewer tokens; the relay's own models get the same,
    oar/providers/llm.py): orjson's text, which is the standard library's, else the standard
    library's own for what orjson declines (an integer beyond 64 bits, a lone surrogate)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def progress(token: str | int, count: float, message: str) -> dict[str, Any]:
    """A `notifications/progress` for a waiting call (no total: nobody knows how long a turn runs)."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": count, "message": message},
    }


def sse_event(message: dict[str, Any]) -> str:
    return f"event: message\ndata: {json.dumps(message, ensure_ascii=False)}\n\n"
