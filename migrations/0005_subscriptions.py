"""Watching sessions (docs/events.md): subscriptions, events held for delivery, reply receipts.

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign keys need; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class Subscription(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        watcher = pw.ForeignKeyField(Session, on_delete="CASCADE")
        scope = pw.CharField(max_length=8)
        sessions = pw.TextField()
        exclude = pw.TextField()
        events = pw.TextField()
        once = pw.BooleanField(default=False)
        match = pw.TextField(null=True)
        stalled_minutes = pw.IntegerField(default=15)
        heartbeat_minutes = pw.IntegerField(null=True)
        digest_minutes = pw.IntegerField(null=True)
        quiet_hours = pw.TextField(null=True)
        hops = pw.IntegerField(default=0)
        created_at = pw.DateTimeField()
        last_digest_at = pw.DateTimeField(null=True)
        idle = pw.BooleanField(default=True)
        ended_at = pw.DateTimeField(null=True)
        end_reason = pw.CharField(null=True, max_length=16)

        class Meta:
            database = db
            table_name = "subscription"
            indexes = ((("watcher", "ended_at"), False),)

    class HeldEvent(pw.Model):
        id = pw.AutoField()
        watcher = pw.ForeignKeyField(Session, on_delete="CASCADE")
        event_seq = pw.IntegerField(null=True)
        subscription_id = pw.CharField(max_length=32)
        kind = pw.CharField(max_length=32)
        line = pw.TextField()
        urgent = pw.BooleanField(default=False)
        reason = pw.CharField(max_length=8)
        turn_id = pw.CharField(null=True, max_length=32)
        due_at = pw.DateTimeField(index=True)
        created_at = pw.DateTimeField()
        delivered_at = pw.DateTimeField(null=True)
        message_id = pw.CharField(null=True, max_length=32)
        dropped = pw.BooleanField(default=False)

        class Meta:
            database = db
            table_name = "held_event"
            indexes = ((("watcher", "event_seq"), True), (("watcher", "delivered_at"), False))

    class ReplyReceipt(pw.Model):
        turn_id = pw.CharField(primary_key=True, max_length=32)
        waiter = pw.CharField(max_length=32)
        waiting_until = pw.DateTimeField(null=True)
        received_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "reply_receipt"

    db.create_tables([Subscription, HeldEvent, ReplyReceipt])


def down(migrator, db):
    for table in ("reply_receipt", "held_event", "subscription"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
