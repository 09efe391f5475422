"""MCP tasks in the database (docs/mcp.md#tasks): made, renewed, moved on, ended, read back, pruned.

A task lives in the database, not in the web process that runs its call: any web process or
node answers for it, and it outlives a restart. The process running the call renews the
task's lease; one whose lease ran out lost that process, and `orphaned` says so. Every change
publishes the task's wake-up channel, so its runner (a cancel) and its listeners (a status
notification) look again.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from oar.core import keys
from oar.core.db import write_transaction
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import ENDED_MCP_TASK, McpTaskStatus
from oar.mcp_tasks.models import McpTask

# Task ids are bearer handles (the extension's advice): 192 random bits, printable ASCII.
ID_BYTES = 24


def new_id() -> str:
    return f"mcptask_{secrets.token_urlsafe(ID_BYTES)}"


def create(
    runtime: Runtime, *, token_hash: str, caller_id: str, tool: str, action: str | None, now: datetime
) -> McpTask:
    """A working task, committed before its id is given to the client (the extension's rule)."""
    with write_transaction():
        return McpTask.create(
            id=new_id(), token_hash=token_hash, caller_id=caller_id, tool=tool[:64], action=(action or None) and action[:64],
            status=McpTaskStatus.WORKING, created_at=now, updated_at=now,
            lease_until=now + timedelta(seconds=runtime.time("MCP_TASK_LEASE_SECONDS")),
            expires_at=now + timedelta(seconds=runtime.time("MCP_TASK_TTL_SECONDS")),
        )


def owned(task_id: Any, token_hash: str, now: datetime) -> McpTask | None:
    """The token's task, or None: unknown, another token's, or expired are all the same answer."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    task = McpTask.get_or_none(McpTask.id == task_id)
    if task is None or not secrets.compare_digest(task.token_hash, token_hash) or task.expires_at <= now:
        return None
    return task


def read(task_id: str) -> McpTask:
    """The task `task_id` as stored now (it may have moved since it was read)."""
    return McpTask.get_by_id(task_id)


def is_ended(task: McpTask) -> bool:
    return task.status in ENDED_MCP_TASK


def orphaned(task: McpTask, now: datetime) -> bool:
    """The task has not ended and the process running its call stopped renewing it."""
    return not is_ended(task) and (task.lease_until is None or task.lease_until <= now)


def renew(runtime: Runtime, task_id: str, now: datetime) -> None:
    """Renew the runner's lease (the process running the task's call is alive)."""
    lease = now + timedelta(seconds=runtime.time("MCP_TASK_LEASE_SECONDS"))
    with write_transaction():
        McpTask.update(lease_until=lease).where(
            (McpTask.id == task_id) & McpTask.status.not_in(ENDED_MCP_TASK)
        ).execute()


def cancel_requested(task_id: str) -> bool:
    row = McpTask.select(McpTask.cancel_requested).where(McpTask.id == task_id).first()
    return row is None or bool(row.cancel_requested)


def set_waiting(runtime: Runtime, task_id: str, on_owner: str | None, now: datetime) -> None:
    """`input_required` while the call waits on the owner (`on_owner` says for what), `working` again after."""
    status, message = (McpTaskStatus.INPUT_REQUIRED, on_owner) if on_owner else (McpTaskStatus.WORKING, None)
    _change(runtime, task_id, now, status=status, status_message=message)


def note_prompt(runtime: Runtime, task_id: str, session_id: str, message_id: str, now: datetime) -> None:
    """The call wrote its prompt: from here its outcome is that prompt's, whatever becomes of the process."""
    _change(runtime, task_id, now, session_id=session_id, message_id=message_id)


def finish(
    runtime: Runtime, task_id: str, status: McpTaskStatus, now: datetime, *,
    result: dict[str, Any] | None = None, error: dict[str, Any] | None = None, message: str | None = None,
) -> bool:
    """End the task (once: an ended task stays as it ended); True if this call ended it."""
    return _change(runtime, task_id, now, status=status, result=result, error=error, status_message=message)


def request_cancel(runtime: Runtime, task: McpTask, now: datetime) -> bool:
    """Ask the task's runner to stop; True when the task had not ended."""
    return _change(runtime, task.id, now, cancel_requested=True)


def prune(now: datetime) -> int:
    """Delete tasks past their time to live; how many."""
    with write_transaction():
        return McpTask.delete().where(McpTask.expires_at <= now).execute()


def _change(runtime: Runtime, task_id: str, now: datetime, **changes: Any) -> bool:
    with write_transaction():
        changed = McpTask.update(updated_at=now, **changes).where(
            (McpTask.id == task_id) & McpTask.status.not_in(ENDED_MCP_TASK)
        ).execute()
    if changed:
        publish(runtime.redis, keys.mcp_task_channel(runtime.config.namespace, task_id))
    return bool(changed)
