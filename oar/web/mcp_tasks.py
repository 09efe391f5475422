"""The Tasks extension (`io.modelcontextprotocol/tasks`) on the relay's MCP endpoints (docs/mcp.md#tasks).

A client of the per-request revision that declares the extension gets a task for a call that
can wait: the answer names the task at once, and the call runs in a thread of this web
process while the task, kept in the database, says how it goes: `working`, `input_required`
while an approval card waits on the owner, then `completed` with the very result the call
would have given, `failed`, or `cancelled`. `tasks/get` and `tasks/cancel` work through any
web process or node; `subscriptions/listen` streams `notifications/tasks/status` as a task
changes.

When the process running a call ends (a restart, a crash), its task's lease runs out: a
call that had written its prompt ends with that prompt's outcome (read from the database
when the task is next asked about), one that had not fails saying nothing was done.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from flask import Response

from oar.core import defaults, keys
from oar.core.db import database, release_connection
from oar.core.runtime import Runtime
from oar.core.statuses import McpTaskStatus
from oar.core.timeutil import iso, utcnow
from oar.core.waiting import CallerWatch, Look, wait_on_signals, watched_by
from oar.mcp_tasks import store
from oar.mcp_tasks.store import McpTask
from oar.sessions.sessions import Session
from oar.turns import turns
from oar.web import mcp_wire
from oar.web.mcp_calls import event_stream, mcp_context
from oar.web.mcp_wire import ToolCall, ToolSet, WireError

log = logging.getLogger(__name__)

STATUS_NOTIFICATION = "notifications/tasks/status"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
# `subscriptions/listen` names the tasks to follow under this key (the extension's schema), or
# `taskIds` (its earlier draft).
LISTEN_KEYS = ("tasksStatus", "taskIds")
# A listen stream looks at its tasks again this often without a signal.
LISTEN_RECHECK_SECONDS = 5.0
LOST_BEFORE_WRITING = (
    "The relay process running this call ended before the call wrote anything: nothing was done. Call again."
)


def start(tools: ToolSet, rt: Runtime, caller: Session, token_hash: str, call: ToolCall, version: str) -> dict[str, Any]:
    """Make the task (committed first), start its call, and answer the task."""
    action = call.arguments.get("action")
    task = store.create(rt, token_hash=token_hash, caller_id=caller.id, tool=call.name,
                        action=action if isinstance(action, str) else None, now=utcnow())
    threading.Thread(target=_run, args=(tools, rt, caller, call, version, task.id), name="mcp-task", daemon=True).start()
    return view(task)


def _run(tools: ToolSet, rt: Runtime, caller: Session, call: ToolCall, version: str, task_id: str) -> None:
    database.connect(reuse_if_open=True)
    try:
        body = _call(tools, rt, caller, call, task_id)
        if store.cancel_requested(task_id):
            # A cancel that came before the call noted its prompt could not stop it: it is stopped here.
            written = store.read(task_id).message_id
            if written:
                turns.stop_prompt(rt, written)
            store.finish(rt, task_id, McpTaskStatus.CANCELLED, utcnow(), message="Cancelled by the client (tasks/cancel).")
        else:
            result = mcp_wire.tool_result(body, version, failed=tools.failed(body))
            store.finish(rt, task_id, McpTaskStatus.COMPLETED, utcnow(), result=result)
    except Exception:
        log.exception("MCP task %s failed", task_id)
        store.finish(rt, task_id, McpTaskStatus.FAILED, utcnow(), message="The relay failed running this call.",
                     error={"code": mcp_wire.INTERNAL_ERROR, "message": "Internal error: the relay failed running this call."})
    finally:
        if not database.is_closed():
            database.close()


def _call(tools: ToolSet, rt: Runtime, caller: Session, call: ToolCall, task_id: str) -> dict[str, Any]:
    """The call, as a task watches it: its waits renew the task's lease and end on a cancel."""

    def pulse() -> None:
        store.renew(rt, task_id, utcnow())

    watch = CallerWatch(
        pulse=pulse, gone=lambda: store.cancel_requested(task_id),
        every_seconds=rt.time("MCP_TASK_LEASE_SECONDS") / 3,
        wake_channels=(keys.mcp_task_channel(rt.config.namespace, task_id),),
        on_owner=lambda what: store.set_waiting(rt, task_id, what, utcnow()),
        on_prompt=lambda session_id, message_id: store.note_prompt(rt, task_id, session_id, message_id, utcnow()),
    )
    with watched_by(watch):
        return tools.call(mcp_context(rt, caller, capped=False, carrier=call.trace_carrier), call.name, call.arguments)


def view(task: McpTask) -> dict[str, Any]:
    """The task as the extension shows it (`DetailedTask`: the result, error or input requests inline)."""
    value: dict[str, Any] = {
        "taskId": task.id, "status": task.status,
        "createdAt": iso(task.created_at), "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": int((task.expires_at - task.created_at).total_seconds() * 1000),
        "pollIntervalMs": defaults.MCP_TASK_POLL_MS,
    }
    if task.status_message:
        value["statusMessage"] = task.status_message
    if task.status == McpTaskStatus.INPUT_REQUIRED:
        # The owner decides, not the client: nothing is asked of it (statusMessage says what is awaited).
        value["inputRequests"] = {}
    elif task.status == McpTaskStatus.COMPLETED:
        value["result"] = task.result
    elif task.status == McpTaskStatus.FAILED:
        value["error"] = task.error
    return value


