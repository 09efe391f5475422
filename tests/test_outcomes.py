"""Outcomes that end together are written in one transaction, each in a savepoint of its own
(oar/engine/outcomes.py): one that fails is undone alone and raised in its own turn's thread.

A real SQLite file in a temporary folder, migrated as a relay's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import peewee
import pytest

from oar.core import ids
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message, Session, TokenUsage
from oar.core.statuses import TurnStatus
from oar.core.timeutil import utcnow
from oar.engine import outcomes
from oar.owner.bootstrap import migrate
from oar.providers.base import Usage

pytestmark = pytest.mark.usefixtures("own_database_binding")


def _running_turn(title: str) -> Message:
    session = Session.create(id=ids.session_id(), title=title, provider="echo", created_at=utcnow(), last_activity_at=utcnow())
    turn = Message.create(
        id=ids.message_id(), session=session, role="user", text=f"prompt of {title}", created_at=utcnow(),
        status=TurnStatus.RUNNING, started_at=utcnow(), heartbeat_at=utcnow(),
    )
    Session.update(active_turn=turn.id).where(Session.id == session.id).execute()
    return turn


def _message(message_id: str) -> Message:
    return Message.get(Message.id == message_id)


def _outcome(turn: Message, used: list[tuple[Any, Usage]]) -> outcomes._Outcome:
    return outcomes._Outcome(turn, TurnStatus.DONE, f"reply to {turn.text}", None, None, used)


def test_an_outcome_that_fails_in_a_group_is_undone_alone_and_kept_for_its_own_thread(tmp_path: Path) -> None:
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        first, failing, last = (_running_turn(title) for title in ("first", "failing", "last"))
        # Its first usage row is written, then its second breaks a constraint (no provider name).
        broken = _outcome(failing, [("lab", Usage(1, 2)), (None, Usage(3, 4))])
        group = [_outcome(first, [("lab", Usage(5, 6))]), broken, _outcome(last, [])]

        outcomes._write_group(group)

        assert all(outcome.written for outcome in group)
        assert isinstance(broken.failure, peewee.IntegrityError) and not broken.settled
        assert _message(failing.id).status == TurnStatus.RUNNING
        assert Session.get_by_id(failing.session_id).active_turn == failing.id
        assert not TokenUsage.select().where(TokenUsage.turn_id == failing.id).exists(), "its first usage row was undone"
        for written, turn in ((group[0], first), (group[2], last)):
            assert written.failure is None and written.settled
            prompt = _message(turn.id)
            assert prompt.status == TurnStatus.DONE and prompt.reply_id
            assert _message(prompt.reply_id).text == f"reply to {turn.text}"
            assert Session.get_by_id(turn.session_id).active_turn is None
        assert [row.output_tokens for row in TokenUsage.select()] == [6]
