"""The bad-input table of schedule, list_schedules and unschedule (docs/calling.md, docs/schedules.md, docs/errors.md).

A table of its own because these actions take `relay` as optional (= "this"), which the
session table's relay cases assume is required. Cases may point at "<desks_schedule>" (a
schedule desk set into itself) and "<others_schedule>" (one `other` set into itself).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from oar.core.timeutil import utcnow
from tests.support.bad_input.world import INVALID, NOT_FOUND, UNKNOWN_RELAY, Case

IN_A_DAY = (utcnow() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
VALID_SCHEDULE = {"text": "check the build", "every_minutes": 60}


def sched(name: str, changes: dict[str, Any], code: str = INVALID, says: str = "", drop: tuple[str, ...] = ()) -> Case:
    args = {key: value for key, value in {**VALID_SCHEDULE, **changes}.items() if key not in drop}
    return Case(f"schedule-{name}", "schedule", args, code, says)


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
    sched("relay-unknown", {"relay": "build-box"}, UNKNOWN_RELAY, 'No relay is named "build-box"'),
    sched("relay-number", {"relay": 7}, says="relay must be text"),
    Case("unschedule-id-missing", "unschedule", {}, INVALID, "unschedule needs schedule_id"),
    Case("unschedule-id-number", "unschedule", {"schedule_id": 5}, INVALID, "schedule_id must be text"),
    Case("unschedule-id-too-long", "unschedule", {"schedule_id": "s" * 65}, INVALID, "the limit is 64"),
    Case("unschedule-unknown", "unschedule", {"schedule_id": "sch_nosuch"}, NOT_FOUND, "has no schedule"),
    Case("unschedule-someone-elses", "unschedule", {"schedule_id": "<others_schedule>"}, NOT_FOUND,
         "has no schedule"),
    Case("unschedule-by-a-stranger", "unschedule", {"schedule_id": "<desks_schedule>"}, NOT_FOUND,
         "has no schedule", caller="stranger"),
    Case("unschedule-relay-unknown", "unschedule", {"schedule_id": "<desks_schedule>", "relay": "build-box"},
         UNKNOWN_RELAY, 'No relay is named "build-box"'),
    Case("unschedule-relay-number", "unschedule", {"schedule_id": "<desks_schedule>", "relay": 7}, INVALID,
         "relay must be text"),
    Case("list_schedules-relay-number", "list_schedules", {"relay": ["this"]}, INVALID, "relay must be text"),
    Case("list_schedules-relay-too-long", "list_schedules", {"relay": "r" * 201}, INVALID, "the limit is 200"),
    Case("list_schedules-relay-unknown", "list_schedules", {"relay": "build-box"}, UNKNOWN_RELAY,
         'No relay is named "build-box"'),
]
