"""Question cards: `ask_user` cards a turn waits on, and non-blocking `ask` questions.

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Session(pw.Model):  # only what the foreign key needs; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "session"

    class Question(pw.Model):
        id = pw.CharField(primary_key=True, max_length=32)
        kind = pw.CharField(max_length=8)
        session = pw.ForeignKeyField(Session, on_delete="CASCADE")
        asker_session_id = pw.CharField(max_length=32, index=True)
        turn_id = pw.CharField(null=True, max_length=32)
        question = pw.TextField()
        header = pw.CharField(null=True, max_length=200)
        options = pw.TextField()
        multi_select = pw.BooleanField(default=False)
        allow_freeform = pw.BooleanField(default=True)
        recommendation = pw.TextField(null=True)
        detail = pw.TextField(null=True)
        hops = pw.IntegerField(default=0)
        status = pw.CharField(default="pending", max_length=12)
        answer = pw.TextField(null=True)
        choices = pw.TextField(null=True)
        via = pw.CharField(null=True, max_length=200)
        created_at = pw.DateTimeField()
        answered_at = pw.DateTimeField(null=True)

        class Meta:
            database = db
            table_name = "question"
            indexes = ((("session", "status"), False),)

    db.create_tables([Question])


def down(migrator, db):
    db.execute_sql('DROP TABLE IF EXISTS "question"')
