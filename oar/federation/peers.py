"""The relays this one is paired with (the calling side, docs/relays.md): adding one with its URL
and pairing token, the "Agents may" level, removing it, finding it by name or host, the link to
it, and which conversations unlocked it.

The other relay's pairing token is kept as given (this relay must send it) and never shown back
or logged; views say only that one is set.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from peewee import fn

from oar.core import ids
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.timeutil import iso, utcnow
from oar.federation.client import PeerLink
from oar.federation.mentions import Named, mentioned
from oar.federation.models import Peer, PeerUnlock
from oar.federation.urls import check_peer_url, host_of

LEVELS = ("full", "prompt", "read", "off")
NOTHING = "Nothing was paired."
CHANGED_NOTHING = "Nothing was changed."
MAX_NAME_CHARS = 100
MAX_TOKEN_CHARS = 500


def link_to(runtime: Runtime, peer: Peer) -> PeerLink:
    return PeerLink(
        peer.name, peer.url, peer.token,
        connect_timeout=runtime.time("PEER_CONNECT_TIMEOUT_SECONDS"), read_margin=runtime.time("PEER_READ_MARGIN_SECONDS"),
    )


def check_name(name: str, relay_name: str, *, keep: Peer | None = None) -> str:
    """The name checked; refused without saying what was not done (the owner operation adds it)."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME_CHARS or any(ch.isspace() or ch in "@/\\\"'" for ch in name):
        raise invalid(f"A paired relay's name is 1–{MAX_NAME_CHARS} characters without spaces, @, slashes or quotes.")
    if name.casefold() in ("this", relay_name.casefold()):
        raise invalid(f'"{name}" names this relay; give the paired relay another name.')
    taken = Peer.get_or_none(fn.LOWER(Peer.name) == name.lower())
    if taken is not None and (keep is None or taken.id != keep.id):
        raise invalid(f'A paired relay is already named "{taken.name}".')
    return name


def add(runtime: Runtime, url: str, token: str, name: str | None = None) -> Peer:
    """Pair with the relay at `url` using its pairing `token`: checked against it before anything
    is stored (it must answer and take the token)."""
    base = check_peer_url(url)
    token = (token or "").strip()
    if not token or len(token) > MAX_TOKEN_CHARS or any(ch.isspace() for ch in token):
        raise invalid(f"Give the pairing token the other relay's owner created (oar pair on that relay). {NOTHING}")
    if Peer.get_or_none(Peer.url == base) is not None:
        raise invalid(f"This relay is already paired with {base}. {NOTHING}")
    probe = PeerLink(name or host_of(base), base, token, connect_timeout=runtime.time("PEER_CONNECT_TIMEOUT_SECONDS"),
                     read_margin=runtime.time("PEER_READ_MARGIN_SECONDS"))
    try:
        hello = probe.hello()
    except ActionError as error:
        raise ActionError(error.code, f"{error.message} {NOTHING}").answered_as(error.status) from None
    remote_name = str(hello.get("name") or "")[:200] or host_of(base)
    version = str(hello.get("version") or "")[:40] or None
    features = said_features(hello)
    chosen = check_name(name if name is not None else remote_name, runtime.relay_name())
    with write_transaction():
        return Peer.create(
            id=ids.prefixed_id("peer"), name=chosen, url=base, token=token, level="full", remote_name=remote_name,
            version=version, features=features, created_at=utcnow(), last_answered_at=utcnow(), last_tried_at=utcnow(),
        )


def find(reference: str) -> Peer:
    """A paired relay by its name, stable id or host (the owner API's path); NOT_FOUND without
    saying what was not done (the owner operation adds it)."""
    wanted = (reference or "").strip()
    matches = matching(wanted)
    if len(matches) != 1:
        raise not_found(f'No paired relay is named "{wanted[:100]}".')
    return matches[0]


def matching(reference: str) -> list[Peer]:
    """Paired relays a reference names: the name (any case) first, else the id, else the host."""
    wanted = reference.strip().casefold()
    peers = list(Peer.select().order_by(Peer.created_at))
    by_name = [peer for peer in peers if peer.name.casefold() == wanted or peer.id == reference.strip()]
    if by_name:
        return by_name
    return [peer for peer in peers if host_of(peer.url) == wanted]


def change(runtime: Runtime, peer: Peer, changes: dict[str, Any]) -> Peer:
    """The owner changes a pairing: `permission` (the "Agents may" level), `name`, `token`."""
    updates: dict[str, Any] = {}
    if "permission" in changes:
        updates["level"] = changes["permission"]
    if "name" in changes:
        updates["name"] = check_name(changes["name"], runtime.relay_name(), keep=peer)
    if "token" in changes:
        token = changes["token"].strip()
        if not token or any(ch.isspace() for ch in token):
            raise invalid(f"The pairing token is empty or holds spaces. {CHANGED_NOTHING}")
        updates["token"] = token
    if updates:
        with write_transaction():
            Peer.update(**updates).where(Peer.id == peer.id).execute()
    return Peer.get_by_id(peer.id)


