"""Bad input to schedule, list_schedules and unschedule is refused in the documented shape and
changes nothing (docs/calling.md, docs/schedules.md, docs/errors.md): the table of tests/support/bad_input/schedules.py, in
the world of the other bad-input tables.

Every case runs in-process through the dispatcher with the database's write counts
(tests/support/bad_input/in_process.py); one also runs over real HTTP with the full snapshot.
"""

from __future__ import annotations

import pytest

from tests.support.bad_input.in_process import WorldKeeper, assert_case_refused_in_process
from tests.support.bad_input.schedules import CASES, VALID_SCHEDULE
from tests.support.bad_input.world import NOTHING, Case, World, assert_case_refused, assert_refused
from tests.support.snapshots import snapshot

# Over real HTTP too: a case refused deep in the handler (the session is looked up).
OVER_HTTP = ("schedule-session-archived",)


def add_schedules(world: World) -> None:
    """A schedule desk set into itself and one `other` set into itself."""
    world.refs["<desks_schedule>"] = world.desk.ok("schedule", text="mine", every_minutes=30)["schedule_id"]
    other = world.relay.agent_for(world.refs["<other>"])
    world.refs["<others_schedule>"] = other.ok("schedule", text="theirs", every_minutes=30)["schedule_id"]


@pytest.fixture
def schedule_world(world: World) -> World:
    """The shared world, plus a schedule desk set into itself and one `other` set into itself."""
    add_schedules(world)
    return world


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_schedule_input_is_refused_and_changes_nothing(kept_worlds: WorldKeeper, bad: Case) -> None:
    assert_case_refused_in_process(kept_worlds.get("schedules", add_schedules), bad)


@pytest.mark.parametrize("bad", [c for c in CASES if c.id in OVER_HTTP], ids=lambda c: c.id)
def test_over_http_bad_schedule_input_is_refused_and_changes_nothing(schedule_world: World, bad: Case) -> None:
    assert_case_refused(schedule_world, bad)


def test_the_valid_schedule_arguments_succeed_without_relay(schedule_world: World) -> None:
    body = schedule_world.desk.ok("schedule", **VALID_SCHEDULE)
    assert body["relay"] == "desk"
    assert schedule_world.desk.ok("list_schedules", relay="this")["schedules"]
    schedule_world.desk.ok("unschedule", schedule_id=body["schedule_id"], relay="desk")


def test_with_agent_sessions_off_schedule_is_refused_but_listing_and_unscheduling_work(schedule_world: World) -> None:
    schedule_world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(schedule_world.relay)
    status, body = schedule_world.desk.call("schedule", **VALID_SCHEDULE)
    assert_refused(status, body, "REMOTE_RELAY_LOCAL_DISABLED", ends=NOTHING["schedule"])
    assert snapshot(schedule_world.relay) == before
    assert len(schedule_world.desk.ok("list_schedules")["schedules"]) == 1
    ended = schedule_world.desk.ok("unschedule", schedule_id=schedule_world.refs["<desks_schedule>"])
    assert ended["schedule"]["endReason"] == "unscheduled"
