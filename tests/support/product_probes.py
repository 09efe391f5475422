"""Helpers only tests use, kept out of the product modules they read: a task's stored output,
every action's arguments schema, and the hourly cap's count over a list of deliveries."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from oar.actions.catalog import ordered_actions
from oar.actions.schema import arguments_schema
from oar.core.models import TaskOutputChunk
from oar.watching.delivery import Timing


def has_output(task_id: str) -> bool:
    """Whether the database keeps any output of the task (oar.background.output_store)."""
    return TaskOutputChunk.select().where(TaskOutputChunk.task == task_id).exists()


def action_schemas() -> dict[str, dict[str, Any]]:
    """Every action's arguments schema, in reading order."""
    return {spec.name: arguments_schema(spec) for spec in ordered_actions()}


def wakeups_in_hour(deliveries: Iterable[datetime], now: datetime, timing: Timing) -> int:
    """The deliveries in the hour up to `now`: what `oar.watching.held.wakeups` counts
    in the database, over a list."""
    since = now - timedelta(seconds=timing.hour_seconds)
    return sum(1 for moment in deliveries if since < moment <= now)
