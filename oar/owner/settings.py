"""The owner's relay settings: reading and changing them (docs/owner-api.md)."""

from __future__ import annotations

from typing import Any

from oar.core import settings
from oar.core.runtime import Runtime
from oar.notifications import quiet


def read_settings(runtime: Runtime) -> dict[str, Any]:
    """Every setting, stored or default."""
    return settings.load(runtime.config)


def change_settings(runtime: Runtime, changes: dict[str, Any]) -> dict[str, Any]:
    """Every change is checked first, then all are written in one transaction; the settings after.
    The notification quiet hours are checked here with the quiet-hours rules (oar.watching)."""
    if isinstance(changes, dict) and "notify_quiet_hours" in changes:
        changes = {**changes, "notify_quiet_hours": quiet.checked(changes["notify_quiet_hours"])}
    return settings.update(runtime.config, changes)
