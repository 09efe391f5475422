"""`oar mcp`: the relay's MCP tool over stdio, for clients that start servers as processes (README "Agents over MCP").

A proxy built on the official SDK: a low-level `Server` on stdin/stdout whose `tools/list`
and `tools/call` are forwarded to the relay's `/mcp` over HTTP by the SDK's own client, as
the session whose token is in `OAR_TOKEN`. So the tool list is the relay's (the schema of
the relay it talks to, not of this checkout), the caps and checks are the relay's, and a
progress token the client gives is passed on, its progress notifications passed back.

Both eras are served on stdio, as the relay serves them over HTTP: clients of the handshake
revisions (`initialize`) and of 2026-07-28 (every request carries its own envelope). Towards
the relay the bridge speaks 2026-07-28 itself (the handshake with a relay that predates it). A
2026-07-28 request that declares the Tasks extension is forwarded declaring it too, so a call
that may wait answers the relay's task, passed back unchanged, and `tasks/get`, `tasks/cancel`
and `tasks/update` are forwarded the same way (docs/mcp.md#the-stdio-bridge); the relay keeps
the tasks, so they outlive this process.

The connection to the relay is opened, and the token checked, before stdio is served: a
missing or bad configuration ends the process with a message on stderr, never a hang.

`--tools team` (or `OAR_MCP_TOOLS=team`) serves the team tools of `/mcp/team` instead
(docs/team-runs.md#the-stdio-bridge): every request names the run in `RELAY_SESSION_ID`, and a
successful `start_session` moves this process's connection to the run it declared.
"""

from __future__ import annotations

import os
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from oar import __version__
from oar.cli.mcp_stdio_listen import LISTEN, forward_listen
from oar.cli.mcp_stdio_tasks import (
    TASK_METHODS,
    TASKS_EXTENSION,
    CreatedTask,
    RelayLink,
    TaskParams,
    forward_task_method,
    tasks_claim,
)
from oar.core.config import from_environment
from oar.team.runs import RUN_HEADER

# Connecting to the relay and checking the token: a relay that does not answer this fast is an error.
CONNECT_SECONDS = 15.0
# A forwarded call may wait as long as the relay lets it (the owner's longest wait is an hour).
CALL_SECONDS = 3700.0
# The tool sets the bridge serves: the relay's endpoint and the server name it shows.
TOOL_SETS = {"relay": ("/mcp", "oar-relay"), "team": ("/mcp/team", "oar-relay-team")}
# How the bridge names itself to the relay (each request's client info).
CLIENT_INFO = types.Implementation(name="oar-mcp-stdio", version=__version__)


class ConfigurationError(Exception):
    """What is wrong with OAR_URL / OAR_TOKEN, said to the person who started the process."""


def main(tools: str = "relay") -> int:
    if tools not in TOOL_SETS:
        print(f"oar mcp: --tools (or OAR_MCP_TOOLS) must be one of {', '.join(TOOL_SETS)}, not {tools!r}", file=sys.stderr)
        return 2
    token = os.environ.get("OAR_TOKEN", "").strip()
    if not token:
        print("oar mcp: set OAR_TOKEN to a session's agent token (and OAR_URL to the relay)", file=sys.stderr)
        return 2
    url = (os.environ.get("OAR_URL") or from_environment().base_url).rstrip("/")
    headers = {}
    if tools == "team" and os.environ.get("RELAY_SESSION_ID", "").strip():
        headers[RUN_HEADER] = os.environ["RELAY_SESSION_ID"].strip()
    try:
        anyio.run(_serve, url, token, tools, headers)
    except ConfigurationError as error:
        print(f"oar mcp: {error}", file=sys.stderr)
        return 1
    return 0


async def _serve(url: str, token: str, tools: str, headers: dict[str, str]) -> None:
    path, server_name = TOOL_SETS[tools]
    async with AsyncExitStack() as stack:
        link = await _connect(stack, url, path, token, headers)

        async def list_tools(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return await link.plain.list_tools()

        async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult | dict[str, Any]:
            result = await _forward_call(link, ctx, params)
            if isinstance(result, CreatedTask):
                return result.model_dump(by_alias=True, mode="json", exclude_unset=True)
            declared = (result.structured_content or {}).get("session_id")
            if tools == "team" and params.name == "start_session" and not result.is_error and isinstance(declared, str):
                # This process is the connection: its later requests act in the run it just declared.
                link.http.headers[RUN_HEADER] = declared
            return result

        server: Server[Any] = Server(
            server_name, version=__version__, instructions=link.plain.instructions,
            on_list_tools=list_tools, on_call_tool=call_tool,  # type: ignore[arg-type]  # a task is a claimed result
        )
        if link.tasks is not None:
            _serve_tasks(server, link)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options(extensions={}))


