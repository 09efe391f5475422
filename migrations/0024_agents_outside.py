"""Conversations whose agent works outside the relay (docs/sessions.md#agents-outside-the-relay)."""

import peewee as pw


def up(migrator, db):
    migrator.migrate(
        migrator.add_column("session", "agent_outside", pw.BooleanField(null=True)),
        migrator.add_column("session", "outside_taken_at", pw.DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(
        migrator.drop_column("session", "outside_taken_at"),
        migrator.drop_column("session", "agent_outside"),
    )
