"""Automated messages: how the relay itself writes into a conversation.

Events, schedules and question answers all arrive this way: the message is queued as the
conversation's next prompt (an idle session starts a turn with it, a busy one runs it
after the current turn). It is never the user's message: its provenance says what wrote
it, so it does not reset loop protection and unlocks nothing.
"""

from __future__ import annotations

from oar import turns
from oar.db import write_transaction
from oar.errors import not_found
from oar.models import Message, Session
from oar.runtime import Runtime

# Message role and provenance kind of each kind of automated message.
ROLES = {"event": "event", "schedule": "schedule", "system": "system"}


def post(runtime: Runtime, session_id: str, text: str, *, kind: str, hops: int = 0) -> Message:
    """Queue `text` into the session as an automated `kind` message and start its turn."""
    if kind not in ROLES:
        raise ValueError(f"unknown automated message kind {kind}")
    with write_transaction():
        session = Session.get_or_none((Session.id == session_id) & (Session.deleted == False))  # noqa: E712
        if session is None or session.archived:
            raise not_found(f"Session {session_id[:8]} is not open for automated messages. Nothing was sent.")
        message = turns.insert_prompt(
            session, text, turns.Provenance(kind=kind if kind != "system" else "event", hops=hops), role=ROLES[kind]
        )
    turns.start_turns(runtime, session_id)
    return message
