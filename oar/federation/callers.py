"""Other relays' agents calling this relay (the receiving side, docs/relays.md#on-the-receiving-relay).

A calling conversation on another relay gets a stand-in session here, made on its first call and
kept: a session row marked with the calling relay's name (`remote_relay`) that runs no turns and
that no list shows or agent can name. It is what this relay's rules already count by: the
sessions it started (four at work, who may change what), its cards and remembered Allows, its
loop count. Its title, model and mode follow what the caller says on each call.
"""

from __future__ import annotations

from oar.core import ids
from oar.core.db import write_transaction
from oar.core.models import Session
from oar.core.timeutil import utcnow
from oar.federation.client import Origin
from oar.federation.models import PairingToken, RemoteCaller

# The provider name a stand-in holds: it never runs a turn.
STAND_IN_PROVIDER = "remote"


def stand_in(token: PairingToken, origin: Origin) -> Session:
    """The stand-in of the calling conversation, made on its first call."""
    with write_transaction():
        known = RemoteCaller.get_or_none(
            (RemoteCaller.pairing_token == token.id) & (RemoteCaller.remote_session == origin.session)
        )
        if known is None:
            now = utcnow()
            session = Session.create(
                id=ids.session_id(), title=origin.session_title or origin.session[:8], provider=STAND_IN_PROVIDER,
                model=origin.model, mode=origin.mode, created_at=now, last_activity_at=now,
                remote_relay=origin.relay,
            )
            RemoteCaller.create(pairing_token=token.id, remote_session=origin.session, session=session.id)
            return session
        Session.update(
            title=origin.session_title or origin.session[:8], model=origin.model, mode=origin.mode,
            remote_relay=origin.relay,
        ).where(Session.id == known.session_id).execute()
    return Session.get_by_id(known.session_id)
