"""Held bundles (docs/events.md#how-events-are-held): a held row may hold several events of one
ingested batch for one watcher (`count`, `seqs`), whose lines are written once per event in
`event_line`; `position` orders the engine's own lines among them.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class EventLine(pw.Model):
        id = pw.AutoField()
        seq = pw.IntegerField()
        kind = pw.CharField(max_length=32)
        line = pw.TextField()

        class Meta:
            database = db
            table_name = "event_line"
            indexes = ((("seq", "kind"), True),)

    db.create_tables([EventLine])
    migrator.migrate(
        migrator.add_column("held_event", "count", pw.IntegerField(default=1)),
        migrator.add_column("held_event", "seqs", pw.TextField(null=True)),
        migrator.add_column("held_event", "position", pw.IntegerField(null=True)),
        migrator.drop_not_null("held_event", "line"),
    )


def down(migrator, db):
    db.execute_sql('DELETE FROM "held_event" WHERE "line" IS NULL')
    migrator.migrate(
        migrator.add_not_null("held_event", "line"),
        migrator.drop_column("held_event", "position"),
        migrator.drop_column("held_event", "seqs"),
        migrator.drop_column("held_event", "count"),
    )
    db.execute_sql('DROP TABLE IF EXISTS "event_line"')
