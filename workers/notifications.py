"""RQ job: turn what waits for the owner into notifications and send what is due (docs/notifications.md)."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.notifications import sending
from workers.runtime import current


def send_due() -> int:
    try:
        return sending.run(current(), utcnow)
    finally:
        database.close()
