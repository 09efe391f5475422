"""RQ job: fire a schedule at its due time."""

from __future__ import annotations

from oar.core.db import database
from oar.core.timeutil import utcnow
from oar.schedules import schedules
from workers.runtime import current


def fire(schedule_id: str) -> str:
    try:
        return schedules.run_job(current(), schedule_id, utcnow)
    finally:
        database.close()
