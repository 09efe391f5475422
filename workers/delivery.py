"""RQ jobs: ingest new events, and deliver the events due at a due time."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.watching import delivering
from oar.watching.ingest import ingest_pending
from workers.runtime import current


def ingest() -> int:
    try:
        return ingest_pending(current(), utcnow)
    finally:
        database.close()


def deliver_due(stamp: int) -> int:
    try:
        return delivering.run_due_job(current(), stamp, utcnow)
    finally:
        database.close()