def current(tools: ToolSet, rt: Runtime, token_hash: str, task_id: Any) -> McpTask:
    """The token's task as it stands now (a task whose process ended settled first), or INVALID_PARAMS."""
    now = utcnow()
    task = store.owned(task_id, token_hash, now)
    if task is None:
        raise WireError(mcp_wire.INVALID_PARAMS, "Failed to retrieve task: Task not found.")
    if store.orphaned(task, now):
        _settle_orphan(tools, rt, task)
        task = store.read(task.id)
    return task


def _settle_orphan(tools: ToolSet, rt: Runtime, task: McpTask) -> None:
    """The task's process ended: its outcome is its prompt's, or it fails having done nothing."""
    now = utcnow()
    message = turns.find_message(task.message_id) if task.message_id else None
    if message is None:
        store.finish(rt, task.id, McpTaskStatus.FAILED, now, message=LOST_BEFORE_WRITING,
                     error={"code": mcp_wire.INTERNAL_ERROR, "message": LOST_BEFORE_WRITING})
        return
    if task.cancel_requested:
        store.finish(rt, task.id, McpTaskStatus.CANCELLED, now, message="Cancelled by the client (tasks/cancel).")
        return
    if not turns.is_settled(message):
        return  # still working on its prompt: asked again later
    body = {"ok": True, **turns.result(rt, message)}
    body["note"] = " ".join(filter(None, (body.get("note"), "The relay process that took this call ended; "
                                          "this is its prompt's outcome as recorded.")))
    result = mcp_wire.tool_result(body, mcp_wire.MODERN_PROTOCOL_VERSIONS[-1], failed=tools.failed(body))
    store.finish(rt, task.id, McpTaskStatus.COMPLETED, now, result=result)


def cancel(tools: ToolSet, rt: Runtime, token_hash: str, task_id: Any) -> None:
    """`tasks/cancel`: the call's waits end (a card it waited on is kept or withdrawn as when a
    caller goes away) and the turn its prompt started is stopped. A task that has ended is refused."""
    task = current(tools, rt, token_hash, task_id)
    if store.is_ended(task):
        raise WireError(mcp_wire.INVALID_PARAMS, f"Task {task.id} has already ended ({task.status}): nothing to cancel.")
    store.request_cancel(rt, task, utcnow())
    if task.message_id:
        turns.stop_prompt(rt, task.message_id)
    if store.orphaned(task, utcnow()):  # no process runs its call: it ends here
        store.finish(rt, task.id, McpTaskStatus.CANCELLED, utcnow(), message="Cancelled by the client (tasks/cancel).")


def listen(tools: ToolSet, rt: Runtime, token_hash: str, request_id: Any, params: dict[str, Any]) -> Response:
    """`subscriptions/listen` for tasks: acknowledge the token's tasks among those named, then send a
    `notifications/tasks/status` each time one changes; end once all have ended."""
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise WireError(mcp_wire.INVALID_PARAMS, "Invalid params: subscriptions/listen needs notifications (an object).")
    named_key = next((key for key in LISTEN_KEYS if key in wanted), LISTEN_KEYS[0])
    named = wanted.get(named_key) or []
    if not isinstance(named, list) or len(named) > 100 or not all(isinstance(item, str) for item in named):
        raise WireError(mcp_wire.INVALID_PARAMS, f"Invalid params: notifications.{named_key} must be a list of at most 100 task ids.")
    now = utcnow()
    honored = [task_id for task_id in dict.fromkeys(named) if store.owned(task_id, token_hash, now) is not None]
    release_connection()
    subscription = str(request_id)
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    gone = threading.Event()
    events.put(_notification(ACKNOWLEDGED, {"notifications": {named_key: honored}}, subscription))
    threading.Thread(target=_follow, args=(tools, rt, token_hash, honored, subscription, request_id, events, gone),
                     name="mcp-listen", daemon=True).start()
    return event_stream(events, gone)


def _follow(
    tools: ToolSet, rt: Runtime, token_hash: str, task_ids: list[str], subscription: str, request_id: Any,
    events: queue.Queue[dict[str, Any]], gone: threading.Event,
) -> None:
    """Queue a status notification for each change of the tasks, then the listen's own result."""
    database.connect(reuse_if_open=True)
    sent: dict[str, str] = {}
    channels = [keys.mcp_task_channel(rt.config.namespace, task_id) for task_id in task_ids]

    def look() -> Look[bool]:
        ended = True
        for task_id in task_ids:
            try:
                task = current(tools, rt, token_hash, task_id)
            except WireError:  # expired meanwhile
                continue
            shown = view(task)
            stamp = f"{task.status}|{shown['lastUpdatedAt']}"
            if sent.get(task_id) != stamp:
                sent[task_id] = stamp
                events.put(_notification(STATUS_NOTIFICATION, shown, subscription))
            ended = ended and store.is_ended(task)
        release_connection()
        return Look(ended, settled=ended or gone.is_set())

    try:
        wait_on_signals(rt, channels, look, recheck_seconds=LISTEN_RECHECK_SECONDS)
        events.put(mcp_wire.result(request_id, {"resultType": "complete", "_meta": {mcp_wire.SUBSCRIPTION_ID_KEY: subscription}}))
    except Exception:
        log.exception("MCP listen stream failed")
        events.put(mcp_wire.error(request_id, mcp_wire.INTERNAL_ERROR, "Internal error: the listen stream failed."))
    finally:
        if not database.is_closed():
            database.close()


def _notification(method: str, params: dict[str, Any], subscription: str) -> dict[str, Any]:
    meta = {**params.get("_meta", {}), mcp_wire.SUBSCRIPTION_ID_KEY: subscription}
    return {"jsonrpc": "2.0", "method": method, "params": {**params, "_meta": meta}}
