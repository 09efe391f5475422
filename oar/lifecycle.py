"""Archiving and deleting sessions (docs/sessions.md#answer_question-stop-and-archive), shared by agents' actions and the owner API."""

from __future__ import annotations

from oar.approvals import questions
from oar.background import tasks
from oar.core.db import write_transaction
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.statuses import ScheduleEndReason
from oar.core.timeutil import utcnow
from oar.schedules import schedules
from oar.sessions import groups
from oar.turns import turns
from oar.watching import lifetime


def archive(runtime: Runtime, target: Session) -> None:
    """Stop the running turn, cancel queued prompts; the session stays in its group."""
    _end_work(runtime, target, archived=True, reason="the session was archived.")


def delete(runtime: Runtime, target: Session) -> None:
    """Like archiving, and the session disappears from every list and lookup."""
    _end_work(runtime, target, archived=True, deleted=True, reason="the session was deleted.")
    with write_transaction():
        groups.leave(Session.get_by_id(target.id))


def _end_work(runtime: Runtime, target: Session, reason: str, **flags: bool) -> None:
    with write_transaction():
        Session.update(last_activity_at=utcnow(), **flags).where(Session.id == target.id).execute()
        target = Session.get_by_id(target.id)
        cancelled = turns.cancel_queued(target, reason)
        stopping = turns.request_stop(target) == "stop-queued"
        questions.end_for_session(target.id, utcnow())
        reason_ended = ScheduleEndReason.DELETED if flags.get("deleted") else ScheduleEndReason.ARCHIVED
        schedules.end_for_session(target.id, reason_ended, utcnow())
        lifetime.end_for_session(target.id, utcnow())
    tasks.stop_all(runtime, target.id)  # background tasks end with the session (docs/sessions.md#answer_question-stop-and-archive)
    for message_id in cancelled:
        runtime.signal_turn(message_id)
    if stopping and target.active_turn:
        turns.signal_stop(runtime, target.active_turn)
