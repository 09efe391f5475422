"""RQ jobs: ingest new events, and deliver a watcher's due events at their due time."""

from __future__ import annotations

from oar import subscriptions
from oar.db import database
from oar.timeutil import utcnow
from workers.runtime import current


def ingest() -> int:
    try:
        total = 0
        while (count := subscriptions.ingest(current(), utcnow())) > 0:
            total += count
        return total
    finally:
        database.close()


def deliver(watcher_id: str) -> str:
    try:
        return subscriptions.run_job(current(), watcher_id, utcnow)
    finally:
        database.close()
