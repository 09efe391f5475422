"""Task output kept in the database, so that every node of a relay reads it (docs/tasks.md#where-the-output-is-kept).

A frozen copy of the table as it was when this migration was written.
"""

import peewee as pw


def up(migrator, db):
    class Task(pw.Model):  # only what the foreign key needs; the table exists already
        id = pw.CharField(primary_key=True, max_length=32)

        class Meta:
            database = db
            table_name = "task"

    class TaskOutputChunk(pw.Model):
        id = pw.BigAutoField()
        task = pw.ForeignKeyField(Task, on_delete="CASCADE", index=False)
        start = pw.BigIntegerField()
        data = pw.BlobField()

        class Meta:
            database = db
            table_name = "task_output_chunk"
            indexes = ((("task", "start"), True),)

    db.create_tables([TaskOutputChunk])
    migrator.migrate(migrator.add_column("task", "output_refused", pw.BooleanField(default=False)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column("task", "output_refused"))
    db.execute_sql('DROP TABLE IF EXISTS "task_output_chunk"')
