"""RQ job: check a paired relay for the answers to this relay's asks kept there."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.federation import asks
from workers.runtime import current


def check_asks(peer_id: str) -> int:
    try:
        return asks.check(current(), peer_id, utcnow())
    finally:
        database.close()
