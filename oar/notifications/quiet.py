"""The owner's quiet hours for notifications (docs/notifications.md#quiet-hours): the same
window, rules and clock-change handling as subscriptions' quiet hours (oar.watching.quiet_hours)."""

from __future__ import annotations

from typing import Any

from oar.core.errors import invalid
from oar.watching import quiet_hours

NOTHING = "Nothing was changed."


def owner_quiet_hours(settings: dict[str, Any]) -> quiet_hours.QuietHours | None:
    """The stored `notify_quiet_hours` setting as a window, or None when none is set."""
    stored = settings.get("notify_quiet_hours")
    if not isinstance(stored, dict):
        return None
    try:
        return quiet_hours.parse(stored)
    except quiet_hours.BadQuietHours:
        return None  # stored before a check it fails (a zone gone from the IANA list): no window


def checked(value: Any) -> dict[str, str] | None:
    """`notify_quiet_hours` as the owner gave it: {from, to, tz}, or null (or every field empty) for none."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"from", "to", "tz"}:
        raise invalid('notify_quiet_hours must be {"from": "HH:MM", "to": "HH:MM", "tz": "Area/City"} or null. ' + NOTHING)
    try:
        parsed = quiet_hours.parse(value)
    except quiet_hours.BadQuietHours as error:
        raise invalid(f"notify_{error}. {NOTHING}") from None
    return parsed.as_dict() if parsed is not None else None
