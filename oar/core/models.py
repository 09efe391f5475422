"""The relay's tables. The database is the truth; Redis holds only queues and signals."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import peewee as pw

from oar.core.db import database
from oar.core.statuses import CardStatus, QuestionStatus, TaskStatus
from oar.core.timeutil import utcnow

if TYPE_CHECKING:
    _V = TypeVar("_V")

    class ObjectId(Generic[_V]):
        """The `<name>_id` attribute peewee adds beside a foreign key: the raw key on a row, the
        foreign key field on the class (for queries). peewee's stubs do not declare it, so each
        model names its own, annotation only (peewee sets the real attribute)."""

        @overload
        def __get__(self, instance: None, owner: Any) -> pw.ForeignKeyField[Any]: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> _V: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...
        def __set__(self, instance: object, value: _V) -> None: ...


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
    # Not a column: the COUNT that sessions.groups.active_groups selects with each group.
    member_count: int


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
    last_activity_at = pw.DateTimeField(default=utcnow)
    message_count = pw.IntegerField(default=0)
    # Who started it: null for the owner's own conversations.
    created_by_session = pw.CharField(null=True, max_length=32, index=True)
    created_by_relay = pw.CharField(null=True, max_length=200)  # null: this relay
    created_by_title = pw.CharField(null=True, max_length=200)
    may_create_sessions = pw.BooleanField(default=False)
    group = pw.ForeignKeyField(Group, null=True, backref="sessions", on_delete="SET NULL")
    group_id: ObjectId[str | None]
    thinking_enabled = pw.BooleanField(null=True)
    thinking_display = pw.CharField(null=True, max_length=16)
    auto_compact_window = pw.CharField(null=True, max_length=16)
    # The prompt whose turn is running now; set by a conditional UPDATE (the claim), so
    # a session never runs two turns at once.
    active_turn = pw.CharField(null=True, max_length=32)
    # Agent-to-agent prompts this conversation sent since the owner last wrote in it.
    loop_prompt_count = pw.IntegerField(default=0)
    # The agent's own id for this conversation (a cli agent resumes with it); reset by a new cwd.
    agent_session_id = pw.CharField(null=True, max_length=200)
    # A stand-in for a conversation on another relay whose agent calls this one (docs/relays.md#on-the-receiving-relay):
    # the calling relay's name. Stand-ins run no turns and are never listed or named by agents; they
    # hold what this relay keeps per calling conversation (cards, Allows, who started which session).
    remote_relay = pw.CharField(null=True, max_length=200)
    # Its agent works outside the relay (docs/sessions.md#agents-outside-the-relay): what arrives for it waits
    # to be taken, never starting a provider turn. Null until the owner says or the relay recognises it.
    agent_outside = pw.BooleanField(null=True)
    # When its agent outside last took what waited for it.
    outside_taken_at = pw.DateTimeField(null=True)

    class Meta:
        # Listings go newest first with the id breaking ties (list_sessions, the page): with the
        # id in the index they read in its order, without a sort of their own.
        indexes = ((("archived", "last_activity_at", "id"), False), (("last_activity_at", "id"), False))

    @classmethod
    def live(cls, archived: bool | None = None) -> pw.Expression:
        """The condition of a session that is not deleted: what an agent's token, a card, a question
        or a subscription still belongs to. With `archived`, only archived or only open ones."""
        condition = cls.deleted == False  # noqa: E712
        return condition if archived is None else condition & (cls.archived == archived)

    @classmethod
    def live_local(cls, archived: bool | None = None) -> pw.Expression:
        """`live()` and not a stand-in for another relay's conversation: the sessions lists show,
        count and agents name."""
        return cls.live(archived) & cls.remote_relay.is_null()


class AgentToken(BaseModel):
    """An agent token for a session, stored as its SHA-256 hash."""

    token_hash = pw.CharField(primary_key=True, max_length=64)
    session = pw.ForeignKeyField(Session, backref="tokens", on_delete="CASCADE")
    session_id: ObjectId[str]
    created_at = pw.DateTimeField(default=utcnow)


class SignIn(BaseModel):
    """A browser signed in to the owner's page (docs/owner-api.md#signing-in). Its cookie carries
    the sign-in id; the table holds the id's SHA-256 hash, so a database copy opens no page."""

    id_hash = pw.CharField(primary_key=True, max_length=64)
    created_at = pw.DateTimeField()
    last_seen_at = pw.DateTimeField(index=True)

    class Meta:
        table_name = "sign_in"


