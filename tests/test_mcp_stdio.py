"""`oar mcp` (the stdio bridge) driven by the official Python SDK client on MCP 2026-07-28: with the
Tasks extension declared a call that may wait answers a task that `tasks/get` follows to the relay's
result and `tasks/cancel` stops; without it the same call answers its result; a handshake-era
client sees neither. (The handshake-era calls and progress: tests/test_mcp.py.)"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import mcp.types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
ENDED = ("completed", "failed", "cancelled")
STATUS = "notifications/tasks/status"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
# How long a test waits for a task to end, or for the relay to show a change (deadlines, not sleeps).
SETTLE_SECONDS = 60.0
LOOK_EVERY = 0.1


class TaskCreated(types.Result):
    """The extension's `CreateTaskResult`, as this client reads it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class Answer(types.Result):
    """Any answer, every field kept."""

    model_config = ConfigDict(extra="allow")


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class TaskRequest(types.Request[TaskParams, str]):
    name_param = "taskId"


async def task_request(session: ClientSession, method: str, task_id: str, **params: Any) -> dict[str, Any]:
    answer = await session.send_request(TaskRequest(method=method, params=TaskParams(task_id=task_id, **params)), Answer)
    return answer.model_dump(by_alias=True, mode="json", exclude_unset=True)


async def settled(session: ClientSession, task_id: str) -> dict[str, Any]:
    """`tasks/get` until the task has ended (within SETTLE_SECONDS)."""
    with anyio.fail_after(SETTLE_SECONDS):
        while True:
            task = await task_request(session, "tasks/get", task_id)
            if task["status"] in ENDED:
                return task
            await anyio.sleep(LOOK_EVERY)


class StatusParams(types.NotificationParams):
    model_config = ConfigDict(extra="allow")


