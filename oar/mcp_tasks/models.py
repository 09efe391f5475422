"""The table of MCP tasks (docs/mcp.md#tasks)."""

from __future__ import annotations

import peewee as pw

from oar.core.models import BaseModel, JSONField


class McpTask(BaseModel):
    """One tool call run as a task: who made it, what it waits on, and how it ended.

    The web process that runs the call renews `lease_until`; a task whose lease ran out lost
    its process, and what it waited on (`session_id`, `message_id`) says how it ended."""

    id = pw.CharField(primary_key=True, max_length=64)
    # The agent token that made it, as stored (SHA-256): no other token sees or cancels it.
    token_hash = pw.CharField(max_length=64, index=True)
    caller_id = pw.CharField(max_length=32)
    tool = pw.CharField(max_length=64)
    action = pw.CharField(null=True, max_length=64)
    status = pw.CharField(max_length=16)  # an McpTaskStatus
    status_message = pw.TextField(null=True)
    # The prompt the call wrote and waits on, once it wrote one.
    session_id = pw.CharField(null=True, max_length=32)
    message_id = pw.CharField(null=True, max_length=32)
    result = JSONField(null=True)
    error = JSONField(null=True)
    cancel_requested = pw.BooleanField(default=False)
    created_at = pw.DateTimeField()
    updated_at = pw.DateTimeField()
    lease_until = pw.DateTimeField(null=True)
    expires_at = pw.DateTimeField(index=True)


MODELS: tuple[type[BaseModel], ...] = (McpTask,)
