"""`oar mcp`: the relay's MCP tool over stdio, for clients that start servers as processes (README "Agents over MCP").

A proxy built on the official SDK: a low-level `Server` on stdin/stdout whose `tools/list`
and `tools/call` are forwarded to the relay's `/mcp` over HTTP by the SDK's own client, as
the session whose token is in `OAR_TOKEN`. So the tool list is the relay's (the schema of
the relay it talks to, not of this checkout), the caps and checks are the relay's, and a
progress token the client gives is passed on, its progress notifications passed back.

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

from oar import __version__
from oar.core.config import from_environment
from oar.team.runs import RUN_HEADER

# Connecting to the relay and checking the token: a relay that does not answer this fast is an error.
CONNECT_SECONDS = 15.0
# A forwarded call may wait as long as the relay lets it (the owner's longest wait is an hour).
CALL_SECONDS = 3700.0
# The tool sets the bridge serves: the relay's endpoint and the server name it shows.
TOOL_SETS = {"relay": ("/mcp", "oar-relay"), "team": ("/mcp/team", "oar-relay-team")}


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
        relay, http = await _connect(stack, url, path, token, headers)

        async def list_tools(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=(await relay.list_tools()).tools)

        async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
            meta = ctx.meta or params.meta or {}
            # The SDK hands `_meta` over with its keys in Python spelling (`progress_token`).
            found = meta.get("progress_token", meta.get("progressToken"))
            token = found if isinstance(found, (str, int)) else None

            async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, progress, total, message, related_request_id=str(ctx.request_id)
                    )

            result = await relay.call_tool(
                params.name, params.arguments or {}, read_timeout_seconds=CALL_SECONDS,
                progress_callback=forward_progress if token is not None else None,
            )
            declared = (result.structured_content or {}).get("session_id")
            if tools == "team" and params.name == "start_session" and not result.is_error and isinstance(declared, str):
                # This process is the connection: its later requests act in the run it just declared.
                http.headers[RUN_HEADER] = declared
            return result

        server: Server[Any] = Server(
            server_name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool,
        )
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def _connect(
    stack: AsyncExitStack, url: str, path: str, token: str, headers: dict[str, str]
) -> tuple[ClientSession, httpx2.AsyncClient]:
    """The SDK client's session with the relay's endpoint at `path`, initialized, and its HTTP client;
    ConfigurationError if it cannot be."""
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
    read, write = await stack.enter_async_context(streamable_http_client(endpoint, http_client=http))
    session = await stack.enter_async_context(ClientSession(read, write))
    with anyio.fail_after(CONNECT_SECONDS):
        await session.initialize()
    return session, http


def _said(response: httpx2.Response) -> str:
    try:
        return str(response.json().get("error") or response.text[:200])
    except ValueError:
        return response.text[:200]