class Tasks(ClientExtension):
    """The Tasks extension as a client implements it: a task is followed with `tasks/get` to its result,
    and the status notifications of a listen are kept in `statuses`."""

    identifier = TASKS

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self.follow)]

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method=STATUS, params_type=StatusParams, handler=self.on_status)]

    async def on_status(self, params: StatusParams) -> None:
        self.statuses.append(params.model_dump(by_alias=True, mode="json"))

    @staticmethod
    async def follow(created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        ended = await settled(ctx.session, created.task_id)
        assert ended["status"] == "completed", ended
        return types.CallToolResult.model_validate(ended["result"])


def bridge(relay: Relay, token: str) -> StdioServerParameters:
    env = {key: value for key, value in os.environ.items() if key not in ("OAR_TOKEN", "OAR_URL")}
    env.update(OAR_URL=relay.url, OAR_TOKEN=token)
    return StdioServerParameters(command=sys.executable, args=["-m", "oar", "mcp"], env=env, cwd=str(PROJECT))


def through_bridge(
    relay: Relay, agent: Agent, work: Callable[[Client], Awaitable[Any]], *, tasks: bool | Tasks, mode: str = "auto",
    on_message: Callable[[Any], Awaitable[None]] | None = None,
) -> Any:
    """Start `oar mcp` for the agent, connect the SDK client to it (by default as it connects to any
    server: `server/discover` first, then 2026-07-28), declaring the Tasks extension when `tasks`,
    and run `work`."""
    extension = tasks if isinstance(tasks, Tasks) else Tasks() if tasks else None

    async def main() -> Any:
        client = Client(bridge(relay, agent.token), mode=mode, extensions=[extension] if extension else None,
                        message_handler=on_message)
        with anyio.fail_after(SETTLE_SECONDS * 2):
            async with client:
                return await work(client)

    return anyio.run(main)


def relay_json(result: types.CallToolResult) -> dict[str, Any]:
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    body = json.loads(text.text)
    assert result.structured_content == body
    return body


async def in_thread(look: Callable[[], Any]) -> Any:
    """A look at the relay over its HTTP API until it is truthy, off the event loop the client runs on."""
    with anyio.fail_after(SETTLE_SECONDS):
        while not (found := await anyio.to_thread.run_sync(look)):
            await anyio.sleep(LOOK_EVERY)
        return found


def test_a_waiting_send_through_the_bridge_runs_as_a_task_that_tasks_get_follows(relay: Relay, desk: Agent) -> None:
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    send = {"action": "send", "relay": "this", "session": session_id, "text": "!sleep 1\nnow"}

    async def work(client: Client) -> Any:
        discovered = client.session.discover_result
        created = await client.session.call_tool("relay_tool", send, allow_claimed=True)
        ended = await settled(client.session, created.task_id) if isinstance(created, TaskCreated) else None
        # A client that lets the SDK follow the task gets the call's result from call_tool itself.
        followed = await client.call_tool("relay_tool", {**send, "text": "!sleep 1\nagain"})
        read = await client.session.call_tool("relay_tool", {"action": "list_relays"}, allow_claimed=True)
        return client.protocol_version, discovered, created, ended, followed, read

    version, discovered, created, ended, followed, read = through_bridge(relay, desk, work, tasks=True)
    assert version == MODERN
    assert discovered is not None and discovered.capabilities.extensions == {TASKS: {}}
    assert discovered.capabilities.tools is not None and discovered.capabilities.tools.list_changed is False
    assert isinstance(created, TaskCreated), created
    shown = created.model_dump(by_alias=True, mode="json")
    assert shown["status"] == "working" and created.task_id.startswith("mcptask_")
    assert shown["ttlMs"] > 0 and shown["pollIntervalMs"] > 0
    assert ended is not None and ended["status"] == "completed" and ended["resultType"] == "complete"
    body = ended["result"]["structuredContent"]
    assert body["ok"] is True and body["status"] == "done" and body["reply"]["text"].endswith("now")
    assert json.loads(ended["result"]["content"][0]["text"]) == body
    assert relay_json(followed)["reply"]["text"].endswith("again")
    # A read never waits: it answers within its request, task or no task.
    assert isinstance(read, types.CallToolResult) and relay_json(read) == desk.ok("list_relays")


def test_tasks_cancel_through_the_bridge_stops_the_turn_and_bad_task_requests_get_the_relays_errors(
    relay: Relay, desk: Agent
) -> None:
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]

    def prompt_of(text: str) -> dict[str, Any] | None:
        messages = desk.ok("read_session", relay="this", session=session_id)["messages"]
        return next((m for m in messages if m["role"] == "user" and m["text"] == text), None)

    async def errors(session: ClientSession, method: str, task_id: str, **params: Any) -> MCPError:
        with pytest.raises(MCPError) as refused:
            await task_request(session, method, task_id, **params)
        return refused.value

    async def work(client: Client) -> Any:
        session = client.session
        created = await session.call_tool(
            "relay_tool", {"action": "send", "relay": "this", "session": session_id, "text": "!sleep 30"}, allow_claimed=True
        )
        assert isinstance(created, TaskCreated), created
        await in_thread(lambda: prompt_of("!sleep 30"))
        cancelled = await task_request(session, "tasks/cancel", created.task_id)
        ended = await settled(session, created.task_id)
        stopped = await in_thread(lambda: (p := prompt_of("!sleep 30")) and p["status"] == "stopped" and p)
        refusals = {
            "unknown": await errors(session, "tasks/get", "mcptask_nope"),
            "ended": await errors(session, "tasks/cancel", created.task_id),
            "update": await errors(session, "tasks/update", created.task_id, inputResponses=[1]),
        }
        updated = await task_request(session, "tasks/update", created.task_id, inputResponses={})
        return cancelled, ended, stopped, refusals, updated

    cancelled, ended, stopped, refusals, updated = through_bridge(relay, desk, work, tasks=True)
    assert cancelled["resultType"] == "complete"
    assert ended["status"] == "cancelled" and stopped["status"] == "stopped"
    # The relay's own JSON-RPC errors, passed on as they came.
    assert refusals["unknown"].code == -32602 and "Task not found" in refusals["unknown"].message
    assert refusals["ended"].code == -32602 and "already ended" in refusals["ended"].message
    assert refusals["update"].code == -32602 and "inputResponses" in refusals["update"].message
    assert updated["resultType"] == "complete"