class Message(BaseModel):
    """A message in a session. Prompts carry the status of the turn they start."""

    seq = pw.AutoField()
    id = pw.CharField(unique=True, max_length=32)
    session = pw.ForeignKeyField(Session, backref="messages", on_delete="CASCADE")
    session_id: ObjectId[str]
    role = pw.CharField(max_length=12)  # user | assistant | event | schedule | system
    text = pw.TextField()
    created_at = pw.DateTimeField(default=utcnow)
    # Provenance of a prompt (docs/concepts.md#provenance-and-hop-count).
    from_kind = pw.CharField(default="user", max_length=12)  # user | agent | schedule | event
    from_relay = pw.CharField(null=True, max_length=200)
    from_session = pw.CharField(null=True, max_length=32)
    from_session_title = pw.CharField(null=True, max_length=200)
    from_model = pw.CharField(null=True, max_length=200)
    hops = pw.IntegerField(default=0)
    acts_for_user = pw.BooleanField(default=False)
    # The turn this prompt starts (null for messages that start none, e.g. replies).
    status = pw.CharField(null=True, max_length=20)  # a TurnStatus
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
    # The reply was still cut at the output budget after one continuation (docs/providers.md#output-budget).
    output_truncated = pw.BooleanField(default=False)

    class Meta:
        indexes = (
            (("session", "seq"), False),
            (("session", "status"), False),
            (("status", "heartbeat_at"), False),
        )


class Question(BaseModel):
    """A card waiting for an answer: `ask_user` (a turn waits on it) or `ask` (nobody waits)."""

    id = pw.CharField(primary_key=True, max_length=32)
    kind = pw.CharField(max_length=8)  # ask_user | ask
    # The session whose page shows the card, and the conversation that asked.
    session = pw.ForeignKeyField(Session, backref="questions", on_delete="CASCADE")
    session_id: ObjectId[str]
    asker_session_id = pw.CharField(max_length=32, index=True)
    turn_id = pw.CharField(null=True, max_length=32)  # ask_user: the prompt whose turn waits
    question = pw.TextField()
    header = pw.CharField(null=True, max_length=200)
    options = JSONField(default=list)
    multi_select = pw.BooleanField(default=False)
    allow_freeform = pw.BooleanField(default=True)
    recommendation = pw.TextField(null=True)
    detail = pw.TextField(null=True)
    hops = pw.IntegerField(default=0)
    status = pw.CharField(default=QuestionStatus.PENDING, max_length=12)  # a QuestionStatus
    answer = pw.TextField(null=True)
    choices = JSONField(null=True)
    via = pw.CharField(null=True, max_length=200)
    created_at = pw.DateTimeField(default=utcnow)
    answered_at = pw.DateTimeField(null=True)
    # How the owner answered it (a DecidedVia), and the notification channel of the link or
    # button (docs/notifications.md#how-it-was-decided); None for an agent's answer.
    decided_via = pw.CharField(null=True, max_length=12)
    decided_channel = pw.CharField(null=True, max_length=64)

    class Meta:
        indexes = ((("session", "status"), False),)


class Task(BaseModel):
    """A background shell command or monitor a session runs (docs/concepts.md).

    Output goes to a file under `<data dir>/tasks/` on the worker's machine; on PostgreSQL its
    end is copied into `TaskOutputChunk` rows as it grows, and read from there. A task reported
    by a provider that keeps its output itself may hold only its tail (`output_tail`).
    """

    id = pw.CharField(primary_key=True, max_length=32)
    session = pw.ForeignKeyField(Session, backref="tasks", on_delete="CASCADE")
    session_id: ObjectId[str]
    description = pw.TextField()
    type = pw.CharField(default="local_bash", max_length=16)  # local_bash | monitor | subagent
    command = pw.TextField(null=True)
    # True: run as `/bin/sh -c <command>` (owner setting shell_tasks_via_shell); else shlex.split.
    shell = pw.BooleanField(default=False)
    cwd = pw.TextField(null=True)
    status = pw.CharField(default=TaskStatus.RUNNING, max_length=12)  # a TaskStatus
    exit_code = pw.IntegerField(null=True)
    error = pw.TextField(null=True)
    output_path = pw.TextField(null=True)
    output_tail = pw.TextField(null=True)
    started_by_turn = pw.CharField(null=True, max_length=32)
    created_at = pw.DateTimeField(default=utcnow)
    started_at = pw.DateTimeField(default=utcnow)
    ended_at = pw.DateTimeField(null=True, index=True)
    last_output_at = pw.DateTimeField(null=True)
    # Set when a worker claims the task (the subprocess starts); written again every
    # TASK_HEARTBEAT_SECONDS while it runs, so the reconciler can fail orphaned tasks.
    heartbeat_at = pw.DateTimeField(null=True)
    # The subprocess (its process group) and the host it runs on, so the reconciler can
    # end a process whose worker died.
    pid = pw.IntegerField(null=True)
    host = pw.CharField(null=True, max_length=255)
    stop_requested = pw.BooleanField(default=False)
    stall_reported = pw.BooleanField(default=False)
    # Where the output is kept in the database (PostgreSQL): the agent's output file was not one the
    # relay may read (a link, not a regular file), so nothing of it was copied (docs/tasks.md#agent-output-files).
    output_refused = pw.BooleanField(default=False)

    class Meta:
        indexes = ((("session", "status"), False), (("status", "heartbeat_at"), False))


