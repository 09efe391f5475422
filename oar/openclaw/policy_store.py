"""The owner's per-session send policy (docs/openclaw.md#send-policy): allow, deny, or inherit
the owner's rules (no row)."""

from __future__ import annotations

from oar.core.db import write_transaction
from oar.core.errors import not_found, refusals_ending
from oar.core.models import Session
from oar.openclaw.models import SessionSendPolicy
from oar.sessions import sessions

CHOICES = ("allow", "deny", "inherit")


def set_policy(session_id: str, choice: str, relay_name: str) -> tuple[Session, str | None]:
    """Store `choice` for the session; returns it and what is stored now (None: inherit)."""
    with refusals_ending("Nothing was changed."):
        session = sessions.resolve(session_id, relay_name)
    if session.deleted:
        raise not_found(f'Relay "{relay_name}" has no session "{session_id}". Nothing was changed.')
    with write_transaction():
        SessionSendPolicy.delete().where(SessionSendPolicy.session_id == session.id).execute()
        if choice != "inherit":
            SessionSendPolicy.create(session_id=session.id, send_policy=choice)
    return session, None if choice == "inherit" else choice
