"""Bad input to schedule, list_schedules and unschedule is refused in the SPEC shape and
changes nothing (SPEC §3, §9, §14), with the world, snapshot and checks of test_bad_input.py.

Kept in a table of its own because these actions take `relay` as optional (= "this"),
which the shared table's relay cases assume is required.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from oar.core.timeutil import utcnow
from tests.test_bad_input import INVALID, NOT_FOUND, World, assert_refused, snapshot, world  # noqa: F401

SCHEDULED = "Nothing was scheduled."
UNSCHEDULED = "Nothing was unscheduled."
IN_A_DAY = (utcnow() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Case:
    id: str
    action: str
    args: dict[str, Any]
    code: str
    says: str
    ends: str | None = None
    caller: str = "desk"  # or "stranger": a conversation that neither set nor receives the schedule


VALID_SCHEDULE = {"text": "check the build", "every_minutes": 60}


def sched(name: str, changes: dict[str, Any], code: str = INVALID, says: str = "", drop: tuple[str, ...] = ()) -> Case:
    args = {key: value for key, value in {**VALID_SCHEDULE, **changes}.items() if key not in drop}
    return Case(f"schedule-{name}", "schedule", args, code, says, ends=SCHEDULED)


CASES = [
    sched("text-missing", {}, says="schedule needs text", drop=("text",)),
    sched("text-blank-is-absent", {"text": "   "}, says="schedule needs text"),
    sched("text-number", {"text": 5}, says="text must be text"),
    sched("text-100001-chars", {"text": "x" * 100_001}, says="the limit is 100,000"),
    sched("no-time-at-all", {}, says="schedule needs at (a time), every_minutes or cron", drop=("every_minutes",)),
    sched("only-once-and-title", {"once": True, "title": "t"}, says="needs at", drop=("every_minutes",)),
    sched("at-in-the-past", {"at": "2020-01-01T00:00:00Z"}, says="is in the past"),
    sched("at-a-second-ago", {"at": (utcnow() - timedelta(seconds=1)).isoformat() + "Z"}, says="is in the past"),
    sched("at-unparseable", {"at": "tomorrow at nine"}, says="is not an ISO 8601 time"),
    sched("at-bad-month", {"at": "2030-13-01T00:00:00Z"}, says="is not an ISO 8601 time"),
    sched("at-number", {"at": 1_900_000_000}, says="at must be text"),
    sched("at-too-long", {"at": "2" * 65}, says="the limit is 64"),
    sched("every_minutes-0", {"every_minutes": 0}, says="every_minutes must be a whole number from 1 to 525,600"),
    sched("every_minutes-negative", {"every_minutes": -5}, says="every_minutes must be"),
    sched("every_minutes-absurd", {"every_minutes": 10**9}, says="every_minutes must be"),
    sched("every_minutes-string", {"every_minutes": "60"}, says="every_minutes must be"),
    sched("every_minutes-fraction", {"every_minutes": 2.5}, says="every_minutes must be"),
    sched("every_minutes-true", {"every_minutes": True}, says="every_minutes must be"),
    sched("every_minutes-and-cron", {"cron": "0 9 * * *"}, says="not both"),
    sched("cron-invalid", {"cron": "61 * * * *"}, says="is not a valid cron expression", drop=("every_minutes",)),
    sched("cron-six-fields", {"cron": "0 0 9 * * *"}, says="five fields", drop=("every_minutes",)),
    sched("cron-words", {"cron": "every morning"}, says="five fields", drop=("every_minutes",)),
    sched("cron-never", {"cron": "0 0 30 2 *"}, says="never fires", drop=("every_minutes",)),
    sched("cron-number", {"cron": 5}, says="cron must be text", drop=("every_minutes",)),
    sched("tz-unknown", {"cron": "0 9 * * *", "tz": "Mars/Olympus"}, says="is not an IANA time zone",
          drop=("every_minutes",)),
    sched("tz-lowercase", {"at": IN_A_DAY, "tz": "europe/berlin"}, says="is not an IANA time zone"),
    sched("tz-number", {"tz": 1}, says="tz must be text"),
    sched("once-string", {"once": "yes"}, says="once must be true or false"),
    sched("title-too-long", {"title": "t" * 201}, says="the limit is 200"),
    sched("session-unknown", {"session": "nosuchsession"}, NOT_FOUND, 'Relay "desk" has no session "nosuchsession".'),
    sched("session-archived", {"session": "<archived>"}, NOT_FOUND, "is archived"),
    sched("session-number", {"session": 5}, says="session must be text"),
    sched("relay-unknown", {"relay": "build-box"}, "REMOTE_RELAY_UNKNOWN", 'No relay is named "build-box"'),
    sched("relay-number", {"relay": 7}, says="relay must be text"),
    Case("unschedule-id-missing", "unschedule", {}, INVALID, "unschedule needs schedule_id", ends=UNSCHEDULED),
    Case("unschedule-id-number", "unschedule", {"schedule_id": 5}, INVALID, "schedule_id must be text",
         ends=UNSCHEDULED),
    Case("unschedule-unknown", "unschedule", {"schedule_id": "sch_nosuch"}, NOT_FOUND, "has no schedule",
         ends=UNSCHEDULED),
    Case("unschedule-someone-elses", "unschedule", {"schedule_id": "<others_schedule>"}, NOT_FOUND,
         "has no schedule", ends=UNSCHEDULED),
    Case("unschedule-by-a-stranger", "unschedule", {"schedule_id": "<desks_schedule>"}, NOT_FOUND,
         "has no schedule", ends=UNSCHEDULED, caller="stranger"),
    Case("unschedule-relay-unknown", "unschedule", {"schedule_id": "<desks_schedule>", "relay": "build-box"},
         "REMOTE_RELAY_UNKNOWN", 'No relay is named "build-box"', ends=UNSCHEDULED),
    Case("list_schedules-relay-number", "list_schedules", {"relay": ["this"]}, INVALID, "relay must be text"),
    Case("list_schedules-relay-unknown", "list_schedules", {"relay": "build-box"}, "REMOTE_RELAY_UNKNOWN",
         'No relay is named "build-box"'),
]


@pytest.fixture
def schedule_world(world: World) -> World:  # noqa: F811 - the fixture imported above
    """The shared world, plus a schedule desk set into itself and one `other` set into itself."""
    world.refs["<desks_schedule>"] = world.desk.ok("schedule", text="mine", every_minutes=30)["schedule_id"]
    other = world.relay.agent_for(world.refs["<other>"])
    world.refs["<others_schedule>"] = other.ok("schedule", text="theirs", every_minutes=30)["schedule_id"]
    return world


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_schedule_input_is_refused_and_changes_nothing(schedule_world: World, bad: Case) -> None:
    caller = schedule_world.desk if bad.caller == "desk" else schedule_world.relay.conversation("stranger")
    before = snapshot(schedule_world.relay)
    status, body = caller.call(bad.action, **schedule_world.fill(bad.args))
    assert_refused(status, body, bad.code, ends=bad.ends, says=schedule_world.fill(bad.says))
    assert snapshot(schedule_world.relay) == before


def test_the_valid_schedule_arguments_succeed_without_relay(schedule_world: World) -> None:
    body = schedule_world.desk.ok("schedule", **VALID_SCHEDULE)
    assert body["relay"] == "desk"
    assert schedule_world.desk.ok("list_schedules", relay="this")["schedules"]
    schedule_world.desk.ok("unschedule", schedule_id=body["schedule_id"], relay="desk")


def test_with_agent_sessions_off_schedule_is_refused_but_listing_and_unscheduling_work(schedule_world: World) -> None:
    schedule_world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(schedule_world.relay)
    status, body = schedule_world.desk.call("schedule", **VALID_SCHEDULE)
    assert_refused(status, body, "REMOTE_RELAY_LOCAL_DISABLED", ends=SCHEDULED)
    assert snapshot(schedule_world.relay) == before
    assert len(schedule_world.desk.ok("list_schedules")["schedules"]) == 1
    ended = schedule_world.desk.ok("unschedule", schedule_id=schedule_world.refs["<desks_schedule>"])
    assert ended["schedule"]["endReason"] == "unscheduled"
