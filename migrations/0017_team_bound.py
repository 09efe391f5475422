"""Team runs bound to their team (docs/team-runs.md#runs-and-teams): the team each run and memory
file belongs to (the conversation at the root of its starter's tree), the conversation each agent
id of a run belongs to, and the text each run stores (its cap).

A frozen copy of the table as it was when this migration was written.
"""

import datetime

import peewee as pw

# The most conversations a tree of conversations nests (as oar.team.access walks it).
MAX_TREE_DEPTH = 64
TEXT_COLUMNS = (("team_message", "content"), ("work_item", "title"), ("work_item", "description"),
                ("work_item", "derived_reason"), ("team_artifact", "content"), ("team_review", "comments"))


def root_of(db, session_id):
    current = session_id
    seen = set()
    for _ in range(MAX_TREE_DEPTH):
        row = db.execute_sql(f'SELECT "created_by_session" FROM "session" WHERE "id" = {db.param}', (current,)).fetchone()
        parent = row[0] if row else None
        if not parent or parent in seen:
            break
        seen.add(current)
        current = parent
    return current


def up(migrator, db):
    class TeamRun(pw.Model):
        id = pw.CharField(primary_key=True, max_length=40)

        class Meta:
            database = db
            table_name = "team_run"

    class TeamAgent(pw.Model):
        id = pw.AutoField()
        run = pw.ForeignKeyField(TeamRun, on_delete="CASCADE")
        agent_id = pw.CharField(max_length=64)
        session_id = pw.CharField(max_length=32)
        bound_at = pw.DateTimeField(default=datetime.datetime.utcnow)

        class Meta:
            database = db
            table_name = "team_agent"
            indexes = ((("run", "agent_id"), True),)

    db.create_tables([TeamAgent])
    migrator.migrate(
        migrator.add_column("team_run", "team_root", pw.CharField(null=True, max_length=32)),
        migrator.add_column("team_run", "text_chars", pw.BigIntegerField(default=0)),
        migrator.add_column("team_memory", "team_root", pw.CharField(null=True, max_length=32)),
        migrator.add_index("team_run", ("team_root",), False),
        migrator.add_index("team_memory", ("team_root",), False),
    )
    # A run belongs to the team of the conversation that started it; memory written before stays
    # nobody's (every conversation reads it; the first team that writes a file keeps it).
    for run_id, started_in in db.execute_sql('SELECT "id", "started_in_session" FROM "team_run"').fetchall():
        if started_in:
            db.execute_sql(f'UPDATE "team_run" SET "team_root" = {db.param} WHERE "id" = {db.param}',
                           (root_of(db, started_in), run_id))
    stored = " + ".join(
        f'COALESCE((SELECT SUM(LENGTH("{column}")) FROM "{table}" WHERE "{table}"."run_id" = "team_run"."id"), 0)'
        for table, column in TEXT_COLUMNS
    )
    db.execute_sql(f'UPDATE "team_run" SET "text_chars" = {stored} + COALESCE(LENGTH("summary"), 0) '
                   '+ COALESCE(LENGTH("orchestrator_state"), 0)')


def down(migrator, db):
    migrator.migrate(
        migrator.drop_index("team_memory", "team_memory_team_root"),
        migrator.drop_index("team_run", "team_run_team_root"),
        migrator.drop_column("team_memory", "team_root"),
        migrator.drop_column("team_run", "text_chars"),
        migrator.drop_column("team_run", "team_root"),
    )
    db.execute_sql('DROP TABLE IF EXISTS "team_agent"')
