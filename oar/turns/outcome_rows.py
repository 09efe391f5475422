"""The rows a turn's outcome writes, their SQL built once per process (oar/core/prepared.py):
the prompt settled, the reply inserted, the session freed, and the look for a prompt queued
behind it. The worker's outcomes (oar.engine.outcomes) and the replies of agents outside the
relay (oar.turns.outside) write them alike."""

from __future__ import annotations

from typing import Any

import peewee

from oar.core.models import Message, Session
from oar.core.prepared import Prepared
from oar.core.statuses import LIVE_TURN, TurnStatus


# Run as every turn ends: their SQL built once (oar/core/prepared.py).
def _settle(with_activities: bool) -> Prepared:
    """The prompt's outcome; `with_activities`: and its last activity lines (JSON, given converted)."""

    def build(turn_id: Any, status: Any, error: Any, text: Any, reply_id: Any, now: Any, *activities: Any) -> Any:
        changes = {"activities": peewee.Value(activities[0], converter=False)} if with_activities else {}
        return Message.update(
            status=status, error=error, partial_text=text, reply_id=reply_id, completed_at=now, **changes
        ).where((Message.id == turn_id) & Message.status.in_(LIVE_TURN))

    return Prepared(build)


SETTLE, SETTLE_WITH_ACTIVITIES = _settle(False), _settle(True)
# Every column given: no default is frozen into the statement.
INSERT_REPLY = Prepared(
    lambda reply_id, session_id, text, now, model: Message.insert(
        id=reply_id, session=session_id, role="assistant", text=text, created_at=now, from_kind="user",
        from_relay=None, from_session=None, from_session_title=None, from_model=None, hops=0, acts_for_user=False,
        model=model, stop_requested=False, output_truncated=False,
    )
)
FREE_SESSION = Prepared(
    lambda now, added, session_id, turn_id: Session.update(
        active_turn=None, last_activity_at=now, message_count=Session.message_count + added
    ).where((Session.id == session_id) & (Session.active_turn == turn_id))
)
QUEUED_PROMPT = Prepared(
    lambda session_id: Message.select(Message.id)
    .where((Message.session == session_id) & (Message.status == TurnStatus.QUEUED))
    .limit(1)
    .tuples()
)
