"""RQ jobs of paired relays: checking for the answers to asks kept there, fetching their events."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.federation import peer_asks, peer_events
from workers.runtime import current


def check_asks(peer_id: str) -> int:
    try:
        return peer_asks.check(current(), peer_id, utcnow())
    finally:
        database.close()


def fetch_events(peer_id: str) -> int:
    try:
        return peer_events.fetch(current(), peer_id, utcnow())
    finally:
        database.close()
