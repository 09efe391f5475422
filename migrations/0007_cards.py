"""Approval cards and the Allows remembered per conversation and relay.

A frozen copy of the tables as they were when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign keys need; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class Card(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        turn_id = pw.CharField(max_length=32, index=True)
        action = pw.CharField(max_length=40)
        relay = pw.CharField(max_length=200)
        target_id = pw.CharField(null=True, max_length=32)
        reasons = pw.TextField()
        text = pw.TextField()
        details = pw.TextField()
        status = pw.CharField(default="pending", max_length=12)
        created_at = pw.DateTimeField()
        expires_at = pw.DateTimeField()
        decided_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "card"
            indexes = ((("status", "created_at"), False),)

    class Approval(pw.Model):
        id = pw.AutoField()
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        relay = pw.CharField(max_length=200)
        kind = pw.CharField(max_length=32)
        card_id = pw.CharField(null=True, max_length=32)
        granted_at = pw.DateTimeField()

        class Meta:
            database = db
            table_name = "approval"
            indexes = ((("session", "relay", "kind"), True),)

    db.create_tables([Card, Approval])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "approval"')
    db.execute_sql('DROP TABLE IF EXISTS "card"')
