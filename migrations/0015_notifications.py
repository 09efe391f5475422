"""Notifications to the owner (docs/notifications.md): channels, the outbox, what was already
announced, and Web Push subscriptions.

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Channel(pw.Model):
        name = pw.CharField(primary_key=True, max_length=64)
        type = pw.CharField(max_length=16)
        kinds = pw.TextField()
        url = pw.TextField(null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()
        last_sent_at = pw.DateTimeField(null=True)
        last_error = pw.TextField(null=True)
        last_error_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "notification_channel"

    class Notification(pw.Model):
        id = pw.AutoField()
        channel = pw.ForeignKeyField(Channel, on_delete="CASCADE")
        kind = pw.CharField(max_length=32)
        session_id = pw.CharField(null=True, max_length=32)
        merge_key = pw.CharField(max_length=80)
        count = pw.IntegerField(default=1)
        subjects = pw.TextField()
        title = pw.CharField(max_length=200)
        body = pw.TextField()
        link = pw.TextField(null=True)
        status = pw.CharField(default="pending", max_length=12)
        created_at = pw.DateTimeField()
        due_at = pw.DateTimeField()
        attempts = pw.IntegerField(default=0)
        lease_until = pw.DateTimeField(null=True)
        sent_at = pw.DateTimeField(null=True)
        error = pw.TextField(null=True)
        pushed_to = pw.TextField()

        class Meta:
            database = db
            table_name = "notification"
            indexes = (
                (("status", "due_at"), False),
                (("channel", "merge_key", "status"), False),
            )

    class Announced(pw.Model):
        key = pw.CharField(primary_key=True, max_length=120)
        created_at = pw.DateTimeField(index=True)

        class Meta:
            database = db
            table_name = "notification_announced"

    class PushSubscription(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        endpoint = pw.TextField(unique=True)
        p256dh = pw.CharField(max_length=100)
        auth = pw.CharField(max_length=40)
        label = pw.CharField(null=True, max_length=100)
        created_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "push_subscription"

    class VapidKey(pw.Model):
        id = pw.IntegerField(primary_key=True)
        private_pem = pw.TextField()
        created_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "webpush_vapid_key"

    db.create_tables([Channel, Notification, Announced, PushSubscription, VapidKey])


def down(migrator, db):
    for table in ("notification", "notification_announced", "notification_channel", "push_subscription",
                  "webpush_vapid_key"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
