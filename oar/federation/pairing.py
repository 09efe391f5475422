"""Pairing tokens this relay gives out (docs/relays.md#pairing): random, stored as their hash,
shown once, revocable. A relay holding one may call this relay's peer API."""

from __future__ import annotations

from typing import Any

from oar.core import ids
from oar.core.db import write_transaction
from oar.core.errors import not_found
from oar.core.timeutil import iso, utcnow
from oar.federation.models import PairingToken


def create(label: str | None = None) -> tuple[PairingToken, str]:
    """A new pairing token: its row and the token itself, which is shown this once."""
    token = ids.new_token("p")
    with write_transaction():
        row = PairingToken.create(id=ids.prefixed_id("pt"), token_hash=ids.hash_token(token), label=label,
                                  created_at=utcnow())
    return row, token


def listed() -> list[dict[str, Any]]:
    return [view(row) for row in PairingToken.select().order_by(PairingToken.created_at.desc())]


def view(row: PairingToken) -> dict[str, Any]:
    """A token as lists show it: never the token, only its id."""
    return {
        "id": row.id,
        "label": row.label,
        "createdAt": iso(row.created_at),
        "revoked": row.revoked_at is not None,
        "revokedAt": iso(row.revoked_at) if row.revoked_at else None,
        "lastUsedAt": iso(row.last_used_at) if row.last_used_at else None,
        "lastUsedBy": row.last_used_by,
    }


def revoke(token_id: str) -> PairingToken:
    """Revoke a pairing token: the relay holding it is refused from its next call on."""
    with write_transaction():
        row = PairingToken.get_or_none(PairingToken.id == token_id)
        if row is None:
            raise not_found(f'No pairing token "{token_id[:40]}". Nothing was revoked.')
        if row.revoked_at is None:
            PairingToken.update(revoked_at=utcnow()).where(PairingToken.id == row.id).execute()
    return PairingToken.get_by_id(row.id)


def verify(token: str) -> PairingToken | None:
    """The live pairing token `token` is, or None (unknown or revoked)."""
    row = PairingToken.get_or_none(PairingToken.token_hash == ids.hash_token(token))
    if row is None or row.revoked_at is not None:
        return None
    return row


def note_use(row: PairingToken, relay_name: str) -> None:
    with write_transaction():
        PairingToken.update(last_used_at=utcnow(), last_used_by=relay_name[:200]).where(PairingToken.id == row.id).execute()
