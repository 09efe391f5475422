"""The Tasks extension through `oar mcp` (docs/mcp.md#the-stdio-bridge): the relay keeps the tasks, the
bridge passes them on.

The bridge holds two SDK client sessions with the relay, one that declares the extension and
one that does not, since the SDK stamps a session's capabilities on every request it sends. A
stdio request goes through the one that matches its own declaration, so the relay sees what the
client declared: a call that may wait answers a task only for a client that asked for tasks, and
`tasks/get`, `tasks/cancel` and `tasks/update` answer (or refuse, with the same JSON-RPC error)
exactly as the relay does over HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# The extension's requests, each naming its task in `taskId` (and in the `Mcp-Name` header over HTTP).
TASK_METHODS = ("tasks/get", "tasks/cancel", "tasks/update")
# tasks/get, tasks/cancel and tasks/update never wait on the relay: an answer slower than this is an error.
ANSWER_SECONDS = 60.0


class CreatedTask(types.Result):
    """The relay's answer that a call runs as a task (the extension's `CreateTaskResult`), every field
    kept as it came, to be passed on unchanged."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]


class RelayAnswer(types.Result):
    """An answer of the relay to a Tasks-extension request, every field kept as it came."""

    model_config = ConfigDict(extra="allow")


class TaskParams(types.RequestParams):
    """The params of a Tasks-extension request: its task, and whatever else it carries, kept."""

    model_config = ConfigDict(extra="allow")
    task_id: str


class TaskRequest(types.Request[TaskParams, str]):
    """A Tasks-extension request towards the relay; its task id goes in the `Mcp-Name` header."""

    name_param = "taskId"


@dataclass
class RelayLink:
    """The bridge's sessions with the relay's endpoint and the HTTP client under them."""

    plain: ClientSession
    # None when the relay does not offer the extension (its team tools, or a relay that predates it).
    tasks: ClientSession | None
    http: httpx2.AsyncClient
    endpoint: str

    def for_request(self, ctx: ServerRequestContext[Any]) -> ClientSession:
        """The session whose declaration matches this stdio request's."""
        return self.tasks if self.tasks is not None and declares_tasks(ctx) else self.plain


def declares_tasks(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the stdio request declared the Tasks extension in its client capabilities. Only a
    request of the per-request revision can: a task cannot be delivered on the handshake's wire."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def tasks_claim() -> ResultClaim[CreatedTask]:
    """The SDK client's claim on `resultType: "task"` for the session that declares the extension."""
    return ResultClaim(result_type="task", model=CreatedTask, resolve=_passed_on)


async def _passed_on(_task: CreatedTask, _ctx: ClaimContext) -> types.CallToolResult:
    # The bridge reads claimed results itself (`allow_claimed`), so the SDK never resolves one here:
    # the task is its client's to follow.
    raise RuntimeError("the bridge passes a task on to its client; it never waits for one itself")


def forward_task_method(
    link: RelayLink, method: str
) -> Callable[[ServerRequestContext[Any], TaskParams], Awaitable[dict[str, Any]]]:
    """A stdio handler for `method` that forwards the request to the relay and answers what the relay
    answers; a JSON-RPC error of the relay is raised as the same error."""

    async def forward(ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # As the relay answers a handshake-era request for it: the extension is 2026-07-28's.
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", method)
        request = TaskRequest(method=method, params=params)
        answer = await link.for_request(ctx).send_request(request, RelayAnswer, request_read_timeout_seconds=ANSWER_SECONDS)
        return answer.model_dump(by_alias=True, mode="json", exclude_unset=True)

    return forward
