"""MCP tasks (docs/mcp.md#tasks): tool calls an MCP client lets run in the background.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class McpTask(pw.Model):
        id = pw.CharField(primary_key=True, max_length=64)
        token_hash = pw.CharField(max_length=64, index=True)
        caller_id = pw.CharField(max_length=32)
        tool = pw.CharField(max_length=64)
        action = pw.CharField(null=True, max_length=64)
        status = pw.CharField(max_length=16)
        status_message = pw.TextField(null=True)
        session_id = pw.CharField(null=True, max_length=32)
        message_id = pw.CharField(null=True, max_length=32)
        result = pw.TextField(null=True)
        error = pw.TextField(null=True)
        cancel_requested = pw.BooleanField(default=False)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()
        lease_until = pw.DateTimeField(null=True)
        expires_at = pw.DateTimeField(index=True)

        class Meta:
            database = db
            table_name = "mcp_task"

    db.create_tables([McpTask])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "mcp_task"')
