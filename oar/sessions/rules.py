"""Rules for agents acting on sessions of this relay (docs/rules.md). Refusals leave out the
sentence saying what was not done: the dispatcher adds the action's."""

from __future__ import annotations

from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.models import Message, Session
from oar.core.statuses import OPEN_TURN


def check_may_create(caller: Session) -> None:
    """One level: a session an agent created cannot create sessions unless the owner allows."""
    if caller.created_by_session and not caller.may_create_sessions:
        raise ActionError("REMOTE_RELAY_NESTED_SESSION", "A session that an agent created cannot create sessions.")


def busy_sessions_started_by(caller: Session) -> list[Session]:
    busy = Message.select(Message.session).where(Message.status.in_(OPEN_TURN))
    return list(
        Session.select(Session.id, Session.title)
        .where(
            (Session.created_by_session == caller.id)
            & Session.live(archived=False)
            & Session.id.in_(busy)
        )
        .order_by(Session.created_at)
    )


def check_active_limit(caller: Session) -> None:
    """At most 4 sessions started by this conversation at work (a 5th would be refused)."""
    working = busy_sessions_started_by(caller)
    if len(working) >= defaults.MAX_ACTIVE_SESSIONS:
        raise ActionError(
            "REMOTE_RELAY_SESSION_LIMIT",
            f"{len(working)} sessions you started are still working; wait for one to finish.",
            sessions=[{"id": s.id, "title": s.title} for s in working],
        )