def remove(runtime: Runtime, peer: Peer) -> bool:
    """Unpair: the relay, every unlock of it and the asks and subscriptions kept there are forgotten
    here; the relay is asked to end them there too (`endReason: unpaired`). Returns whether it
    answered (a relay that does not is unpaired all the same; what it keeps ends there by its limits)."""
    try:
        link_to(runtime, peer).request("POST", "/unpair", read_timeout=runtime.time("PEER_CONNECT_TIMEOUT_SECONDS"))
        told = True
    except ActionError:
        told = False
    with write_transaction():
        Peer.delete().where(Peer.id == peer.id).execute()
    return told


def view(peer: Peer, now: datetime | None = None) -> dict[str, Any]:
    """A pairing as the owner sees it: never the token."""
    return {
        "id": peer.id,
        "name": peer.name,
        "url": peer.url,
        "permission": peer.level,
        "remoteName": peer.remote_name,
        "version": peer.version,
        "online": peer.last_error is None and peer.last_answered_at is not None,
        "lastAnsweredAt": iso(peer.last_answered_at),
        "lastError": peer.last_error,
        "tokenSet": bool(peer.token),
        "createdAt": iso(peer.created_at),
    }


def listed() -> list[dict[str, Any]]:
    return [view(peer) for peer in Peer.select().order_by(Peer.created_at)]


def said_features(hello: dict[str, Any]) -> list[str] | None:
    """The features a relay's `/hello` lists (None when it lists none: an older relay)."""
    features = hello.get("features")
    if not isinstance(features, list):
        return None
    return [str(feature)[:40] for feature in features if isinstance(feature, str)][:50]


def lacks(peer: Peer, feature: str) -> bool:
    """Whether the paired relay said what it offers, without `feature`."""
    return peer.features is not None and feature not in peer.features


def note_answer(peer: Peer, version: str | None = None, hello: dict[str, Any] | None = None) -> None:
    """The peer answered (any answer of its own, refusals too): it is online."""
    now = utcnow()
    updates: dict[str, Any] = {"last_answered_at": now, "last_tried_at": now, "last_error": None}
    if version:
        updates["version"] = version[:40]
    if hello is not None:
        updates["features"] = said_features(hello)
    with write_transaction():
        Peer.update(**updates).where(Peer.id == peer.id).execute()


def note_failure(peer: Peer, code: str) -> None:
    with write_transaction():
        Peer.update(last_tried_at=utcnow(), last_error=code[:64]).where(Peer.id == peer.id).execute()


# Locks ------------------------------------------------------------------------------------


def unlocked_by(peer_id: str, session_id: str) -> str | None:
    """"owner" or "agent" when the conversation unlocked the peer, else None (locked)."""
    row = PeerUnlock.get_or_none((PeerUnlock.peer == peer_id) & (PeerUnlock.session == session_id))
    return row.by if row else None


def unlocks_of(session_id: str) -> dict[str, str]:
    return {row.peer_id: row.by for row in PeerUnlock.select().where(PeerUnlock.session == session_id)}


def note_owner_message(session_id: str, text: str) -> list[str]:
    """The owner wrote `text` in the conversation: the paired relays it mentions are unlocked there
    by the owner (inside the caller's write transaction). Returns their names."""
    peers = {peer.id: peer for peer in Peer.select()}
    keys = mentioned(text, [Named(peer.id, peer.name, host_of(peer.url)) for peer in peers.values()])
    for key in keys:
        existing = PeerUnlock.get_or_none((PeerUnlock.peer == key) & (PeerUnlock.session == session_id))
        if existing is None:
            PeerUnlock.create(peer=key, session=session_id, by="owner")
        elif existing.by != "owner":  # the owner's mention counts for more (the hop limit)
            PeerUnlock.update(by="owner").where(PeerUnlock.id == existing.id).execute()
    return sorted(peers[key].name for key in keys)


def note_remote_prompt(session: Session, peer: Peer) -> None:
    """A prompt from an agent on `peer` arrived in `session` (that relay proved it holds the pairing
    token the prompt came with, `provenance.relay_to_unlock`): it is unlocked there by an agent
    (docs/relays.md#locks)."""
    PeerUnlock.insert(peer=peer.id, session=session.id, by="agent").on_conflict_ignore().execute()