class TaskOutputChunk(BaseModel):
    """A piece of a task's output, on a relay whose database is PostgreSQL (docs/tasks.md#where-the-output-is-kept):
    the end of each task's output, in pieces of at most 64 KiB, so that every node reads what a
    worker on another machine wrote, and a node that dies loses none of it."""

    id = pw.BigAutoField()
    task = pw.ForeignKeyField(Task, on_delete="CASCADE", index=False)  # the unique index below starts with it
    task_id: ObjectId[str]
    start = pw.BigIntegerField()  # the offset of its first byte in the whole output
    data = pw.BlobField()

    class Meta:
        indexes = ((("task", "start"), True),)


class Event(BaseModel):
    """Something that happened in a session, kept for the delivery engine (docs/events.md#events).

    Written where it happens, in the same transaction as the change it reports; a delivery
    engine reads them in `seq` order. `payload` holds the event's own fields.
    """

    seq = pw.AutoField()
    session = pw.ForeignKeyField(Session, backref="events", on_delete="CASCADE")
    session_id: ObjectId[str]
    kind = pw.CharField(max_length=32)
    payload = JSONField(default=dict)
    created_at = pw.DateTimeField(default=utcnow, index=True)


class Schedule(BaseModel):
    """A prompt the relay queues into a conversation later, once or on a grid (docs/schedules.md#firing).

    `due_at` (indexed, UTC) is when the relay must next look at it: its next firing, or the
    next re-check while a firing is held by loop protection; null once it has ended.
    `next_fire_at` is the firing time shown to agents (the grid's, even while held).
    """

    id = pw.CharField(primary_key=True, max_length=32)
    target = pw.ForeignKeyField(Session, backref="schedules_into", on_delete="CASCADE")
    target_id: ObjectId[str]
    set_by = pw.ForeignKeyField(Session, backref="schedules_set", on_delete="CASCADE")
    # peewee's accessor for this key shadows Model.set_by_id (a classmethod the relay does
    # not use) on Schedule, at run time as well; mypy reports the clash.
    set_by_id: ObjectId[str]  # type: ignore[assignment]
    title = pw.CharField(max_length=200)
    text = pw.TextField()
    at = pw.DateTimeField(null=True)
    every_minutes = pw.IntegerField(null=True)
    cron = pw.CharField(null=True, max_length=200)
    tz = pw.CharField(null=True, max_length=64)
    once = pw.BooleanField(default=False)
    # The grid's origin: `at`, else the time set plus one interval (docs/schedules.md#firing).
    anchor = pw.DateTimeField()
    # Interval length in seconds when set (every_minutes × the minute, SCHEDULE_MINUTE_SECONDS).
    every_seconds = pw.FloatField(null=True)
    due_at = pw.DateTimeField(null=True, index=True)
    next_fire_at = pw.DateTimeField(null=True)
    last_fired_at = pw.DateTimeField(null=True)
    fired_count = pw.IntegerField(default=0)
    skipped_count = pw.IntegerField(default=0)
    held_since = pw.DateTimeField(null=True)
    # The message of the latest firing: a firing is skipped while it is still queued.
    last_message_id = pw.CharField(null=True, max_length=32)
    # Provenance of the turn that set the schedule, which its messages inherit.
    origin_relay = pw.CharField(null=True, max_length=200)
    origin_model = pw.CharField(null=True, max_length=200)
    hops = pw.IntegerField(default=0)
    acts_for_user = pw.BooleanField(default=False)
    created_at = pw.DateTimeField(default=utcnow)
    ended_at = pw.DateTimeField(null=True)
    end_reason = pw.CharField(null=True, max_length=16)  # a ScheduleEndReason

    class Meta:
        indexes = ((("target", "ended_at"), False), (("set_by", "ended_at"), False))


