"""The tables of paired relays (docs/relays.md): pairing tokens this relay gave out, the relays it
is paired with, which of them each conversation unlocked, and the stand-ins of other relays'
calling conversations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import peewee as pw

from oar.core.models import BaseModel, JSONField, Session
from oar.core.timeutil import utcnow

if TYPE_CHECKING:
    from oar.core.models import ObjectId


class PairingToken(BaseModel):
    """A token this relay gave out so that another relay may call it (the receiving side of a
    pairing). Stored as its SHA-256 hash; revoked tokens are kept so the list says when."""

    id = pw.CharField(primary_key=True, max_length=32)  # pt_…, shown in lists; never the token
    token_hash = pw.CharField(unique=True, max_length=64)
    label = pw.CharField(null=True, max_length=200)
    created_at = pw.DateTimeField(default=utcnow)
    revoked_at = pw.DateTimeField(null=True)
    last_used_at = pw.DateTimeField(null=True)
    # The relay name the last caller with this token gave.
    last_used_by = pw.CharField(null=True, max_length=200)

    class Meta:
        table_name = "pairing_token"


class Peer(BaseModel):
    """A relay this one acts on (the calling side of a pairing), by a stable id: renaming it keeps
    its rows. `token` is the other relay's pairing token, which this relay must send, so it is kept
    as given; like a provider's API key it is never shown back or logged."""

    id = pw.CharField(primary_key=True, max_length=32)  # peer_…
    name = pw.CharField(unique=True, max_length=200)
    url = pw.TextField()
    token = pw.TextField()
    # "Agents may": full | prompt | read | off.
    level = pw.CharField(default="full", max_length=8)
    # The other relay's own name and version, as it last said them.
    remote_name = pw.CharField(null=True, max_length=200)
    version = pw.CharField(null=True, max_length=40)
    # What its relay-to-relay API says it offers (`/hello`'s `features`); null: not said.
    features = JSONField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    last_answered_at = pw.DateTimeField(null=True)
    last_tried_at = pw.DateTimeField(null=True)
    # What went wrong the last time it was tried (a code), null when it answered.
    last_error = pw.CharField(null=True, max_length=64)
    # Events across relays: the last outbox row fetched from it (what comes after is asked for
    # next), and since when the link counts as lost (its `link_lost` line was written).
    events_cursor = pw.BigIntegerField(default=0)
    link_lost_at = pw.DateTimeField(null=True)


class PeerUnlock(BaseModel):
    """A paired relay opened in one conversation of this relay (docs/relays.md#locks): by the owner's
    mention or by a prompt from an agent there; it stays open for the rest of the conversation."""

    id = pw.AutoField()
    peer = pw.ForeignKeyField(Peer, backref="unlocks", on_delete="CASCADE")
    peer_id: ObjectId[str]
    session = pw.ForeignKeyField(Session, backref="peer_unlocks", on_delete="CASCADE")
    session_id: ObjectId[str]
    by = pw.CharField(max_length=8)  # owner | agent
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "peer_unlock"
        indexes = ((("session", "peer"), True),)


class RemoteCaller(BaseModel):
    """A conversation on another relay that calls this one, and its stand-in session here (which
    holds its cards, Allows, and the sessions it started). Known by the pairing token it calls with
    and its id on its own relay."""

    id = pw.AutoField()
    pairing_token = pw.ForeignKeyField(PairingToken, backref="callers", on_delete="CASCADE")
    pairing_token_id: ObjectId[str]
    remote_session = pw.CharField(max_length=64)
    session = pw.ForeignKeyField(Session, backref="remote_callers", on_delete="CASCADE")
    session_id: ObjectId[str]
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "remote_caller"
        indexes = ((("pairing_token", "remote_session"), True),)


class PeerAsk(BaseModel):
    """An `ask` this relay's conversation made on a paired relay, which keeps it (docs/relays.md#asks-across-relays):
    this relay checks there for its answer at `next_check_at` until it is settled, then tells the
    asking conversation. Removing the pairing removes these rows: the asks end, telling no one."""

    id = pw.CharField(primary_key=True, max_length=32)  # the ask's id on the peer (ask_…)
    peer = pw.ForeignKeyField(Peer, backref="asks", on_delete="CASCADE")
    peer_id: ObjectId[str]
    asker = pw.ForeignKeyField(Session, backref="peer_asks", on_delete="CASCADE")
    asker_id: ObjectId[str]
    about_session = pw.CharField(null=True, max_length=64)  # the peer's session it is about, when named
    question = pw.TextField()
    hops = pw.IntegerField(default=0)
    status = pw.CharField(default="pending", max_length=12)  # pending | answered | dismissed | withdrawn | ended
    created_at = pw.DateTimeField(default=utcnow)
    next_check_at = pw.DateTimeField(null=True, index=True)  # null once settled
    settled_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "peer_ask"


class PeerSubscription(BaseModel):
    """A subscription this relay's conversation keeps on a paired relay (docs/relays.md#events-across-relays):
    which conversation watches there, so that link lines reach it."""

    id = pw.CharField(primary_key=True, max_length=32)  # the subscription's id on the peer (sub_…)
    peer = pw.ForeignKeyField(Peer, backref="subscriptions", on_delete="CASCADE")
    peer_id: ObjectId[str]
    watcher = pw.ForeignKeyField(Session, backref="peer_subscriptions", on_delete="CASCADE")
    watcher_id: ObjectId[str]
    created_at = pw.DateTimeField(default=utcnow)
    ended_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "peer_subscription"
        indexes = ((("peer", "ended_at"), False),)


MODELS: tuple[type[BaseModel], ...] = (PairingToken, Peer, PeerUnlock, RemoteCaller, PeerAsk, PeerSubscription)
