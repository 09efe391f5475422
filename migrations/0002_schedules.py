"""Schedules (docs/schedules.md): prompts the relay queues into a conversation later.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign keys need; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class Schedule(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        target = pw.ForeignKeyField(Session, on_delete="CASCADE")
        set_by = pw.ForeignKeyField(Session, on_delete="CASCADE")
        title = pw.CharField(max_length=200)
        text = pw.TextField()
        at = pw.DateTimeField(null=True)
        every_minutes = pw.IntegerField(null=True)
        cron = pw.CharField(null=True, max_length=200)
        tz = pw.CharField(null=True, max_length=64)
        once = pw.BooleanField(default=False)
        anchor = pw.DateTimeField()
        every_seconds = pw.FloatField(null=True)
        due_at = pw.DateTimeField(null=True, index=True)
        next_fire_at = pw.DateTimeField(null=True)
        last_fired_at = pw.DateTimeField(null=True)
        fired_count = pw.IntegerField(default=0)
        skipped_count = pw.IntegerField(default=0)
        held_since = pw.DateTimeField(null=True)
        last_message_id = pw.CharField(null=True, max_length=32)
        origin_relay = pw.CharField(null=True, max_length=200)
        origin_model = pw.CharField(null=True, max_length=200)
        hops = pw.IntegerField(default=0)
        acts_for_user = pw.BooleanField(default=False)
        created_at = pw.DateTimeField()
        ended_at = pw.DateTimeField(null=True)
        end_reason = pw.CharField(null=True, max_length=16)

        class Meta:
            database = db
            table_name = "schedule"
            indexes = ((("target", "ended_at"), False), (("set_by", "ended_at"), False))

    db.create_tables([Schedule])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "schedule"')