class Subscription(BaseModel):
    """A conversation (the watcher) watching sessions for events (docs/events.md)."""

    id = pw.CharField(primary_key=True, max_length=32)
    watcher = pw.ForeignKeyField(Session, backref="subscriptions", on_delete="CASCADE")
    watcher_id: ObjectId[str]
    scope = pw.CharField(max_length=8)  # all | sessions
    sessions = JSONField(default=list)  # session ids when scope is `sessions`
    exclude = JSONField(default=list)  # session ids left out of `all`
    events = JSONField(default=list)
    once = pw.BooleanField(default=False)
    match = pw.TextField(null=True)
    stalled_minutes = pw.IntegerField(default=15)
    heartbeat_minutes = pw.IntegerField(null=True)
    digest_minutes = pw.IntegerField(null=True)
    quiet_hours = JSONField(null=True)  # {from, to, tz}
    hops = pw.IntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)
    last_digest_at = pw.DateTimeField(null=True)
    # The next heartbeat (UTC, on the grid created_at + k × heartbeat_minutes, outside quiet
    # hours); null until the clock's sweeper first looks, and without heartbeat_minutes.
    heartbeat_due_at = pw.DateTimeField(null=True, index=True)
    # all_idle fires once per transition to idle: true while the watched sessions are idle.
    idle = pw.BooleanField(default=True)
    ended_at = pw.DateTimeField(null=True)
    end_reason = pw.CharField(null=True, max_length=16)  # a SubscriptionEndReason

    class Meta:
        indexes = ((("watcher", "ended_at"), False),)


class HeldEvent(BaseModel):
    """Events on their way to one watcher, held until `due_at` (UTC), then delivered once
    (docs/events.md#how-events-are-held).

    One row holds one event (`line` written in it), or — a bundle — several events of one
    ingested batch that share the watcher, due time, reason and subscription: `count` of
    them, `seqs` their runs of event numbers and the names they are received under
    (`[[first, last, kind], …]`), their lines written once per event in `EventLine`. So a
    wide fan-out writes one row per watcher and batch, not per watcher and event. A
    watcher gets an event once however many of its subscriptions match it (the cursor that
    claims each batch once, and the unique index); delivering claims rows with a
    conditional UPDATE on `delivered_at`. `position` orders the engine's own lines
    (`all_idle`, heartbeats) among event lines: the engine's cursor when they were made.
    """

    id = pw.AutoField()
    # No index of its own: the composite indexes below all start with it.
    watcher = pw.ForeignKeyField(Session, backref="held_events", on_delete="CASCADE", index=False)
    watcher_id: ObjectId[str]
    event_seq = pw.IntegerField(null=True)  # null for lines the engine makes (all_idle)
    subscription_id = pw.CharField(max_length=32)
    kind = pw.CharField(max_length=32)
    line = pw.TextField(null=True)  # null for a bundle: its lines are in EventLine
    count = pw.IntegerField(default=1)
    seqs = JSONField(null=True)  # a bundle's [[first seq, last seq, kind], …]
    position = pw.IntegerField(null=True)  # the engine's lines: the cursor when made
    urgent = pw.BooleanField(default=False)
    reason = pw.CharField(max_length=8)  # urgent | window | cap | digest | quiet | own
    turn_id = pw.CharField(null=True, max_length=32)  # turn_end: the prompt of that turn
    due_at = pw.DateTimeField()
    created_at = pw.DateTimeField(default=utcnow)
    delivered_at = pw.DateTimeField(null=True)
    message_id = pw.CharField(null=True, max_length=32)
    dropped = pw.BooleanField(default=False)

    class Meta:
        indexes = (
            (("watcher", "event_seq"), True),
            # A watcher's held rows by due time; its open window and cap digest; what is overdue.
            (("watcher", "delivered_at", "due_at"), False),
            (("watcher", "reason", "due_at"), False),
            (("delivered_at", "due_at"), False),
        )


class EventLine(BaseModel):
    """How one event reads under one name (docs/events.md#events), written once for all the
    watchers whose held bundles (`HeldEvent.seqs`) carry it."""

    id = pw.AutoField()
    seq = pw.IntegerField()
    kind = pw.CharField(max_length=32)
    line = pw.TextField()

    class Meta:
        indexes = ((("seq", "kind"), True),)


class ReplyReceipt(BaseModel):
    """A conversation waiting through send / wait for a turn it prompted (own-prompt
    suppression, docs/events.md#own-prompts): `waiting_until` while it waits, `received_at` once it got the reply."""

    turn_id = pw.CharField(primary_key=True, max_length=32)
    waiter = pw.CharField(max_length=32)
    waiting_until = pw.DateTimeField(null=True)
    received_at = pw.DateTimeField(null=True)


