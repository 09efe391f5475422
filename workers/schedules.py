"""RQ job: fire a schedule at its due time."""

from __future__ import annotations

from oar import schedules
from oar.db import database
from oar.timeutil import utcnow
from workers.runtime import current


def fire(schedule_id: str) -> str:
    try:
        return schedules.run_job(current(), schedule_id, utcnow)
    finally:
        database.close()
