"""The watching package's own table: relay events waiting for another relay to fetch them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import peewee as pw

from oar.core.models import BaseModel, JSONField, Session
from oar.core.timeutil import utcnow

if TYPE_CHECKING:
    from oar.core.models import ObjectId


class RelayOutbox(BaseModel):
    """One delivery of relay events to a stand-in of another relay's conversation
    (docs/relays.md#events-across-relays): what would have been the automated message, kept until the
    calling relay fetches it (and acknowledges it by asking for what comes after)."""

    id = pw.AutoField()
    watcher = pw.ForeignKeyField(Session, backref="outbox", on_delete="CASCADE")
    watcher_id: ObjectId[str]
    text = pw.TextField()
    kinds = JSONField(default=dict)  # event kind → how many of the delivery's events
    created_at = pw.DateTimeField(default=utcnow, index=True)

    class Meta:
        table_name = "relay_outbox"
        indexes = ((("watcher", "id"), False),)


MODELS: tuple[type[BaseModel], ...] = (RelayOutbox,)
