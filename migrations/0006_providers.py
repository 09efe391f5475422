"""Real providers: token usage per turn (monthly meters, caps), truncated replies, and the
agent-side session id of cli agents.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class TokenUsage(pw.Model):
        id = pw.AutoField()
        provider = pw.CharField(max_length=64)
        model = pw.CharField(null=True, max_length=200)
        session_id = pw.CharField(null=True, max_length=32)
        turn_id = pw.CharField(null=True, max_length=32)
        input_tokens = pw.IntegerField(default=0)
        output_tokens = pw.IntegerField(default=0)
        created_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "token_usage"
            indexes = ((("provider", "created_at"), False),)

    db.create_tables([TokenUsage])
    migrator.migrate(
        migrator.add_column("message", "output_truncated", pw.BooleanField(default=False)),
        migrator.add_column("session", "agent_session_id", pw.CharField(null=True, max_length=200)),
    )


def down(migrator, db):
    migrator.migrate(migrator.drop_column("message", "output_truncated"), migrator.drop_column("session", "agent_session_id"))
    db.execute_sql('DROP TABLE IF EXISTS "token_usage"')
