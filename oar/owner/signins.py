"""Sign-ins of the owner's page, kept on the server (docs/owner-api.md#signing-in).

A browser that signs in gets a random sign-in id in its (signed) cookie; the `sign_in` table
holds the id's hash, when it began and when it was last seen. The page opens only while that
row exists and its last visit is under 14 days old, so signing out (one row) and "sign out
everywhere" (every row) end a sign-in for good, even for a cookie copied before.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from oar.core import defaults, ids, settings
from oar.core.db import write_transaction
from oar.core.models import Setting, SignIn
from oar.core.timeutil import utcnow

LIFETIME = timedelta(seconds=defaults.SIGN_IN_LIFETIME_SECONDS)
SEEN_EVERY = timedelta(seconds=defaults.SIGN_IN_SEEN_EVERY_SECONDS)


def expired(last_seen_at: datetime, now: datetime) -> bool:
    """Whether a sign-in last seen at `last_seen_at` has ended by `now`."""
    return now - last_seen_at >= LIFETIME


def begin(now: datetime | None = None) -> str:
    """A new sign-in; its id (for the cookie only). Ended sign-ins are cleared out on the way."""
    now = now or utcnow()
    sign_in_id = secrets.token_urlsafe(defaults.TOKEN_BYTES)
    with write_transaction():
        SignIn.delete().where(SignIn.last_seen_at <= now - LIFETIME).execute()
        SignIn.create(id_hash=ids.hash_token(sign_in_id), created_at=now, last_seen_at=now)
    return sign_in_id


def is_current(sign_in_id: str, now: datetime | None = None) -> bool:
    """Whether the sign-in is still on (and, at most once a minute, that it was seen now)."""
    now = now or utcnow()
    id_hash = ids.hash_token(sign_in_id)
    row = SignIn.get_or_none(SignIn.id_hash == id_hash)
    if row is None:
        return False
    if expired(row.last_seen_at, now):
        with write_transaction():
            SignIn.delete().where(SignIn.id_hash == id_hash).execute()
        return False
    if now - row.last_seen_at >= SEEN_EVERY:
        with write_transaction():
            SignIn.update(last_seen_at=now).where(SignIn.id_hash == id_hash).execute()
    return True


def end(sign_in_id: str) -> bool:
    """Sign one browser out; whether its sign-in was on."""
    with write_transaction():
        return SignIn.delete().where(SignIn.id_hash == ids.hash_token(sign_in_id)).execute() > 0


def end_all() -> int:
    """Sign every browser out ("sign out everywhere"); how many sign-ins there were."""
    with write_transaction():
        return SignIn.delete().execute()


def count(now: datetime | None = None) -> int:
    """Browsers signed in now."""
    now = now or utcnow()
    return SignIn.select().where(SignIn.last_seen_at > now - LIFETIME).count()


def stored_secret(name: str) -> str:
    """The random secret kept in the setting `name`, generated and stored on first use.

    Two processes starting at once both try to insert; the first insert wins and both read it back."""
    stored = settings.get_value(name)
    if not stored:
        with write_transaction():
            Setting.insert(key=name, value=secrets.token_urlsafe(48)).on_conflict_ignore().execute()
        stored = settings.get_value(name)
    return stored
