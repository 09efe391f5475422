"""`subscriptions/listen` through `oar mcp` (docs/mcp.md#the-stdio-bridge): the relay's task status
notifications, passed on to the stdio client as they come.

The one request the bridge sends without the SDK's client: its `listen` takes the core filters
only, and a notification of an extension reaches an SDK session apart from the request's
result, so the last status of a task could come after the end of the stream it belongs to.
Here the relay's event stream is read in order and each message passed on: the acknowledgment,
every `notifications/tasks/status`, then the result that ends the stream, each notification
naming the stdio request as its subscription.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx2
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from pydantic import ConfigDict

from oar.cli.mcp_stdio_tasks import TASKS_EXTENSION, RelayLink, declares_tasks

LISTEN = "subscriptions/listen"


class RelayNotificationParams(types.NotificationParams):
    """A notification's params as the relay sent them, every field kept."""

    model_config = ConfigDict(extra="allow")


class RelayNotification(types.Notification[RelayNotificationParams, str]):
    """A notification of the relay's listen stream, passed on to the stdio client."""


def forward_listen(
    link: RelayLink, client_info: types.Implementation
) -> Callable[[ServerRequestContext[Any], types.SubscriptionsListenRequestParams], Awaitable[dict[str, Any]]]:
    """A stdio handler for `subscriptions/listen` that opens the same listen on the relay, declaring
    what the stdio request declared, and passes its stream on."""

    async def listen(ctx: ServerRequestContext[Any], _params: types.SubscriptionsListenRequestParams) -> dict[str, Any]:
        tasks = declares_tasks(ctx)
        version = (link.tasks if tasks and link.tasks is not None else link.plain).protocol_version
        capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
        meta = {
            types.PROTOCOL_VERSION_META_KEY: version,
            types.CLIENT_INFO_META_KEY: client_info.model_dump(by_alias=True, mode="json", exclude_none=True),
            types.CLIENT_CAPABILITIES_META_KEY: capabilities,
        }
        params = {key: value for key, value in (ctx.params or {}).items() if key != "_meta"}
        body = {"jsonrpc": "2.0", "id": ctx.request_id, "method": LISTEN, "params": {**params, "_meta": meta}}
        headers = {MCP_PROTOCOL_VERSION_HEADER: str(version), MCP_METHOD_HEADER: LISTEN,
                   "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        async with link.http.stream("POST", link.endpoint, content=json.dumps(body), headers=headers) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return _ended(ctx, _json(await response.aread()), response.status_code)
            async for message in _messages(response):
                if "method" not in message:
                    return _ended(ctx, message, response.status_code)
                await _pass_on(ctx, message)
        raise MCPError(types.INTERNAL_ERROR, "The relay's listen stream ended without its result.")

    return listen


async def _pass_on(ctx: ServerRequestContext[Any], message: dict[str, Any]) -> None:
    """A notification of the relay's stream, naming the stdio request as its subscription."""
    params = dict(message.get("params") or {})
    params["_meta"] = {**(params.get("_meta") or {}), SUBSCRIPTION_ID_META_KEY: ctx.request_id}
    notification = RelayNotification(method=str(message["method"]), params=RelayNotificationParams.model_validate(params))
    # The session sends any notification model as it dumps; its type names the core ones only.
    await ctx.session.send_notification(cast(types.ServerNotification, notification), related_request_id=ctx.request_id)


def _ended(ctx: ServerRequestContext[Any], message: Any, status: int) -> dict[str, Any]:
    """The result that ends the stdio stream, from the relay's (naming the stdio request as its
    subscription, as the revision requires), or the relay's JSON-RPC error raised as the same error."""
    if isinstance(message, dict) and isinstance(message.get("result"), dict):
        result = dict(message["result"])
        result["_meta"] = {**(result.get("_meta") or {}), SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        return result
    error = message.get("error") if isinstance(message, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        raise MCPError(error["code"], str(error.get("message", "")), error.get("data"))
    raise MCPError(types.INTERNAL_ERROR, f"The relay answered subscriptions/listen with HTTP {status} and no JSON-RPC answer.")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


async def _messages(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an event stream, in order (comments, such as keep-alives, skipped)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[len("data:"):].lstrip(" "))
        elif not line and data:
            yield _json("\n".join(data).encode()) or {}
            data = []
