"""Cards for callers the relay does not run (docs/rules.md#where-a-card-waits): the waiting call is
the card's live turn, so a card may have no turn; a waiting call holds a lease it renews while it
waits, and a card whose caller stopped waiting keeps a remembered Allow open in the Inbox.
"""

import peewee as pw


def up(migrator, db):
    migrator.migrate(
        migrator.drop_not_null("card", "turn_id"),
        migrator.add_column("card", "waiter_until", pw.DateTimeField(null=True)),
        migrator.add_column("card", "stopped_waiting_at", pw.DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(
        migrator.drop_column("card", "stopped_waiting_at"),
        migrator.drop_column("card", "waiter_until"),
    )
    db.execute_sql("DELETE FROM card WHERE turn_id IS NULL")
    migrator.migrate(migrator.add_not_null("card", "turn_id"))
