"""Paired relays (docs/relays.md): pairing tokens given out, the relays this one is paired with,
the conversations that unlocked them, other relays' calling conversations and their stand-in
sessions (`session.remote_relay`), asks and subscriptions kept on paired relays, and the relay
events waiting for another relay to fetch them.

A frozen copy of the tables as they were when this migration was written.
"""

import datetime

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class PairingToken(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        token_hash = pw.CharField(unique=True, max_length=64)
        label = pw.CharField(null=True, max_length=200)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)
        revoked_at = pw.DateTimeField(null=True)
        last_used_at = pw.DateTimeField(null=True)
        last_used_by = pw.CharField(null=True, max_length=200)

        class Meta:
            database = db
            table_name = "pairing_token"

    class Peer(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        name = pw.CharField(unique=True, max_length=200)
        url = pw.TextField()
        token = pw.TextField()
        level = pw.CharField(default="full", max_length=8)
        remote_name = pw.CharField(null=True, max_length=200)
        version = pw.CharField(null=True, max_length=40)
        features = pw.TextField(null=True)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)
        last_answered_at = pw.DateTimeField(null=True)
        last_tried_at = pw.DateTimeField(null=True)
        last_error = pw.CharField(null=True, max_length=64)
        events_cursor = pw.BigIntegerField(default=0)
        link_lost_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "peer"

    class PeerUnlock(pw.Model):
        id = pw.AutoField()
        peer = pw.ForeignKeyField(Peer, on_delete="CASCADE")
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        by = pw.CharField(max_length=8)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)

        class Meta:
            database = db
            table_name = "peer_unlock"
            indexes = ((("session", "peer"), True),)

    class RemoteCaller(pw.Model):
        id = pw.AutoField()
        pairing_token = pw.ForeignKeyField(PairingToken, on_delete="CASCADE")
        remote_session = pw.CharField(max_length=64)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)

        class Meta:
            database = db
            table_name = "remote_caller"
            indexes = ((("pairing_token", "remote_session"), True),)

    class PeerAsk(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        peer = pw.ForeignKeyField(Peer, on_delete="CASCADE")
        asker = pw.ForeignKeyField(Session, on_delete="CASCADE")
        about_session = pw.CharField(null=True, max_length=64)
        question = pw.TextField()
        hops = pw.IntegerField(default=0)
        status = pw.CharField(default="pending", max_length=12)
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)
        next_check_at = pw.DateTimeField(null=True, index=True)
        settled_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "peer_ask"

    class PeerSubscription(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        peer = pw.ForeignKeyField(Peer, on_delete="CASCADE")
        watcher = pw.ForeignKeyField(Session, on_delete="CASCADE")
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow)
        ended_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "peer_subscription"
            indexes = ((("peer", "ended_at"), False),)

    class RelayOutbox(pw.Model):
        id = pw.AutoField()
        watcher = pw.ForeignKeyField(Session, on_delete="CASCADE")
        text = pw.TextField()
        kinds = pw.TextField(default="{}")
        created_at = pw.DateTimeField(default=datetime.datetime.utcnow, index=True)

        class Meta:
            database = db
            table_name = "relay_outbox"
            indexes = ((("watcher", "id"), False),)

    migrator.migrate(migrator.add_column("session", "remote_relay", pw.CharField(null=True, max_length=200)))
    db.create_tables([PairingToken, Peer, PeerUnlock, RemoteCaller, PeerAsk, PeerSubscription, RelayOutbox])


def down(migrator, db):
    for table in ("relay_outbox", "peer_subscription", "peer_ask", "remote_caller", "peer_unlock", "peer", "pairing_token"):
        db.execute_sql(f'DROP TABLE IF EXISTS "{table}"')
    db.execute_sql('DELETE FROM "session" WHERE "remote_relay" IS NOT NULL')
    migrator.migrate(migrator.drop_column("session", "remote_relay"))
