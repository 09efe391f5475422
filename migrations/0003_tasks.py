"""Background tasks and the event record the delivery engine will read (docs/concepts.md#background-tasks, docs/events.md#events).

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign keys need; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class Task(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        description = pw.TextField()
        type = pw.CharField(default="local_bash", max_length=16)
        command = pw.TextField(null=True)
        shell = pw.BooleanField(default=False)
        cwd = pw.TextField(null=True)
        status = pw.CharField(default="running", max_length=12)
        exit_code = pw.IntegerField(null=True)
        error = pw.TextField(null=True)
        output_path = pw.TextField(null=True)
        output_tail = pw.TextField(null=True)
        started_by_turn = pw.CharField(null=True, max_length=32)
        created_at = pw.DateTimeField()
        started_at = pw.DateTimeField()
        ended_at = pw.DateTimeField(null=True, index=True)
        last_output_at = pw.DateTimeField(null=True)
        heartbeat_at = pw.DateTimeField(null=True)
        pid = pw.IntegerField(null=True)
        host = pw.CharField(null=True, max_length=255)
        stop_requested = pw.BooleanField(default=False)
        stall_reported = pw.BooleanField(default=False)

        class Meta:
            database = db
            table_name = "task"
            indexes = ((("session", "status"), False), (("status", "heartbeat_at"), False))

    class Event(pw.Model):
        seq = pw.AutoField()
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        kind = pw.CharField(max_length=32)
        payload = pw.TextField()
        created_at = pw.DateTimeField(index=True)

        class Meta:
            database = db
            table_name = "event"

    db.create_tables([Task, Event])


def down(migrator, db):
    for table in ("event", "task"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
