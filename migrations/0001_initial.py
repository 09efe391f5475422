"""The initial schema: sessions, messages, tokens, groups, providers, settings.

A frozen copy of the models as they were when this migration was written, independent of
`oar.models` (which will move on); tests check the migrated schema equals the models.
"""

import datetime

import peewee as pw


def up(migrator, db):
    class Base(pw.Model):
        class Meta:
            database = db
            legacy_table_names = False

    class Setting(Base):
        key = pw.CharField(primary_key=True, max_length=64)
        value = pw.TextField()

    class Provider(Base):
        name = pw.CharField(primary_key=True, max_length=64)
        kind = pw.CharField(max_length=32)
        options = pw.TextField()
        api_key = pw.TextField(null=True)
        position = pw.IntegerField(default=0)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)

    class Group(Base):
        id = pw.CharField(primary_key=True, max_length=32)
        name = pw.CharField(null=True, max_length=200)
        owner_created = pw.BooleanField(default=False)
        head_session_id = pw.CharField(null=True, max_length=32)
        position = pw.IntegerField(default=0)
        dissolved = pw.BooleanField(default=False)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)

    class Session(Base):
        id = pw.CharField(primary_key=True, max_length=32)
        title = pw.CharField(max_length=200)
        provider = pw.CharField(max_length=64)
        model = pw.CharField(null=True, max_length=200)
        effort = pw.CharField(null=True, max_length=32)
        mode = pw.CharField(default="agent", max_length=8)
        cwd = pw.TextField(null=True)
        repo = pw.TextField(null=True)
        branch = pw.TextField(null=True)
        archived = pw.BooleanField(default=False)
        deleted = pw.BooleanField(default=False)
        created_at = pw.DateTimeField()
        last_activity_at = pw.DateTimeField(index=True)
        message_count = pw.IntegerField(default=0)
        created_by_session = pw.CharField(null=True, max_length=32, index=True)
        created_by_relay = pw.CharField(null=True, max_length=200)
        created_by_title = pw.CharField(null=True, max_length=200)
        may_create_sessions = pw.BooleanField(default=False)
        group = pw.ForeignKeyField(Group, null=True, on_delete="SET NULL")
        thinking_enabled = pw.BooleanField(null=True)
        thinking_display = pw.CharField(null=True, max_length=16)
        auto_compact_window = pw.CharField(null=True, max_length=16)
        active_turn = pw.CharField(null=True, max_length=32)
        loop_prompt_count = pw.IntegerField(default=0)

        class Meta:
            indexes = ((("archived", "last_activity_at"), False),)

    class AgentToken(Base):
        token_hash = pw.CharField(primary_key=True, max_length=64)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        created_at = pw.DateTimeField()

    class Message(Base):
        seq = pw.AutoField()
        id = pw.CharField(unique=True, max_length=32)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        role = pw.CharField(max_length=12)
        text = pw.TextField()
        created_at = pw.DateTimeField()
        from_kind = pw.CharField(default="user", max_length=12)
        from_relay = pw.CharField(null=True, max_length=200)
        from_session = pw.CharField(null=True, max_length=32)
        from_session_title = pw.CharField(null=True, max_length=200)
        from_model = pw.CharField(null=True, max_length=200)
        hops = pw.IntegerField(default=0)
        acts_for_user = pw.BooleanField(default=False)
        status = pw.CharField(null=True, max_length=20)
        mode = pw.CharField(null=True, max_length=8)
        model = pw.CharField(null=True, max_length=200)
        effort = pw.CharField(null=True, max_length=32)
        partial_text = pw.TextField(null=True)
        activities = pw.TextField(null=True)
        error = pw.TextField(null=True)
        reply_id = pw.CharField(null=True, max_length=32)
        stop_requested = pw.BooleanField(default=False)
        started_at = pw.DateTimeField(null=True)
        heartbeat_at = pw.DateTimeField(null=True)
        completed_at = pw.DateTimeField(null=True)

        class Meta:
            indexes = (
                (("session", "seq"), False),
                (("session", "status"), False),
                (("status", "heartbeat_at"), False),
            )

    db.create_tables([Setting, Provider, Group, Session, AgentToken, Message])


def down(migrator, db):
    for table in ("message", "agent_token", "session", "group", "provider", "setting"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
