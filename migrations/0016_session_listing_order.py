"""Sessions listed newest first with the id breaking ties (list_sessions, the page) read in an
index's order: the two indexes on `last_activity_at` take the id as their last column."""


def up(migrator, db):
    migrator.migrate(
        migrator.drop_index("session", "session_archived_last_activity_at"),
        migrator.drop_index("session", "session_last_activity_at"),
        migrator.add_index("session", ("archived", "last_activity_at", "id"), False),
        migrator.add_index("session", ("last_activity_at", "id"), False),
    )


def down(migrator, db):
    migrator.migrate(
        migrator.drop_index("session", "session_last_activity_at_id"),
        migrator.drop_index("session", "session_archived_last_activity_at_id"),
        migrator.add_index("session", ("last_activity_at",), False),
        migrator.add_index("session", ("archived", "last_activity_at"), False),
    )