def _serve_tasks(server: Server[Any], link: RelayLink) -> None:
    """The Tasks extension on stdio, forwarded to the relay that offers it."""
    # 2026-07-28's `server/discover` advertises the extension; an `initialize` answer does not
    # (a task cannot be delivered on the handshake's wire).
    server.extensions = {TASKS_EXTENSION: {}}
    for method in TASK_METHODS:
        server.add_request_handler(method, TaskParams, forward_task_method(link, method))
    server.add_request_handler(LISTEN, types.SubscriptionsListenRequestParams, forward_listen(link, CLIENT_INFO))

    async def discover(_ctx: ServerRequestContext[Any], _params: types.RequestParams) -> types.DiscoverResult:
        # The SDK's own answer would claim list-change notifications once `subscriptions/listen` is
        # served; the bridge's listen carries task statuses only (the tool list never changes).
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS), capabilities=server.get_capabilities(),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)


async def _forward_call(
    link: RelayLink, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult | CreatedTask:
    """The call as the relay answers it: its result, or the task it runs as (only for a request that
    declared the Tasks extension)."""
    meta = ctx.meta or params.meta or {}
    # The SDK hands `_meta` over with its keys in Python spelling (`progress_token`).
    found = meta.get("progress_token", meta.get("progressToken"))
    progress_token = found if isinstance(found, (str, int)) else None

    async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
        if progress_token is not None:
            await ctx.session.send_progress_notification(
                progress_token, progress, total, message, related_request_id=str(ctx.request_id)
            )

    relay = link.for_request(ctx)
    result = await relay.call_tool(
        params.name, params.arguments or {}, read_timeout_seconds=CALL_SECONDS,
        progress_callback=forward_progress if progress_token is not None else None, allow_claimed=True,
    )
    if isinstance(result, types.CallToolResult | CreatedTask):
        return result
    raise MCPError(types.INTERNAL_ERROR, f"The relay answered a result this bridge does not know: {type(result).__name__}.")


async def _connect(stack: AsyncExitStack, url: str, path: str, token: str, headers: dict[str, str]) -> RelayLink:
    """The SDK client's sessions with the relay's endpoint at `path`, on the newest revision both speak;
    ConfigurationError if they cannot be opened."""
    endpoint = url + path
    try:
        with anyio.fail_after(CONNECT_SECONDS):
            probe = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(CONNECT_SECONDS)))
            response = await probe.post(
                endpoint, headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            )
    except (httpx2.HTTPError, OSError, TimeoutError) as error:
        raise ConfigurationError(f"cannot reach the relay at {url} ({type(error).__name__}: {error}); check OAR_URL") from None
    if response.status_code == 401:
        raise ConfigurationError(f"the relay at {url} refused OAR_TOKEN: {_said(response)}")
    if response.status_code != 200:
        raise ConfigurationError(f"{endpoint} answered HTTP {response.status_code}; is OAR_URL an OAR relay?")
    http = await stack.enter_async_context(httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}", **headers}, timeout=httpx2.Timeout(CALL_SECONDS, connect=CONNECT_SECONDS),
    ))
    plain = await _open(stack, endpoint, http, tasks=False)
    offered = (plain.server_capabilities.extensions if plain.server_capabilities else None) or {}
    # The SDK stamps a session's capabilities on every request it sends, so whether a forwarded
    # request declares the extension is chosen by the session it goes through.
    tasks = await _open(stack, endpoint, http, tasks=True) if TASKS_EXTENSION in offered else None
    return RelayLink(plain=plain, tasks=tasks, http=http, endpoint=endpoint)


async def _open(stack: AsyncExitStack, endpoint: str, http: httpx2.AsyncClient, *, tasks: bool) -> ClientSession:
    """One SDK client session with the relay: `server/discover` adopted, or the handshake with a relay
    that does not answer it."""
    read, write = await stack.enter_async_context(streamable_http_client(endpoint, http_client=http))
    session = await stack.enter_async_context(ClientSession(
        read, write, client_info=CLIENT_INFO,
        extensions={TASKS_EXTENSION: {}} if tasks else None,
        result_claims={TASKS_EXTENSION: [tasks_claim()]} if tasks else None,
    ))
    with anyio.fail_after(CONNECT_SECONDS):
        try:
            await session.discover()
        except MCPError:
            await session.initialize()
    return session


def _said(response: httpx2.Response) -> str:
    try:
        return str(response.json().get("error") or response.text[:200])
    except ValueError:
        return response.text[:200]