def test_without_the_extension_the_bridge_answers_the_calls_result(relay: Relay, desk: Agent) -> None:
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]

    async def work(client: Client) -> Any:
        result = await client.session.call_tool(
            "relay_tool", {"action": "send", "relay": "this", "session": session_id, "text": "!sleep 1\nplain"}
        )
        with pytest.raises(MCPError) as refused:
            await task_request(client.session, "tasks/get", "mcptask_nope")
        return client.protocol_version, result, refused.value

    version, result, refused = through_bridge(relay, desk, work, tasks=False)
    assert version == MODERN
    assert relay_json(result)["status"] == "done" and relay_json(result)["reply"]["text"].endswith("plain")
    # What the relay answers a request that did not declare the extension.
    assert refused.code == -32021 and refused.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


def test_a_handshake_era_client_sees_no_tasks(relay: Relay, desk: Agent) -> None:
    async def work(client: Client) -> Any:
        initialized = client.session.initialize_result
        with pytest.raises(MCPError) as refused:
            await task_request(client.session, "tasks/get", "mcptask_nope")
        return client.protocol_version, initialized, refused.value

    version, initialized, refused = through_bridge(relay, desk, work, tasks=True, mode="legacy")
    assert version == "2025-11-25"
    assert initialized is not None and not initialized.capabilities.extensions
    assert initialized.instructions and "relay_tool" in initialized.instructions
    assert refused.code == -32601


def test_a_listen_through_the_bridge_passes_the_relays_task_statuses_on(relay: Relay, desk: Agent) -> None:
    session_id = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    tasks = Tasks()
    acknowledged: list[types.SubscriptionsAcknowledgedNotification] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.SubscriptionsAcknowledgedNotification):
            acknowledged.append(message)

    def listen(task_ids: list[str]) -> types.SubscriptionsListenRequest:
        wanted = types.SubscriptionFilter.model_validate({"tasksStatus": task_ids})
        return types.SubscriptionsListenRequest(params=types.SubscriptionsListenRequestParams(notifications=wanted))

    async def work(client: Client) -> Any:
        created = await client.session.call_tool(
            "relay_tool", {"action": "send", "relay": "this", "session": session_id, "text": "!sleep 1\nheard"}, allow_claimed=True
        )
        assert isinstance(created, TaskCreated), created
        ended = await client.session.send_request(listen([created.task_id, "mcptask_not_mine"]), Answer)
        # The stream's last status is delivered to the binding apart from the listen's result.
        with anyio.fail_after(SETTLE_SECONDS):
            while not any(status["status"] == "completed" for status in tasks.statuses):
                await anyio.sleep(LOOK_EVERY)
        return created.task_id, ended.model_dump(by_alias=True, mode="json", exclude_unset=True)

    task_id, ended = through_bridge(relay, desk, work, tasks=tasks, on_message=on_message)
    assert ended["resultType"] == "complete"
    [ack] = acknowledged
    assert ack.params.notifications.model_dump(by_alias=True, exclude_none=True) == {"tasksStatus": [task_id]}
    subscription = ack.params.meta[SUBSCRIPTION] if ack.params.meta else None
    assert subscription is not None and {status["_meta"][SUBSCRIPTION] for status in tasks.statuses} == {subscription}
    assert ended["_meta"][SUBSCRIPTION] == subscription
    assert {status["taskId"] for status in tasks.statuses} == {task_id}
    last = tasks.statuses[-1]
    assert last["status"] == "completed" and last["result"]["structuredContent"]["reply"]["text"].endswith("heard")

    async def without_the_extension(client: Client) -> MCPError:
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(listen([task_id]), Answer)
        return refused.value

    refused = through_bridge(relay, desk, without_the_extension, tasks=False)
    assert refused.code == -32021
