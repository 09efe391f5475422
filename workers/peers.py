"""RQ jobs of paired relays: checking for the answers to asks kept there, fetching their events."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.federation import asks, events
from workers.runtime import current


def check_asks(peer_id: str) -> int:
    try:
        return asks.check(current(), peer_id, utcnow())
    finally:
        database.close()


def fetch_events(peer_id: str) -> int:
    try:
        return events.fetch(current(), peer_id, utcnow())
    finally:
        database.close()
