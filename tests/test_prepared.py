"""Prepared queries (oar/core/prepared.py) give the rows peewee gives for the same query; on
SQLite they come back as one row of JSON, in the query's order, with every value as stored.

A real SQLite file in a temporary folder, migrated as a relay's is.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import peewee
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oar.actions import sessions as session_actions
from oar.core import events, ids
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Event, Message, Schedule, Session
from oar.core.prepared import Prepared, as_stored
from oar.core.settings import version_column
from oar.core.statuses import TurnStatus
from oar.core.timeutil import iso, utcnow
from oar.owner.bootstrap import migrate
from oar.turns import outcome_rows

pytestmark = pytest.mark.usefixtures("own_database_binding")

# Text that JSON must escape, or that a careless join would break.
AWKWARD = ['say "hi"', "back\\slash", "line\nbreak\ttab", "ümlaut — 日本語 🙂", "\x01\x1f control", "],[", "'quoted'", ""]


def _seed() -> list[Session]:
    now = utcnow()
    made = []
    seqs = iter(range(1, 1000))  # a message's seq is unique across sessions
    for number, title in enumerate(AWKWARD):
        session = Session.create(
            id=ids.session_id(), title=title, provider="echo", created_at=now, last_activity_at=now - timedelta(seconds=number),
            archived=number % 3 == 0, may_create_sessions=number % 2 == 0, message_count=2**62 + number,
        )
        for seq, text in enumerate(AWKWARD):
            Message.create(
                id=ids.message_id(), session=session, seq=next(seqs), role="user" if seq % 2 else "assistant", text=text,
                created_at=now + timedelta(microseconds=seq), status=TurnStatus.DONE if seq % 2 else None,
                model=None if seq % 3 else "model ✓",
            )
        made.append(session)
    return made


def _as_values(rows: list[Any]) -> list[Any]:
    return [row.__data__ if isinstance(row, peewee.Model) else row for row in rows]


def _compare(build: Any, *values: Any) -> list[Any]:
    """`Prepared(build).rows(*values)` against peewee running `build(*values)`; both rows."""
    prepared = Prepared(build)
    got = prepared.rows(*values)
    query = build(*values)
    expected = list(query)
    assert _as_values(got) == _as_values(expected)
    for row, reference in zip(got, expected, strict=True):
        if isinstance(row, peewee.Model):
            extras = set(vars(reference)) - {"__data__", "_dirty", "__rel__"}
            assert {name: getattr(row, name) for name in extras} == {name: getattr(reference, name) for name in extras}
    return got


def test_rows_as_one_json_row_are_the_rows_peewee_gives(tmp_path: Path) -> None:
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        made = _seed()
        # Model instances with extras (a flag, a subquery of text), named tuples, tuples; ordered and limited.
        for session in made:
            newest = _compare(
                lambda session_id, limit: Message.select(*session_actions._SHOWN).where(Message.session == session_id)
                .order_by(Message.seq.desc()).limit(limit).namedtuples(),
                session.id, 100,
            )
            assert [row.seq for row in newest] == sorted((row.seq for row in newest), reverse=True)
            assert [row.text for row in newest] == AWKWARD[::-1]
        _compare(
            lambda title: Session.select(
                *Session._meta.sorted_fields, version_column(),
                peewee.fn.EXISTS(Message.select(Message.id).where((Message.session == Session.id) & (Message.seq > 5))).alias("late"),
            ).where(Session.title != title).order_by(Session.last_activity_at.desc()),
            "no such title",
        )
        _compare(lambda since: Session.select(Session.id, Session.archived).where(Session.last_activity_at > since).tuples(), utcnow() - timedelta(seconds=3))
        _compare(lambda ids: Session.select(Session.id).where(Session.id.in_(ids)).order_by(Session.id).tuples(), [s.id for s in made[:3]])
        assert _compare(lambda session_id: Session.select().where(Session.id == session_id), "no such session") == []

        one_row = Prepared(lambda session_id: Message.select(Message.id).where(Message.session == session_id).tuples())
        one_row.rows(made[0].id)
        assert next(iter(one_row._compiled.values())).one_row_sql is not None, "the JSON form was not used"


def test_times_read_as_stored_show_as_their_datetimes_do(tmp_path: Path) -> None:
    """`as_stored`: the text SQLite keeps, shown by `iso` with the same characters as the datetime
    peewee reads (with and without microseconds), in the JSON form and in named tuples."""
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        session = _seed()[0]
        whole = Message.get(Message.session == session.id)
        Message.update(created_at=whole.created_at.replace(microsecond=0)).where(Message.id == whole.id).execute()
        stored = Prepared(lambda session_id: Message.select(Message.id, as_stored(Message.created_at)).where(
            Message.session == session_id).order_by(Message.seq).namedtuples())
        rows = stored.rows(session.id)
        assert next(iter(stored._compiled.values())).one_row_sql is not None, "the JSON form was not used"
        expected = {message.id: message.created_at for message in Message.select().where(Message.session == session.id)}
        assert all(isinstance(row.created_at, str) for row in rows)
        assert [iso(row.created_at) for row in rows] == [iso(expected[row.id]) for row in rows]
        assert any(expected[row.id].microsecond == 0 for row in rows) and any(expected[row.id].microsecond for row in rows)


@given(st.datetimes())
def test_iso_of_a_stored_time_is_iso_of_the_time(moment: datetime) -> None:
    assert iso(str(moment)) == iso(moment)
    assert iso(moment.isoformat()) == iso(moment)  # another shape of text is parsed


def test_a_column_json_would_change_keeps_the_query_as_it_is(tmp_path: Path) -> None:
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        session = _seed()[0]
        now = utcnow()
        Schedule.create(
            id=ids.session_id(), target=session, set_by=session, title="t", text="x", anchor=now,
            every_seconds=0.1 + 0.2,  # 0.30000000000000004: 15 digits of JSON would read 0.3
        )
        floats = Prepared(lambda target: Schedule.select(Schedule.every_seconds).where(Schedule.target == target).tuples())
        assert floats.rows(session.id) == [(0.1 + 0.2,)]
        assert next(iter(floats._compiled.values())).one_row_sql is None
        counted = Prepared(lambda target: Session.select(Session.id, peewee.fn.COUNT(Session.id).alias("n")).where(Session.id == target))
        assert [(row.id, row.n) for row in counted.rows(session.id)] == [(session.id, 1)]
        assert next(iter(counted._compiled.values())).one_row_sql is None


def test_prepared_writes_leave_the_rows_peewee_writes_leave(tmp_path: Path) -> None:
    """The statements every turn's end runs (oar/turns/outcome_rows.py, oar/core/events.py)."""
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        session = _seed()[0]
        now = utcnow()
        written_by_peewee = Message.create(
            id=ids.message_id(), session=session.id, role="assistant", text=AWKWARD[2], created_at=now, from_kind="user", model="m ✓"
        )
        reply_id = ids.message_id()
        outcome_rows.INSERT_REPLY.insert(reply_id, session.id, AWKWARD[2], now, "m ✓")
        by_peewee, prepared = (Message.get(Message.id == id_).__data__ for id_ in (written_by_peewee.id, reply_id))
        assert prepared["seq"] == by_peewee["seq"] + 1
        assert {**prepared, "id": None, "seq": None} == {**by_peewee, "id": None, "seq": None}

        # An event's number is the one its row got.
        payload = {"turnId": reply_id, "excerpt": AWKWARD[3], "fromSession": None}
        event = events.record(session.id, "turn_end", payload, now)
        stored = Event.get_by_id(event.seq)
        assert (stored.session_id, stored.kind, stored.payload, stored.created_at) == (session.id, "turn_end", payload, now)

        # A running turn settled once, with its last activity lines (a JSON field).
        turn = Message.create(id=ids.message_id(), session=session.id, role="user", text="go", status=TurnStatus.RUNNING)
        settle = (turn.id, TurnStatus.DONE, None, "all done", reply_id, now, Message.activities.db_value(["read a", AWKWARD[0]]))
        assert outcome_rows.SETTLE_WITH_ACTIVITIES.execute(*settle) == 1
        assert outcome_rows.SETTLE_WITH_ACTIVITIES.execute(*settle) == 0, "a settled turn was settled again"
        settled = Message.get(Message.id == turn.id)
        assert (settled.status, settled.partial_text, settled.reply_id, settled.completed_at, settled.activities) == (
            TurnStatus.DONE, "all done", reply_id, now, ["read a", AWKWARD[0]]
        )
