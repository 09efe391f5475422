"""Team runs (docs/team-runs.md): runs, the run each agent token's connection declared, messages,
work items and their dependencies, artifacts, reviews and memory.

A frozen copy of the tables as they were when this migration was written.
"""

import datetime

import peewee as pw


def up(migrator, db):
    class AgentToken(pw.Model):  # only what the foreign key needs; the table exists already
        token_hash = pw.CharField(primary_key=True, max_length=64)

        class Meta:
            database = db
            table_name = "agent_token"

    class TeamRun(pw.Model):
        id = pw.CharField(primary_key=True, max_length=40)
        started_by = pw.CharField(max_length=64)
        started_in_session = pw.CharField(null=True, max_length=32)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow, index=True)
        summary = pw.TextField(null=True)
        summary_by = pw.CharField(null=True, max_length=64)
        summary_at = pw.DateTimeField(null=True)
        orchestrator_state = pw.TextField(null=True)
        state_by = pw.CharField(null=True, max_length=64)
        state_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "team_run"

    class TeamConnection(pw.Model):
        token = pw.ForeignKeyField(AgentToken, primary_key=True, on_delete="CASCADE", column_name="token_hash")
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        agent_id = pw.CharField(max_length=64)
        declared_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "team_connection"

    class TeamMessage(pw.Model):
        seq = pw.AutoField()
        id = pw.CharField(unique=True, max_length=32)
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        from_agent = pw.CharField(max_length=64)
        to_agent = pw.CharField(null=True, max_length=64)
        content = pw.TextField()
        thread_id = pw.CharField(null=True, max_length=200)
        created_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "team_message"
            indexes = ((("run", "seq"), False),)

    class WorkItem(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        title = pw.CharField(max_length=300)
        description = pw.TextField(null=True)
        assignee = pw.CharField(null=True, max_length=64)
        priority = pw.CharField(max_length=8)
        status = pw.CharField(max_length=12)
        created_by = pw.CharField(max_length=64)
        parent = pw.ForeignKeyField("self", null=True, on_delete="CASCADE")
        derived_reason = pw.TextField(null=True)
        depth = pw.IntegerField(default=0)
        idempotency_key = pw.CharField(null=True, max_length=200)
        claimed_by = pw.CharField(null=True, max_length=64)
        claimed_at = pw.DateTimeField(null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "work_item"
            indexes = ((("run", "created_at"), False), (("run", "idempotency_key"), True))

    class WorkItemDependency(pw.Model):
        id = pw.AutoField()
        item = pw.ForeignKeyField(WorkItem, on_delete="CASCADE")
        needs = pw.ForeignKeyField(WorkItem, on_delete="CASCADE")

        class Meta:
            database = db
            table_name = "work_item_dependency"
            indexes = ((("item", "needs"), True),)

    class TeamArtifact(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        name = pw.CharField(max_length=200)
        type = pw.CharField(max_length=16)
        content = pw.TextField()
        created_by = pw.CharField(max_length=64)
        task = pw.ForeignKeyField(WorkItem, null=True, on_delete="SET NULL")
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "team_artifact"
            indexes = ((("run", "name"), True),)

    class TeamReview(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        artifact = pw.ForeignKeyField(TeamArtifact, on_delete="CASCADE")
        requested_by = pw.CharField(max_length=64)
        reviewer = pw.CharField(max_length=64)
        status = pw.CharField(max_length=20)
        comments = pw.TextField(null=True)
        created_at = pw.DateTimeField()
        submitted_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "team_review"
            indexes = ((("run", "created_at"), False),)

    class TeamMemory(pw.Model):
        owner = pw.CharField(primary_key=True, max_length=64)
        content = pw.TextField()
        updated_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "team_memory"

    db.create_tables([TeamRun, TeamConnection, TeamMessage, WorkItem, WorkItemDependency, TeamArtifact, TeamReview,
                      TeamMemory])


def down(migrator, db):
    for table in ("team_memory", "team_review", "team_artifact", "work_item_dependency", "work_item",
                  "team_message", "team_connection", "team_run"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
