"""The owner's relay settings: reading and changing them (docs/owner-api.md)."""

from __future__ import annotations

from typing import Any

from oar.core import settings
from oar.core.runtime import Runtime


def read_settings(runtime: Runtime) -> dict[str, Any]:
    """Every setting, stored or default."""
    return settings.load(runtime.config)


def change_settings(runtime: Runtime, changes: dict[str, Any]) -> dict[str, Any]:
    """Every change is checked first, then all are written in one transaction; the settings after."""
    return settings.update(runtime.config, changes)
