"""Team runs' own tables (docs/team-runs.md): runs, the run each connection declared, messages,
work items and their dependencies, artifacts, reviews and memory.

Names of their own (team_message, work_item, …) so that they never read as the relay's
sessions, messages or background tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import peewee as pw

from oar.core.models import AgentToken, BaseModel
from oar.core.timeutil import utcnow

if TYPE_CHECKING:
    from oar.core.models import ObjectId


class TeamRun(BaseModel):
    """A team run (the seed's "session"): id `YYYY-MM-DD-NNN-XXXX`, its summary and the
    orchestrator's saved state (both kept here, so they survive restarts)."""

    id = pw.CharField(primary_key=True, max_length=40)
    started_by = pw.CharField(max_length=64)
    # The relay session whose token declared it first (null: a summary named it first).
    started_in_session = pw.CharField(null=True, max_length=32)
    created_at = pw.DateTimeField(default=utcnow, index=True)
    summary = pw.TextField(null=True)
    summary_by = pw.CharField(null=True, max_length=64)
    summary_at = pw.DateTimeField(null=True)
    orchestrator_state = pw.TextField(null=True)
    state_by = pw.CharField(null=True, max_length=64)
    state_at = pw.DateTimeField(null=True)
    # The team it belongs to: the conversation at the root of its starter's tree (oar.team.access);
    # null: a run older than teams, seen only while the owner shares runs.
    team_root = pw.CharField(null=True, max_length=32, index=True)
    # Characters of agents' text the run stores, against TEAM_RUN_TEXT_MAX_CHARS.
    text_chars = pw.BigIntegerField(default=0)

    class Meta:
        table_name = "team_run"


class TeamConnection(BaseModel):
    """The run an agent token's connection declared with `start_session` (MCP over HTTP is
    stateless, so "the connection" is the token it authenticates with). Revoking the token
    forgets it."""

    token = pw.ForeignKeyField(AgentToken, primary_key=True, on_delete="CASCADE", column_name="token_hash")
    token_id: ObjectId[str]
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    agent_id = pw.CharField(max_length=64)
    declared_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "team_connection"


class TeamAgent(BaseModel):
    """An agent id of a run and the conversation it belongs to: the one whose token used it there
    first. Another conversation's call with that agent id is refused."""

    id = pw.AutoField()
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    agent_id = pw.CharField(max_length=64)
    session_id = pw.CharField(max_length=32)
    bound_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "team_agent"
        indexes = ((("run", "agent_id"), True),)


class TeamMessage(BaseModel):
    """A message between a run's agents; `to_agent` null: to everyone (a broadcast)."""

    seq = pw.AutoField()
    id = pw.CharField(unique=True, max_length=32)
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    from_agent = pw.CharField(max_length=64)
    to_agent = pw.CharField(null=True, max_length=64)
    content = pw.TextField()
    thread_id = pw.CharField(null=True, max_length=200)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "team_message"
        indexes = ((("run", "seq"), False),)


class WorkItem(BaseModel):
    """A task on a run's board. `claimed_by` is set by `claim_task`'s conditional UPDATE."""

    id = pw.CharField(primary_key=True, max_length=32)
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    title = pw.CharField(max_length=300)
    description = pw.TextField(null=True)
    assignee = pw.CharField(null=True, max_length=64)
    priority = pw.CharField(max_length=8)  # a Priority
    status = pw.CharField(max_length=12)  # a WorkStatus
    created_by = pw.CharField(max_length=64)
    # A derived task's parent, and why it was derived (the circuit breaker counts them).
    parent = pw.ForeignKeyField("self", null=True, on_delete="CASCADE", backref="derived")
    parent_id: ObjectId[str | None]
    derived_reason = pw.TextField(null=True)
    depth = pw.IntegerField(default=0)
    idempotency_key = pw.CharField(null=True, max_length=200)
    claimed_by = pw.CharField(null=True, max_length=64)
    claimed_at = pw.DateTimeField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "work_item"
        indexes = (
            (("run", "created_at"), False),
            (("run", "idempotency_key"), True),
        )


class WorkItemDependency(BaseModel):
    """`item` may start once `needs` is done (both of one run)."""

    id = pw.AutoField()
    item = pw.ForeignKeyField(WorkItem, on_delete="CASCADE", backref="needs")
    item_id: ObjectId[str]
    needs = pw.ForeignKeyField(WorkItem, on_delete="CASCADE", backref="needed_by")
    needs_id: ObjectId[str]

    class Meta:
        table_name = "work_item_dependency"
        indexes = ((("item", "needs"), True),)


class TeamArtifact(BaseModel):
    """A shared deliverable, by name within its run; posting the same name again replaces it."""

    id = pw.CharField(primary_key=True, max_length=32)
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    name = pw.CharField(max_length=200)
    type = pw.CharField(max_length=16)  # an ArtifactType
    content = pw.TextField()
    created_by = pw.CharField(max_length=64)
    task = pw.ForeignKeyField(WorkItem, null=True, on_delete="SET NULL")
    task_id: ObjectId[str | None]
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "team_artifact"
        indexes = ((("run", "name"), True),)


class TeamReview(BaseModel):
    """A review of an artifact by one named reviewer, submitted once."""

    id = pw.CharField(primary_key=True, max_length=32)
    run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
    run_id: ObjectId[str]
    artifact = pw.ForeignKeyField(TeamArtifact, on_delete="CASCADE")
    artifact_id: ObjectId[str]
    requested_by = pw.CharField(max_length=64)
    reviewer = pw.CharField(max_length=64)
    status = pw.CharField(max_length=20)  # a ReviewStatus
    comments = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    submitted_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "team_review"
        indexes = ((("run", "created_at"), False),)


class TeamMemory(BaseModel):
    """One memory file's markdown: an agent's (`owner` its id) or the project's (`owner` "")."""

    owner = pw.CharField(primary_key=True, max_length=64)
    content = pw.TextField()
    updated_at = pw.DateTimeField(default=utcnow)
    # The team that keeps it (the first that wrote it); null: nobody's yet (imported by the owner).
    team_root = pw.CharField(null=True, max_length=32, index=True)

    class Meta:
        table_name = "team_memory"


TEAM_MODELS: tuple[type[BaseModel], ...] = (
    TeamRun, TeamConnection, TeamAgent, TeamMessage, WorkItem, WorkItemDependency, TeamArtifact, TeamReview, TeamMemory,
)
