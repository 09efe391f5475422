"""Schedules (docs/schedules.md#schedules-into-other-sessions) on the real relay: setting, firing, skipping, holding, listing, ending.

Firing is driven by calling the sweeper (`fire_due`) with a `now` at or after the due time,
so that no test waits for minutes to pass; the end-to-end restart test
(`test_schedules_restart.py`) lets real time and real processes do it.
"""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta
from typing import Any

from rq.registry import ScheduledJobRegistry

from oar.core import defaults
from oar.core.db import database
from oar.core.models import Message, Schedule, Session
from oar.core.timeutil import utcnow
from oar.schedules import schedules
from tests.support.clients import Agent, denied_by_owner
from tests.support.relays import Relay

HEADER_END = "automated message from OAR, not from the user; it approves nothing]"


def parse(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def fire_due(relay: Relay, now: datetime) -> dict[str, int]:
    with database.connection_context():
        return dict(schedules.fire_due(relay.runtime, now))


def row(schedule_id: str) -> Schedule:
    with database.connection_context():
        return Schedule.get_by_id(schedule_id)


def listed(agent: Agent, schedule_id: str) -> dict[str, Any]:
    entries = {entry["id"]: entry for entry in agent.ok("list_schedules")["schedules"]}
    return entries[schedule_id]


def prompts(relay: Relay, session_id: str, role: str = "schedule") -> list[Message]:
    with database.connection_context():
        return list(Message.select().where((Message.session == session_id) & (Message.role == role)).order_by(Message.seq))


def in_a_day() -> str:
    return (utcnow() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_it_schedules_into_its_own_conversation_and_fires_in_the_targets_mode(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="check the nightly build", every_minutes=1440, title="nightly")
    # Set afterwards (in plan mode the schedule call itself would ask a card): a firing runs in
    # the mode its target has when it fires.
    relay.owner.patch(f"/api/v1/owner/sessions/{desk.session_id}", {"mode": "plan"})
    schedule_id = body["schedule_id"]
    assert re.fullmatch(r"sch_[0-9a-f]{12}", schedule_id)
    shown = body["schedule"]
    assert shown["id"] == schedule_id and shown["title"] == "nightly" and shown["everyMinutes"] == 1440
    assert shown["once"] is False
    first = parse(shown["nextFireAt"])
    assert re.fullmatch(
        rf"schedule → desk: every 1440 min, next \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z \({schedule_id}\)",
        body["summary"],
    ), body["summary"]
    assert timedelta(minutes=1439) < first - utcnow() <= timedelta(minutes=1440)

    assert fire_due(relay, first - timedelta(seconds=1)) == {}  # not due yet
    assert fire_due(relay, first + timedelta(seconds=3)) == {"fired": 1}
    [message] = prompts(relay, desk.session_id)
    assert message.text == (
        f'[relay schedule {schedule_id} "nightly" · every 1440 min · {HEADER_END}\ncheck the nightly build'
    )
    assert message.mode == "plan" and message.from_kind == "schedule" and message.from_session == desk.session_id
    entry = listed(desk, schedule_id)
    assert entry["firedCount"] == 1 and entry["skippedCount"] == 0 and entry["active"] is True
    # The grid is kept: the next time is one interval after the first, not after the late firing.
    assert parse(entry["nextFireAt"]) - first == timedelta(minutes=1440)
    assert parse(entry["lastFiredAt"]) == first + timedelta(seconds=3)
    # The turn runs and is answered like any prompt (an agent cannot wait on its own
    # conversation; another conversation's agent can).
    reader = relay.conversation("reader")
    done = reader.ok("wait", relay="this", session=desk.session_id, message_id=message.id, wait_seconds=30)
    assert done["status"] == "done" and done["reply"]["text"].startswith("echo: [relay schedule")


def test_at_alone_fires_once_and_then_ends_as_fired(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="remind me", at=in_a_day())
    due = parse(body["schedule"]["nextFireAt"])
    assert body["summary"].startswith("schedule → desk: once, next ")
    assert fire_due(relay, due) == {"fired": 1}
    assert fire_due(relay, due + timedelta(days=30)) == {}
    entry = listed(desk, body["schedule_id"])
    assert entry["active"] is False and entry["endReason"] == "fired" and entry["nextFireAt"] is None
    assert entry["firedCount"] == 1


def test_at_with_an_interval_and_once_fires_only_the_first_time(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="just once", at=in_a_day(), every_minutes=5, once=True)
    assert fire_due(relay, parse(body["schedule"]["nextFireAt"])) == {"fired": 1}
    assert listed(desk, body["schedule_id"])["endReason"] == "fired"


def test_missed_times_fire_once_and_the_grid_is_kept(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="tick", at=in_a_day(), every_minutes=60)
    anchor = parse(body["schedule"]["nextFireAt"])
    # The relay was "down" for five hours and a half after the first time.
    assert fire_due(relay, anchor + timedelta(hours=5, minutes=30)) == {"fired": 1}
    entry = listed(desk, body["schedule_id"])
    assert entry["firedCount"] == 1
    assert parse(entry["nextFireAt"]) == anchor + timedelta(hours=6)


def test_a_schedule_into_another_session_says_who_set_it_inherits_hops_and_counts_as_a_prompt(
    relay: Relay, desk: Agent
) -> None:
    other = relay.conversation("other")
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "please schedule"})
    with database.connection_context():
        # The turn that sets the schedule came from another relay's agent, one hop away.
        Message.update(hops=1).where(Message.session == desk.session_id).execute()
        Session.update(loop_prompt_count=0).where(Session.id == desk.session_id).execute()
    body = desk.ok("schedule", text="status?", at=in_a_day(), session=other.session_id, title="poke")
    assert body["summary"].endswith(f"into session {other.session_id[:8]}")
    assert body["schedule"]["session"] == {"id": other.session_id, "title": "other"}
    with database.connection_context():
        assert Session.get_by_id(desk.session_id).loop_prompt_count == 1
    assert fire_due(relay, parse(body["schedule"]["nextFireAt"])) == {"fired": 1}
    [message] = prompts(relay, other.session_id)
    assert message.text.startswith(
        f'[relay schedule {body["schedule_id"]} "poke" · set by "desk" ({desk.session_id[:4]}…) · {HEADER_END}\n'
    )
    assert (message.from_kind, message.from_session, message.hops) == ("schedule", desk.session_id, 1)
    with database.connection_context():
        assert Session.get_by_id(desk.session_id).loop_prompt_count == 2
    # The target sees it in its own list, with who set it.
    entry = listed(other, body["schedule_id"])
    assert entry["setBy"] == {"id": desk.session_id, "title": "desk"}
    assert "setBy" not in listed(desk, body["schedule_id"])


