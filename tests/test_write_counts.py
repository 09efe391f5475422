"""The bad-input tables' fingerprint of the database (tests/support/write_counts.py) sees every write:
a refused case is only proven to change nothing if a write would have moved it."""

from __future__ import annotations

from datetime import timedelta

from oar.core.db import database
from oar.core.models import Message, Session, Task
from oar.core.timeutil import utcnow
from tests.support import write_counts
from tests.support.all_models import ALL_MODELS
from tests.support.bad_input.in_process import WorldKeeper


def test_it_has_triggers_on_every_table_of_the_relay(kept_worlds: WorldKeeper) -> None:
    with database.connection_context():
        if write_counts._is_postgres():
            cursor = database.execute_sql(
                "SELECT DISTINCT event_object_table FROM information_schema.triggers WHERE trigger_name LIKE %s",
                (f"{write_counts.LOG}%",),
            )
        else:
            cursor = database.execute_sql(
                "SELECT DISTINCT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?",
                (f"{write_counts.LOG}%",),
            )
        covered = {name for (name,) in cursor.fetchall()}
    assert covered == {model._meta.table_name for model in ALL_MODELS}


def test_it_moves_on_a_deliberate_insert_update_and_delete(kept_worlds: WorldKeeper) -> None:
    world = kept_worlds.get("tables")
    child = world.fill("<child>")
    with database.connection_context():
        before = write_counts.fingerprint()
        Session.update(title="changed behind the tables' back").where(Session.id == child).execute()
        updated = write_counts.fingerprint()
        assert updated != before
        assert updated[Session._meta.table_name] == before.get(Session._meta.table_name, 0) + 1

        task = Task.get_by_id(world.fill("<task>"))
        task_row = {**task.__data__, "id": "t_written_by_the_test"}
        Task.insert(task_row).execute()
        inserted = write_counts.fingerprint()
        assert inserted != updated

        Task.delete().where(Task.id == "t_written_by_the_test").execute()
        assert write_counts.fingerprint() != inserted


def test_it_moves_on_a_write_another_connection_commits(kept_worlds: WorldKeeper) -> None:
    """A write of the relay's web (another thread, its own connection) is counted as this process's."""
    world = kept_worlds.get("tables")
    before = write_counts.fingerprint()
    world.relay.owner.patch(f"/api/v1/owner/sessions/{world.fill('<child>')}", {"title": "renamed over HTTP"})
    assert write_counts.fingerprint() != before


def test_it_stays_for_a_heartbeat_or_an_update_that_changes_nothing(kept_worlds: WorldKeeper) -> None:
    """A worker moving a waiting turn's heartbeat on is not a change a call made."""
    world = kept_worlds.get("tables")
    with database.connection_context():
        before = write_counts.fingerprint()
        moved = Message.update(heartbeat_at=utcnow() + timedelta(seconds=5)).where(
            Message.session == world.fill("<child>")
        ).execute()
        assert moved > 0
        Session.update(title=Session.title).where(Session.id == world.fill("<child>")).execute()
        assert write_counts.fingerprint() == before
