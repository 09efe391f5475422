"""Sign-ins of the owner's page kept on the server (docs/owner-api.md#signing-in): signing out
ends one, "sign out everywhere" all, and one ends 14 days after its last visit.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class SignIn(pw.Model):
        id_hash = pw.CharField(primary_key=True, max_length=64)
        created_at = pw.DateTimeField()
        last_seen_at = pw.DateTimeField(index=True)

        class Meta:
            database = db
            table_name = "sign_in"

    db.create_tables([SignIn])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "sign_in"')