class StallWatch(BaseModel):
    """A running turn or task as the clock's sweeper last saw it, for `stalled` (docs/events.md#events):
    since when it has shown no output, and which `stalled_minutes` were reported for that
    quiet spell. Removed once the turn or task no longer runs."""

    subject = pw.CharField(primary_key=True, max_length=32)  # a turn's prompt id or a task id
    session_id = pw.CharField(max_length=32)
    size = pw.IntegerField(null=True)  # a turn's output size when last seen (reply text + activities)
    quiet_since = pw.DateTimeField()
    reported = JSONField(default=list)  # stalled_minutes already reported for this quiet spell


class Wakeup(BaseModel):
    """One delivery of relay events to a watcher (a wake-up), counted by the hourly cap."""

    id = pw.AutoField()
    watcher = pw.ForeignKeyField(Session, backref="wakeups", on_delete="CASCADE")
    watcher_id: ObjectId[str]
    message_id = pw.CharField(max_length=32)
    delivered_at = pw.DateTimeField()

    class Meta:
        indexes = ((("watcher", "delivered_at"), False),)


class TokenUsage(BaseModel):
    """Tokens one provider pass used, for the monthly meters and caps of `usage` (docs/sessions.md#usage)."""

    id = pw.AutoField()
    provider = pw.CharField(max_length=64)
    model = pw.CharField(null=True, max_length=200)
    session_id = pw.CharField(null=True, max_length=32)
    turn_id = pw.CharField(null=True, max_length=32)
    input_tokens = pw.IntegerField(default=0)
    output_tokens = pw.IntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("provider", "created_at"), False),)


class Card(BaseModel):
    """An approval card: a call of a conversation's agent waiting on the owner's Allow or Deny
    (docs/rules.md#approval-cards). `reasons` says why it was asked; `details` what the call will do."""

    id = pw.CharField(primary_key=True, max_length=32)
    session = pw.ForeignKeyField(Session, backref="cards", on_delete="CASCADE")  # the asking conversation
    session_id: ObjectId[str]
    # The live turn the call belongs to; None: the waiting call itself is the live turn (a caller
    # whose turns the relay does not run), kept alive by `waiter_until`.
    turn_id = pw.CharField(null=True, max_length=32, index=True)
    action = pw.CharField(max_length=40)
    relay = pw.CharField(max_length=200)
    target_id = pw.CharField(null=True, max_length=32)
    reasons = JSONField(default=list)  # mode | create_sessions | watch_sessions | change_other_sessions | end_other_sessions | transfer | loop
    text = pw.TextField()
    details = JSONField(default=dict)  # lines, excerpt, target title
    status = pw.CharField(default=CardStatus.PENDING, max_length=12)  # a CardStatus
    created_at = pw.DateTimeField(default=utcnow)
    expires_at = pw.DateTimeField()
    decided_at = pw.DateTimeField(null=True)
    # A turnless card's lease: the waiting call renews it; past it, nobody waits (another process died).
    waiter_until = pw.DateTimeField(null=True)
    # The caller stopped waiting before a decision; the card stays pending for its remembered Allow.
    stopped_waiting_at = pw.DateTimeField(null=True)
    # How the owner decided it (a DecidedVia), and the notification channel of the link or button
    # (docs/notifications.md#how-it-was-decided); None when nobody did (it expired, was withdrawn).
    decided_via = pw.CharField(null=True, max_length=12)
    decided_channel = pw.CharField(null=True, max_length=64)

    class Meta:
        indexes = ((("status", "created_at"), False),)


class Approval(BaseModel):
    """An Allow remembered per conversation and relay, across restarts (docs/rules.md#when-a-card-is-asked): the first
    `create_session`, the first watch, changing, and stopping or archiving, sessions the conversation did not start."""

    id = pw.AutoField()
    session = pw.ForeignKeyField(Session, backref="approvals", on_delete="CASCADE")
    session_id: ObjectId[str]
    relay = pw.CharField(max_length=200)
    kind = pw.CharField(max_length=32)
    card_id = pw.CharField(null=True, max_length=32)  # null: granted ahead by the owner
    granted_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("session", "relay", "kind"), True),)


MODELS: tuple[type[BaseModel], ...] = (
    Setting, Provider, Group, Session, AgentToken, SignIn, Message, Question, Task, TaskOutputChunk, Event, Schedule,
    Subscription, HeldEvent, EventLine, ReplyReceipt, TokenUsage, Card, Approval, StallWatch, Wakeup,
)
