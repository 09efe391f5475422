"""Relay events kept for another relay to fetch (docs/relays.md#events-across-relays).

A conversation on another relay that subscribes here is a stand-in session; what the delivery
engine would write into it as an automated message (after the subscription's windows, digests
and quiet hours) is kept here instead, until that relay fetches it. Each stand-in keeps its
newest `PEER_OUTBOX_KEEP` deliveries for `PEER_OUTBOX_KEEP_SECONDS` at most: what a relay that
stays away longer would have got is dropped, oldest first.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from oar.core import defaults
from oar.core.runtime import Runtime
from oar.watching.models import RelayOutbox


def put(runtime: Runtime, watcher_id: str, text: str, kinds: dict[str, int], now: datetime) -> str:
    """Keep one delivery for the stand-in `watcher_id` (inside the delivery's write transaction);
    returns the id the held rows are marked delivered with."""
    row = RelayOutbox.create(watcher=watcher_id, text=text, kinds=kinds, created_at=now)
    keep_after = now - timedelta(seconds=runtime.time("PEER_OUTBOX_KEEP_SECONDS"))
    newest = (RelayOutbox.select(RelayOutbox.id).where(RelayOutbox.watcher == watcher_id)
              .order_by(RelayOutbox.id.desc()).offset(defaults.PEER_OUTBOX_KEEP - 1).limit(1).first())
    stale = RelayOutbox.created_at < keep_after
    if newest is not None:
        stale = stale | (RelayOutbox.id < newest.id)
    RelayOutbox.delete().where((RelayOutbox.watcher == watcher_id) & stale).execute()
    return f"out_{row.id}"


def fetch(watcher_ids: list[str], after: int, limit: int) -> list[dict[str, Any]]:
    """Deliveries to these stand-ins after `after`, oldest first; those before `after` were taken
    (the fetching relay asks for what comes after only once it has kept them) and are removed.

    The row `after` itself stays until a later one is taken: SQLite gives a new row the highest
    id in the table plus one, so emptying the table would hand out ids the fetching relay has
    already passed (`put` keeps the newest row too, which is the one it has just written)."""
    if not watcher_ids:
        return []
    RelayOutbox.delete().where(RelayOutbox.watcher.in_(watcher_ids) & (RelayOutbox.id < after)).execute()
    rows = (RelayOutbox.select().where(RelayOutbox.watcher.in_(watcher_ids) & (RelayOutbox.id > after))
            .order_by(RelayOutbox.id).limit(limit))
    return [{"id": row.id, "watcher": row.watcher_id, "text": row.text, "kinds": row.kinds} for row in rows]
