"""Watching sessions, finished (docs/events.md#events, docs/events.md#delivery): heartbeat due times, stall tracking and
a record of wake-ups for the hourly cap.

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign keys need; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class StallWatch(pw.Model):
        subject = pw.CharField(primary_key=True, max_length=32)
        session_id = pw.CharField(max_length=32)
        size = pw.IntegerField(null=True)
        quiet_since = pw.DateTimeField()
        reported = pw.TextField()

        class Meta:
            database = db
            table_name = "stall_watch"

    class Wakeup(pw.Model):
        id = pw.AutoField()
        watcher = pw.ForeignKeyField(Session, on_delete="CASCADE")
        message_id = pw.CharField(max_length=32)
        delivered_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "wakeup"
            indexes = ((("watcher", "delivered_at"), False),)

    db.create_tables([StallWatch, Wakeup])
    migrator.migrate(
        migrator.add_column("subscription", "heartbeat_due_at", pw.DateTimeField(null=True)),
        migrator.add_index("subscription", ("heartbeat_due_at",), False),
        # Held rows: the queries of a wide fan-out (a watcher's next due time, its open window
        # and cap digest, what is overdue) find their rows through an index.
        migrator.drop_index("held_event", "heldevent_watcher_id_delivered_at"),
        migrator.drop_index("held_event", "heldevent_due_at"),
        migrator.drop_index("held_event", "heldevent_watcher_id"),
        migrator.add_index("held_event", ("watcher_id", "delivered_at", "due_at"), False),
        migrator.add_index("held_event", ("watcher_id", "reason", "due_at"), False),
        migrator.add_index("held_event", ("delivered_at", "due_at"), False),
    )


def down(migrator, db):
    migrator.migrate(
        migrator.drop_index("held_event", "held_event_delivered_at_due_at"),
        migrator.drop_index("held_event", "held_event_watcher_id_reason_due_at"),
        migrator.drop_index("held_event", "held_event_watcher_id_delivered_at_due_at"),
        migrator.add_index("held_event", ("due_at",), False),
        migrator.add_index("held_event", ("watcher_id", "delivered_at"), False),
        migrator.add_index("held_event", ("watcher_id",), False),
        migrator.drop_index("subscription", "subscription_heartbeat_due_at"),
        migrator.drop_column("subscription", "heartbeat_due_at"),
    )
    db.execute_sql('DROP TABLE IF EXISTS "wakeup"')
    db.execute_sql('DROP TABLE IF EXISTS "stall_watch"')
