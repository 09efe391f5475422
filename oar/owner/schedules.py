"""The owner's schedules: the page's ⏰ list and its Cancel (docs/schedules.md)."""

from __future__ import annotations

from typing import Any

from oar.core.errors import not_found
from oar.core.models import Schedule
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.schedules import schedules


def schedule_view(row: Schedule) -> dict[str, Any]:
    return schedules.view(row)


def list_schedules(runtime: Runtime) -> list[dict[str, Any]]:
    """Every active schedule, and those ended within the hour."""
    rows = schedules.listed_for(None, utcnow(), runtime.time("SCHEDULE_ENDED_LISTED_SECONDS"))
    return [schedule_view(row) for row in rows]


def end_schedule(runtime: Runtime, schedule_id: str) -> tuple[bool, Schedule]:
    """Cancel: the schedule ends with endReason `unscheduled`; False when it had already ended."""
    row = Schedule.get_or_none(Schedule.id == schedule_id.strip())
    if row is None:
        raise not_found(f'Relay "{runtime.relay_name()}" has no schedule "{schedule_id[:64]}". Nothing was changed.')
    ended = schedules.unschedule(row.id, utcnow())
    return ended, Schedule.get_by_id(row.id)