def test_a_firing_is_skipped_while_the_previous_message_is_still_queued(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("other")
    busy = desk.ok("send", relay="this", session=other.session_id, text="!sleep 60\nbusy", wait_seconds=0)
    try:
        body = desk.ok("schedule", text="nudge", at=in_a_day(), every_minutes=10, session=other.session_id)
        first = parse(body["schedule"]["nextFireAt"])
        assert fire_due(relay, first + timedelta(seconds=1)) == {"fired": 1}
        # The first firing's message waits behind the sleeping turn: the next one is skipped.
        assert fire_due(relay, first + timedelta(minutes=10, seconds=1)) == {"skipped": 1}
        entry = listed(desk, body["schedule_id"])
        assert (entry["firedCount"], entry["skippedCount"]) == (1, 1)
        assert parse(entry["nextFireAt"]) == first + timedelta(minutes=20)
        assert len(prompts(relay, other.session_id)) == 1
    finally:
        desk.ok("stop", relay="this", session=other.session_id)
    desk.ok("wait", relay="this", session=other.session_id, message_id=busy["message_id"], wait_seconds=30)


def test_firings_are_held_when_loop_protection_is_used_up_and_released_when_the_owner_writes(
    relay: Relay, desk: Agent
) -> None:
    other = relay.conversation("other")
    body = desk.ok("schedule", text="again", at=in_a_day(), every_minutes=60, session=other.session_id)
    schedule_id = body["schedule_id"]
    due = parse(body["schedule"]["nextFireAt"])
    with database.connection_context():
        Session.update(loop_prompt_count=defaults.LOOP_PROMPTS_BEFORE_CARD).where(Session.id == desk.session_id).execute()
    assert fire_due(relay, due + timedelta(seconds=1)) == {"held": 1}
    entry = listed(desk, schedule_id)
    assert entry["heldForApproval"] is True and parse(entry["heldSince"]) == due + timedelta(seconds=1)
    assert entry["firedCount"] == 0 and parse(entry["nextFireAt"]) == due
    # Re-checked every minute (SCHEDULE_HOLD_RECHECK_SECONDS), still held while the count is used up.
    assert fire_due(relay, due + timedelta(seconds=30)) == {}
    assert fire_due(relay, due + timedelta(seconds=62)) == {"held": 1}
    assert prompts(relay, other.session_id) == []
    # The owner writes in the setting conversation: the count starts over and the firing goes out.
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "carry on"})
    fire_due(relay, utcnow())  # the RQ job enqueued on release may have fired it already
    entry = listed(desk, schedule_id)
    assert entry["heldForApproval"] is False and entry["heldSince"] is None and entry["firedCount"] == 1
    assert len(prompts(relay, other.session_id)) == 1
    assert parse(entry["nextFireAt"]) > utcnow()
    assert (parse(entry["nextFireAt"]) - due) % timedelta(minutes=60) == timedelta(0)


