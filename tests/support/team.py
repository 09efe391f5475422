"""The team tools' client for tests (docs/team-runs.md): an MCP SDK session on `/mcp/team` whose
`call(tool, **arguments)` answers the flat JSON, and the checks of a success and a refusal."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.relays import Relay

Call = Callable[..., Awaitable[dict[str, Any]]]


def body_of(result: types.CallToolResult) -> dict[str, Any]:
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    body = json.loads(text.text)
    assert result.structured_content == body
    assert result.is_error is (body["success"] is not True)
    assert "data" not in body  # flat results
    return body


@asynccontextmanager
async def team_session(relay: Relay, token: str, headers: dict[str, str] | None = None) -> AsyncIterator[Call]:
    """An SDK client session on /mcp/team; yields `call(tool, **arguments)` → the flat JSON."""
    sent = {"Authorization": f"Bearer {token}", **(headers or {})}
    async with httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(60)) as http:
        async with streamable_http_client(f"{relay.url}/mcp/team", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
                    return body_of(await session.call_tool(tool, arguments))

                yield call


def run(work: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(work)


def as_agent(relay: Relay, token: str, steps: Callable[[Call], Awaitable[Any]], headers: dict[str, str] | None = None) -> Any:
    """`steps(call)` in one SDK session of `token`; what it returns."""
    async def work() -> Any:
        async with team_session(relay, token, headers) as call:
            return await steps(call)

    return run(work)


def ok(body: dict[str, Any]) -> dict[str, Any]:
    assert body["success"] is True, body
    return body


def refused(body: dict[str, Any], *words: str, extra: tuple[str, ...] = ()) -> str:
    assert body["success"] is False, body
    assert set(body) <= {"success", "error", "artifact", *extra}, body
    for word in words:
        assert word in body["error"], body
    return str(body["error"])
