"""The clock's due-time timer (docs/schedules.md#when-a-schedule-fires): it sleeps until the
earliest due time in the database, a schedule set for an earlier time wakes it (the due-time
signal), and nothing fires before its due time.

Its own relay with the clock, whose reconcile period is made far longer than the test, so
that only the signal can bring the timer to the earlier schedules in time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from oar.core import keys
from oar.core.db import database
from oar.core.models import Message, Schedule
from oar.core.timeutil import utcnow
from tests.support.clients import poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack  # a relay of its own

# Longer than any wait below: a timer that missed the signal sleeps until `far` or this.
TIMES = {**FAST_TIMES, "RECONCILE_SECONDS": "900"}


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[RelayStack]:
    with own_relay(tmp_path, TIMES, clock=True) as running:
        yield running


def stamp(seconds: float) -> str:
    return (utcnow() + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_an_earlier_schedule_wakes_the_sleeping_timer_and_nothing_fires_before_its_due_time(
    clocked: RelayStack,
) -> None:
    assert clocked.relay is not None
    desk = clocked.relay.conversation("desk")
    # The timer now sleeps until this one (10 minutes away), or its reconcile period (15).
    far = desk.ok("schedule", text="far", at=stamp(600))["schedule_id"]
    # The clock's timer is up once its process listens for due-time signals (a publish says
    # how many received it; nothing else here listens before the first wait).
    channel = keys.due_channel(clocked.config.namespace)
    poll("the clock's timer listening", lambda: clocked.relay.runtime.redis.publish(channel, b"1") >= 1, seconds=60)
    soon = [desk.ok("schedule", text=f"soon {n}", at=stamp(2 + n * 0.3))["schedule_id"] for n in range(3)]

    def rows() -> dict[str, Schedule]:
        with database.connection_context():
            return {row.id: row for row in Schedule.select().where(Schedule.id.in_([far, *soon]))}

    with database.connection_context():
        due = {row.id: row.due_at for row in Schedule.select().where(Schedule.id.in_(soon))}
    poll("the earlier schedules to fire", lambda: all(rows()[s].fired_count == 1 for s in soon), seconds=60)
    fired = rows()
    with database.connection_context():
        created = {m.id: m.created_at for m in Message.select().where(Message.id.in_([fired[s].last_message_id for s in soon]))}
    for schedule_id in soon:
        # Never early: the message was written at or after the due time stored in the database.
        assert created[fired[schedule_id].last_message_id] >= due[schedule_id], (schedule_id, due, created)
    assert fired[far].fired_count == 0 and fired[far].due_at is not None