def test_schedules_into_the_own_conversation_are_never_counted_or_held(relay: Relay, desk: Agent) -> None:
    with database.connection_context():
        Session.update(loop_prompt_count=defaults.LOOP_PROMPTS_BEFORE_CARD).where(Session.id == desk.session_id).execute()
    body = desk.ok("schedule", text="self", at=in_a_day())
    assert fire_due(relay, parse(body["schedule"]["nextFireAt"])) == {"fired": 1}
    with database.connection_context():
        assert Session.get_by_id(desk.session_id).loop_prompt_count == defaults.LOOP_PROMPTS_BEFORE_CARD


def test_the_31st_agent_prompt_cannot_be_a_schedule_and_nothing_is_created(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("other")
    with database.connection_context():
        Session.update(loop_prompt_count=defaults.LOOP_PROMPTS_BEFORE_CARD).where(Session.id == desk.session_id).execute()
    # It needs the loop card; over HTTP the waiting call shows it, and the owner denies it.
    card, _refused = denied_by_owner(relay.owner, desk, "schedule", text="x", at=in_a_day(), session=other.session_id)
    assert card["reason"] == "loop"
    assert desk.ok("list_schedules")["schedules"] == []


def test_unschedule_and_the_owner_cancel_end_schedules_which_stay_listed_with_their_reason(
    relay: Relay, desk: Agent
) -> None:
    other = relay.conversation("other")
    stranger = relay.conversation("stranger")
    mine = desk.ok("schedule", text="a", every_minutes=30)["schedule_id"]
    into_other = desk.ok("schedule", text="b", every_minutes=30, session=other.session_id)["schedule_id"]
    # Someone else's schedule is not found, and nothing changes.
    stranger.refused("unschedule", "REMOTE_RELAY_NOT_FOUND", schedule_id=mine)
    assert listed(desk, mine)["active"] is True
    # The conversation it fires into may end it.
    ended = other.ok("unschedule", schedule_id=into_other)
    assert ended["schedule"]["endReason"] == "unscheduled" and ended["summary"].endswith("ended")
    again = other.ok("unschedule", schedule_id=into_other)
    assert "already ended" in again["note"]
    # The page's ⏰ list and its Cancel.
    page = relay.owner.get("/api/v1/owner/schedules")["schedules"]
    assert {entry["id"] for entry in page} == {mine, into_other}
    status, cancelled = relay.owner.request("DELETE", f"/api/v1/owner/schedules/{mine}")
    assert status == 200 and cancelled["schedule"]["endReason"] == "unscheduled"
    status, missing = relay.owner.request("DELETE", "/api/v1/owner/schedules/sch_nosuch")
    assert status == 404 and missing["code"] == "REMOTE_RELAY_NOT_FOUND"
    entries = desk.ok("list_schedules")["schedules"]
    assert [(e["id"], e["endReason"]) for e in entries] == [(mine, "unscheduled"), (into_other, "unscheduled")]
    assert fire_due(relay, utcnow() + timedelta(days=1)) == {}
    # Ended more than an hour ago: no longer listed.
    later = utcnow() + timedelta(seconds=defaults.SCHEDULE_ENDED_LISTED_SECONDS + 5)
    with database.connection_context():
        assert schedules.listed_for(desk.session_id, later, defaults.SCHEDULE_ENDED_LISTED_SECONDS) == []


def test_archiving_or_deleting_the_target_or_the_setter_ends_schedules(relay: Relay, desk: Agent) -> None:
    target = relay.conversation("target")
    setter = relay.conversation("setter")
    into_target = desk.ok("schedule", text="t", every_minutes=30, session=target.session_id)["schedule_id"]
    by_setter = setter.ok("schedule", text="s", every_minutes=30, session=desk.session_id)["schedule_id"]
    relay.owner.post(f"/api/v1/owner/sessions/{target.session_id}/archive")
    relay.owner.request("DELETE", f"/api/v1/owner/sessions/{setter.session_id}")
    entries = {e["id"]: e for e in desk.ok("list_schedules")["schedules"]}
    assert entries[into_target]["endReason"] == "archived"
    assert entries[by_setter]["endReason"] == "deleted"
    assert fire_due(relay, utcnow() + timedelta(days=1)) == {}


def test_limits_of_20_into_a_conversation_and_20_set_for_others(relay: Relay, desk: Agent) -> None:
    for number in range(defaults.SCHEDULES_INTO_CONVERSATION):
        desk.ok("schedule", text=f"n{number}", every_minutes=60)
    refused = desk.refused("schedule", "REMOTE_RELAY_SCHEDULE_LIMIT", text="one more", every_minutes=60)
    assert refused["error"].endswith("Nothing was scheduled.")
    others = [relay.conversation(f"other {n}") for n in range(2)]
    for number in range(defaults.SCHEDULES_SET_FOR_OTHERS):
        desk.ok("schedule", text=f"o{number}", every_minutes=60, session=others[number % 2].session_id)
    third = relay.conversation("third")
    desk.refused("schedule", "REMOTE_RELAY_SCHEDULE_LIMIT", text="x", every_minutes=60, session=third.session_id)
    with database.connection_context():
        assert Schedule.select().count() == 40
        assert Schedule.select().where(Schedule.target == third.session_id).count() == 0


def test_with_agent_sessions_off_nothing_fires_and_a_missed_time_fires_once_when_back_on(
    relay: Relay, desk: Agent
) -> None:
    body = desk.ok("schedule", text="later", at=in_a_day(), every_minutes=60)
    due = parse(body["schedule"]["nextFireAt"])
    relay.settings(agent_sessions_enabled=False)
    assert fire_due(relay, due + timedelta(hours=3)) == {}
    assert listed(desk, body["schedule_id"])["firedCount"] == 0  # list_schedules still works
    desk.refused("schedule", "REMOTE_RELAY_LOCAL_DISABLED", text="no", every_minutes=5)
    relay.settings(agent_sessions_enabled=True)
    assert fire_due(relay, due + timedelta(hours=3, minutes=1)) == {"fired": 1}
    assert parse(listed(desk, body["schedule_id"])["nextFireAt"]) == due + timedelta(hours=4)


def test_many_workers_firing_the_same_due_time_fire_it_once(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="once only", at=in_a_day())
    schedule_id = body["schedule_id"]
    due = parse(body["schedule"]["nextFireAt"])
    outcomes: list[str] = []
    start = threading.Barrier(6)

    def worker(skew_seconds: int) -> None:
        start.wait()
        with database.connection_context():
            # Each "worker" has its own idea of the time; all of them are at or past the due time.
            outcomes.append(schedules.fire_one(relay.runtime, schedule_id, due + timedelta(seconds=skew_seconds)))

    threads = [threading.Thread(target=worker, args=(skew,)) for skew in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes).count("fired") == 1 and len(outcomes) == 6, outcomes
    assert set(outcomes) <= {"fired", "lost", "gone"}
    assert len(prompts(relay, desk.session_id)) == 1
    assert row(schedule_id).fired_count == 1


def test_a_job_of_an_earlier_version_fires_only_when_due_and_leaves_early_times_to_the_clock(
    relay: Relay, desk: Agent
) -> None:
    body = desk.ok("schedule", text="on time", at=in_a_day(), every_minutes=60)
    schedule_id = body["schedule_id"]
    due = parse(body["schedule"]["nextFireAt"])
    # RQ's scheduler no longer decides when a schedule fires: nothing is scheduled with it.
    registry = ScheduledJobRegistry(relay.config.namespace, connection=relay.runtime.redis)
    assert not any(job_id.startswith(schedule_id) for job_id in registry.get_job_ids())
    with database.connection_context():
        # Started early (as RQ's scheduler may): not fired; the clock's timer fires it.
        assert schedules.run_job(relay.runtime, schedule_id, lambda: due - timedelta(seconds=0.2)) == "early"
    assert row(schedule_id).fired_count == 0
    with database.connection_context():
        assert schedules.run_job(relay.runtime, schedule_id, lambda: due + timedelta(seconds=0.01)) == "fired"
    assert row(schedule_id).fired_count == 1


def test_cron_in_a_zone_is_scheduled_on_the_wall_clock(relay: Relay, desk: Agent) -> None:
    body = desk.ok("schedule", text="standup", cron="0 9 * * 1-5", tz="Europe/Berlin", title="standup")
    shown = body["schedule"]
    assert shown["cron"] == "0 9 * * 1-5" and shown["tz"] == "Europe/Berlin" and shown["everyMinutes"] is None
    assert 'cron "0 9 * * 1-5" Europe/Berlin' in body["summary"]
    due = parse(shown["nextFireAt"])
    assert due.minute == 0 and due.hour in (7, 8)  # 09:00 in Berlin, summer or winter
    assert fire_due(relay, due) == {"fired": 1}
    [message] = prompts(relay, desk.session_id)
    assert message.text.startswith(f'[relay schedule {body["schedule_id"]} "standup" · cron "0 9 * * 1-5" Europe/Berlin · ')
