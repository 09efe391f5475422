"""Deciding from a notification (docs/notifications.md#deciding-from-a-notification): decision
links, whether each channel sends them, and how each card and question was decided.

Channels that exist already keep sending what they sent: only Web Push channels (which reach
the owner's own browsers) start carrying decision links and buttons; a url channel's owner
turns them on.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Channel(pw.Model):
        name = pw.CharField(primary_key=True, max_length=64)

        class Meta:
            database = db
            table_name = "notification_channel"

    class DecisionLink(pw.Model):
        token_hash = pw.CharField(primary_key=True, max_length=64)
        subject = pw.CharField(max_length=32, index=True)
        subject_kind = pw.CharField(max_length=8)
        channel = pw.ForeignKeyField(Channel, on_delete="CASCADE")
        created_at = pw.DateTimeField()
        expires_at = pw.DateTimeField(index=True)
        used_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "decision_link"

    migrator.migrate(
        migrator.add_column("notification_channel", "decisions", pw.BooleanField(default=False)),
        migrator.add_column("card", "decided_via", pw.CharField(null=True, max_length=12)),
        migrator.add_column("card", "decided_channel", pw.CharField(null=True, max_length=64)),
        migrator.add_column("question", "decided_via", pw.CharField(null=True, max_length=12)),
        migrator.add_column("question", "decided_channel", pw.CharField(null=True, max_length=64)),
    )
    db.execute_sql(f'UPDATE "notification_channel" SET "decisions" = {db.param} WHERE "type" = {db.param}', (True, "webpush"))
    db.create_tables([DecisionLink])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "decision_link"')
    migrator.migrate(
        migrator.drop_column("question", "decided_channel"),
        migrator.drop_column("question", "decided_via"),
        migrator.drop_column("card", "decided_channel"),
        migrator.drop_column("card", "decided_via"),
        migrator.drop_column("notification_channel", "decisions"),
    )
