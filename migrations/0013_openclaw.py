"""OpenClaw's session tools (docs/openclaw.md): their runs, the prompts they wrote, and the
owner's per-session send policy.

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Run(pw.Model):
        id = pw.CharField(primary_key=True, max_length=36)
        kind = pw.CharField(max_length=8)
        requester_session_id = pw.CharField(max_length=32, index=True)
        requester_runs = pw.BooleanField(default=False)
        target_session_id = pw.CharField(max_length=32, index=True)
        child_key = pw.CharField(null=True, max_length=300, unique=True)
        agent_id = pw.CharField(null=True, max_length=64)
        label = pw.CharField(null=True, max_length=200)
        mode = pw.CharField(default="run", max_length=8)
        cleanup = pw.CharField(default="keep", max_length=8)
        request_text = pw.TextField()
        request_message_id = pw.CharField(max_length=32)
        first_reply = pw.TextField(null=True)
        latest_reply = pw.TextField(null=True)
        step = pw.CharField(default="main", max_length=10)
        ping_pong_done = pw.IntegerField(default=0)
        max_ping_pong = pw.IntegerField(default=0)
        awaiting_message_id = pw.CharField(null=True, max_length=32, index=True)
        deadline_at = pw.DateTimeField(null=True, index=True)
        timed_out = pw.BooleanField(default=False)
        archive_at = pw.DateTimeField(null=True, index=True)
        outcome = pw.CharField(null=True, max_length=16)
        created_at = pw.DateTimeField()
        ended_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "openclaw_run"

    class InterSessionMessage(pw.Model):
        message_id = pw.CharField(primary_key=True, max_length=32)
        run_id = pw.CharField(max_length=36, index=True)
        source_session_key = pw.CharField(max_length=300)
        source_tool = pw.CharField(max_length=32)

        class Meta:
            database = db
            table_name = "openclaw_message"

    class SessionSendPolicy(pw.Model):
        session_id = pw.CharField(primary_key=True, max_length=32)
        send_policy = pw.CharField(max_length=8)

        class Meta:
            database = db
            table_name = "openclaw_send_policy"

    db.create_tables([Run, InterSessionMessage, SessionSendPolicy])


def down(migrator, db):
    for table in ("openclaw_send_policy", "openclaw_message", "openclaw_run"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
