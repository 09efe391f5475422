"""Template filters of the owner's page: `ago` (`5 min ago`) and `when` (`2026-11-02 02:00 UTC`)."""

from __future__ import annotations

from datetime import datetime

from oar.core.timeutil import utcnow


def ago(moment: datetime | str | None) -> str:
    """`just now`, `5 min ago`, `3 h ago`, `2 days ago`."""
    if not moment:
        return "never"
    moment = parse_time(moment)
    seconds = (utcnow() - moment).total_seconds()
    if seconds < 0:
        return "in " + _span(-seconds)
    if seconds < 45:
        return "just now"
    return _span(seconds) + " ago"


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86400)} days"


def when(moment: datetime | str | None) -> str:
    """A UTC time as `2026-11-02 02:00 UTC`."""
    if not moment:
        return ""
    return parse_time(moment).strftime("%Y-%m-%d %H:%M UTC")


def parse_time(moment: datetime | str) -> datetime:
    """A naive UTC datetime, from a datetime or the API's `…Z` text."""
    if isinstance(moment, str):
        return datetime.fromisoformat(moment.replace("Z", "+00:00")).replace(tzinfo=None)
    return moment
