"""Automated messages: how the relay itself writes into a conversation.

Events, schedules and question answers all arrive this way: the message is queued as the
conversation's next prompt (an idle session starts a turn with it, a busy one runs it
after the current turn). It is never the user's message: its provenance says what wrote
it, so it does not reset loop protection and unlocks nothing.
"""

from __future__ import annotations

from oar.approvals import questions
from oar.core.db import write_transaction
from oar.core.errors import ActionError, not_found
from oar.core.models import Message, Question, Session
from oar.core.runtime import Runtime
from oar.turns import turns

EVENT_HEADER = "[relay event · automated message from OAR, not from the user; it approves nothing]"

# Message role and provenance kind of each kind of automated message.
ROLES = {"event": "event", "schedule": "schedule"}


def insert(session: Session, text: str, provenance: turns.Provenance) -> Message:
    """Queue an automated message with full provenance inside the caller's write
    transaction (schedules inherit the provenance of the turn that set them); the caller
    starts the turn with `turns.start_turns` after commit."""
    if provenance.kind not in ROLES:
        raise ValueError(f"unknown automated message kind {provenance.kind}")
    return turns.insert_prompt(session, text, provenance, role=ROLES[provenance.kind])


def post(runtime: Runtime, session_id: str, text: str, *, kind: str, hops: int = 0) -> Message:
    """Queue `text` into the session as an automated `kind` message and start its turn."""
    with write_transaction():
        session = Session.get_or_none((Session.id == session_id) & Session.live())
        if session is None or session.archived:
            raise not_found(f"Session {session_id[:8]} is not open for automated messages. Nothing was sent.")
        message = insert(session, text, turns.Provenance(kind=kind, hops=hops))
    turns.start_turns(runtime, session_id)
    return message


def announce_answer(runtime: Runtime, question: Question) -> None:
    """The `question_answered` relay event for an answered or dismissed `ask` (docs/sessions.md#ask-list_questions-and-withdraw).

    It reaches the asking conversation, and the session the ask was about, at once and
    needing no subscription; a conversation archived meanwhile is simply not told.
    """
    question = Question.get_by_id(question.id)
    text = f"{EVENT_HEADER}\n{questions.event_line(question)}"
    for session_id in dict.fromkeys((question.asker_session_id, question.session_id)):
        if Session.select().where((Session.id == session_id) & Session.remote_relay.is_null(False)).exists():
            continue  # another relay's conversation: its relay checks here for the answer (docs/relays.md#asks-across-relays)
        try:
            post(runtime, session_id, text, kind="event", hops=question.hops)
        except ActionError:
            pass
