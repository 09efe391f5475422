"""The relay's tables. The database is the truth; Redis holds only queues and signals."""

from __future__ import annotations

import json
from typing import Any

import peewee as pw

from oar.db import database
from oar.timeutil import utcnow


class JSONField(pw.TextField):
    """JSON stored as text, so SQLite and PostgreSQL hold it alike."""

    def db_value(self, value: Any) -> str | None:
        return None if value is None else json.dumps(value, separators=(",", ":"))

    def python_value(self, value: str | None) -> Any:
        return None if value is None else json.loads(value)


class BaseModel(pw.Model):
    class Meta:
        database = database
        legacy_table_names = False


class Setting(BaseModel):
    """Owner settings and relay-wide values, one JSON value per key."""

    key = pw.CharField(primary_key=True, max_length=64)
    value = JSONField()


class Provider(BaseModel):
    """A configured provider account. `api_key` is write-only: never returned or logged."""

    name = pw.CharField(primary_key=True, max_length=64)
    kind = pw.CharField(max_length=32)
    options = JSONField(default=dict)  # base_url, models, default_model, efforts, family, …
    api_key = pw.TextField(null=True)
    position = pw.IntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)


class Group(BaseModel):
    """Sessions grouped together. Owner groups are kept when emptied; agent groups vanish."""

    id = pw.CharField(primary_key=True, max_length=32)
    name = pw.CharField(null=True, max_length=200)
    owner_created = pw.BooleanField(default=False)
    head_session_id = pw.CharField(null=True, max_length=32)
    position = pw.IntegerField(default=0)
    dissolved = pw.BooleanField(default=False)
    created_at = pw.DateTimeField(default=utcnow)


class Session(BaseModel):
    """A conversation: its settings, who started it, and the turn it is running."""

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
    created_at = pw.DateTimeField(default=utcnow)
    last_activity_at = pw.DateTimeField(default=utcnow, index=True)
    message_count = pw.IntegerField(default=0)
    # Who started it: null for the owner's own conversations.
    created_by_session = pw.CharField(null=True, max_length=32, index=True)
    created_by_relay = pw.CharField(null=True, max_length=200)  # null: this relay
    created_by_title = pw.CharField(null=True, max_length=200)
    may_create_sessions = pw.BooleanField(default=False)
    group = pw.ForeignKeyField(Group, null=True, backref="sessions", on_delete="SET NULL")
    thinking_enabled = pw.BooleanField(null=True)
    thinking_display = pw.CharField(null=True, max_length=16)
    auto_compact_window = pw.CharField(null=True, max_length=16)
    # The prompt whose turn is running now; set by a conditional UPDATE (the claim), so
    # a session never runs two turns at once.
    active_turn = pw.CharField(null=True, max_length=32)
    # Agent-to-agent prompts this conversation sent since the owner last wrote in it.
    loop_prompt_count = pw.IntegerField(default=0)

    class Meta:
        indexes = ((("archived", "last_activity_at"), False),)


class AgentToken(BaseModel):
    """An agent token for a session, stored as its SHA-256 hash."""

    token_hash = pw.CharField(primary_key=True, max_length=64)
    session = pw.ForeignKeyField(Session, backref="tokens", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow)


class Message(BaseModel):
    """A message in a session. Prompts carry the status of the turn they start."""

    seq = pw.AutoField()
    id = pw.CharField(unique=True, max_length=32)
    session = pw.ForeignKeyField(Session, backref="messages", on_delete="CASCADE")
    role = pw.CharField(max_length=12)  # user | assistant | event | schedule | system
    text = pw.TextField()
    created_at = pw.DateTimeField(default=utcnow)
    # Provenance of a prompt (SPEC §2).
    from_kind = pw.CharField(default="user", max_length=12)  # user | agent | schedule | event
    from_relay = pw.CharField(null=True, max_length=200)
    from_session = pw.CharField(null=True, max_length=32)
    from_session_title = pw.CharField(null=True, max_length=200)
    from_model = pw.CharField(null=True, max_length=200)
    hops = pw.IntegerField(default=0)
    acts_for_user = pw.BooleanField(default=False)
    # The turn this prompt starts (null for messages that start none, e.g. replies).
    status = pw.CharField(null=True, max_length=20)
    mode = pw.CharField(null=True, max_length=8)
    model = pw.CharField(null=True, max_length=200)
    effort = pw.CharField(null=True, max_length=32)
    partial_text = pw.TextField(null=True)
    activities = JSONField(null=True)
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


MODELS: tuple[type[BaseModel], ...] = (Setting, Provider, Group, Session, AgentToken, Message)
