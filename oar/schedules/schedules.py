"""Schedules (docs/schedules.md#list_schedules): storing them, firing them once each, ending them, showing them.

The database is the truth: a schedule's `due_at` (indexed, UTC) says when the relay must
look at it next. Two paths fire it and either may win:
- the clock's due-time timer (`oar.engine.due_timer`) sleeps until the earliest `due_at`
  (`next_due_at`), woken by a signal whenever an earlier one is written, and fires what is
  due then (`fire_due`, never before: it compares `now` with `due_at`);
- the clock's sweeper (`fire_due` again, every reconcile period) fires whatever is overdue:
  after downtime, or a timer that missed its signal.
A firing claims the schedule with a conditional UPDATE on the `due_at` it read, so it
happens once however many timers, sweepers and clocks try, and whatever their clocks say.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from oar.approvals import loop
from oar.core import defaults, ids, metrics
from oar.core.db import write_transaction
from oar.core.models import Message, Schedule, Session
from oar.core.runtime import Runtime
from oar.core.statuses import OPEN_TURN, SCHEDULE_ENDED_WITH_SESSION, ScheduleEndReason, TurnStatus
from oar.core.timeutil import iso
from oar.schedules.schedule_grid import Timing, next_due
from oar.sessions import rules
from oar.turns import automated, turns

log = logging.getLogger(__name__)

def timing_of(schedule: Schedule) -> Timing:
    return Timing(
        anchor=schedule.anchor,
        every_seconds=schedule.every_seconds,
        cron=schedule.cron,
        tz=schedule.tz,
        once=schedule.once,
    )


def active_into(session_id: str) -> int:
    return Schedule.select().where((Schedule.target == session_id) & Schedule.ended_at.is_null()).count()


def active_set_for_others(session_id: str) -> int:
    return (
        Schedule.select()
        .where((Schedule.set_by == session_id) & (Schedule.target != session_id) & Schedule.ended_at.is_null())
        .count()
    )


# Telling the timer ------------------------------------------------------------------------


def announce_due(runtime: Runtime) -> None:
    """A due time was written (after commit): wake the clock's timer, which reads the earliest
    again. Without Redis the timer finds it within a reconcile period."""
    runtime.signal_due()


def next_due_at(after: datetime) -> datetime | None:
    """The earliest due time after `after` (those at or before it are being fired, or are the
    sweeper's: paused, failing)."""
    row = (
        Schedule.select(Schedule.due_at)
        .where(Schedule.due_at > after)
        .order_by(Schedule.due_at)
        .limit(1)
        .first()
    )
    return None if row is None else row.due_at


def run_job(runtime: Runtime, schedule_id: str, now_reader: Any) -> str:
    """The RQ job earlier versions enqueued at a due time (some may still be in Redis): fire
    the schedule if it is due; if early, leave it to the clock's timer."""
    schedule = Schedule.get_or_none(Schedule.id == schedule_id)
    if schedule is None or schedule.due_at is None:
        return "gone"
    if schedule.due_at > now_reader():
        announce_due(runtime)
        return "early"
    return fire_one(runtime, schedule_id, now_reader())


# Firing -------------------------------------------------------------------------------------


def header(schedule: Schedule, setter: Session) -> str:
    """The line every scheduled message starts with (docs/schedules.md), its middle parts as they apply."""
    parts = [f'[relay schedule {schedule.id} "{schedule.title}"']
    if schedule.every_minutes and not schedule.once:
        parts.append(f"every {schedule.every_minutes} min")
    if schedule.cron and not schedule.once:
        parts.append(f'cron "{schedule.cron}" {schedule.tz or "UTC"}')
    if schedule.set_by_id != schedule.target_id:
        parts.append(f'set by "{setter.title}" ({setter.id[:4]}…)')
    parts.append("automated message from OAR, not from the user; it approves nothing]")
    return " · ".join(parts)


def fire_due(
    runtime: Runtime, now: datetime, limit: int = defaults.SCHEDULE_SWEEP_BATCH, *, announce: bool = True
) -> Counter[str]:
    """Fire (or skip, or hold) every schedule due at `now`, oldest first, at most `limit`.
    `announce=False` for the timer itself, which reads the next due times afterwards."""
    outcomes: Counter[str] = Counter()
    if not runtime.settings()["agent_sessions_enabled"]:
        return outcomes  # nothing fires while agent sessions are off (docs/rules.md#agent-sessions-on-or-off)
    due = [
        row.id
        for row in Schedule.select(Schedule.id)
        .where(Schedule.due_at <= now)
        .order_by(Schedule.due_at)
        .limit(limit)
    ]
    for schedule_id in due:
        try:
            outcomes[fire_one(runtime, schedule_id, now, announce=announce)] += 1
        except Exception:  # one broken schedule must not stop the others from firing
            log.exception("schedule %s could not fire; trying again at the next sweep", schedule_id)
            outcomes["failed"] += 1
    return outcomes


class _ClaimLost(Exception):
    """Another worker or clock fired this due time first: roll back and do nothing."""


def fire_one(runtime: Runtime, schedule_id: str, now: datetime, *, announce: bool = True) -> str:
    """Fire the schedule's due time once: `fired`, `skipped`, `held`, `ended`, or, when
    there was nothing to do, `gone` / `early` / `paused` / `lost`."""
    schedule = Schedule.get_or_none(Schedule.id == schedule_id)
    if schedule is None or schedule.due_at is None:
        return "gone"
    if schedule.due_at > now:
        return "early"
    if not runtime.settings()["agent_sessions_enabled"]:
        # Switched off: nothing fires; the missed time fires once when it is back on (docs/rules.md#agent-sessions-on-or-off).
        return "paused"
    claimed_due = schedule.due_at
    started: Message | None = None
    try:
        # The firing's lag is how long it waits for the write lock (docs/decisions.md#write-lock-queue).
        with write_transaction():
            # The claim: only one transaction moves this schedule off the due time it read.
            claimed = (
                Schedule.update(due_at=None)
                .where((Schedule.id == schedule_id) & (Schedule.due_at == claimed_due) & Schedule.ended_at.is_null())
                .execute()
            )
            if claimed != 1:
                raise _ClaimLost
            schedule = Schedule.get_by_id(schedule_id)
            outcome, started = _fire_claimed(schedule, now, runtime.time("SCHEDULE_HOLD_RECHECK_SECONDS"))
    except _ClaimLost:
        return "lost"
    metrics.schedule_handled(outcome)  # fired, skipped, held or ended: a due time this process handled
    if started is not None:
        turns.start_turns(runtime, started.session_id)
    if announce:
        # The next due time may be earlier than what the timer sleeps for (a sweep fired it).
        announce_due(runtime)
    return outcome


def _fire_claimed(schedule: Schedule, now: datetime, recheck_seconds: float) -> tuple[str, Message | None]:
    """Inside the claiming transaction: decide, write the message and the schedule's next time."""
    target = Session.get_by_id(schedule.target_id)
    setter = Session.get_by_id(schedule.set_by_id)
    for session in (target, setter):
        if session.archived or session.deleted:
            _end(schedule.id, ScheduleEndReason.DELETED if session.deleted else ScheduleEndReason.ARCHIVED, now)
            return "ended", None
    into_other = target.id != setter.id
    if into_other and loop.used_up(setter):
        # Loop protection used up: hold this firing until the owner writes in the setting
        # conversation (or allows its card); look again every minute (docs/schedules.md).
        recheck = now + timedelta(seconds=recheck_seconds)
        Schedule.update(due_at=recheck, held_since=schedule.held_since or now).where(
            Schedule.id == schedule.id
        ).execute()
        return "held", None
    fire_time = schedule.next_fire_at or now
    following = next_due(timing_of(schedule), fire_time, now)
    changes: dict[str, Any] = {
        "due_at": following,
        "next_fire_at": following,
        "held_since": None,
    }
    if following is None:
        changes.update(ended_at=now, end_reason=ScheduleEndReason.FIRED)
    skip = _skip_reason(schedule, target, setter)
    message = None
    if skip:
        changes["skipped_count"] = Schedule.skipped_count + 1
        log.info("schedule %s skipped: %s", schedule.id, skip)
    else:
        text = f"{header(schedule, setter)}\n{schedule.text}"
        message = automated.insert(target, text, turns.Provenance.of_firing(schedule, setter))
        if into_other:
            loop.count_prompt(setter)
        changes.update(
            last_fired_at=now, fired_count=Schedule.fired_count + 1, last_message_id=message.id
        )
    Schedule.update(**changes).where(Schedule.id == schedule.id).execute()
    return ("skipped" if skip else "fired"), message


def _skip_reason(schedule: Schedule, target: Session, setter: Session) -> str | None:
    """No pile-up, and at most 4 sessions at work per conversation (docs/rules.md#at-most-4-at-work, docs/schedules.md)."""
    if schedule.last_message_id:
        previous = Message.get_or_none(Message.id == schedule.last_message_id)
        if previous is not None and previous.status == TurnStatus.QUEUED:
            return "the previous firing's message is still queued"
    if target.created_by_session == setter.id:
        busy = Message.select().where((Message.session == target.id) & Message.status.in_(OPEN_TURN)).exists()
        if not busy and len(rules.busy_sessions_started_by(setter)) >= defaults.MAX_ACTIVE_SESSIONS:
            return f"{defaults.MAX_ACTIVE_SESSIONS} sessions the setting conversation started are at work"
    return None


def release_held(runtime: Runtime, setter_id: str, now: datetime) -> int:
    """The owner wrote in the setting conversation: its held firings are due again now."""
    with write_transaction():
        held = [
            row.id
            for row in Schedule.select(Schedule.id).where(
                (Schedule.set_by == setter_id) & Schedule.held_since.is_null(False) & Schedule.ended_at.is_null()
            )
        ]
        if held:
            Schedule.update(due_at=now).where(Schedule.id.in_(held) & Schedule.ended_at.is_null()).execute()
    if held:
        announce_due(runtime)
    return len(held)


# Ending -------------------------------------------------------------------------------------


def _end(schedule_id: str, reason: ScheduleEndReason, now: datetime) -> int:
    return (
        Schedule.update(ended_at=now, end_reason=reason, due_at=None, next_fire_at=None, held_since=None)
        .where((Schedule.id == schedule_id) & Schedule.ended_at.is_null())
        .execute()
    )


def unschedule(schedule_id: str, now: datetime) -> bool:
    """End a schedule by hand (the action, or the page's ⏰ list Cancel); False if it had ended."""
    with write_transaction():
        return _end(schedule_id, ScheduleEndReason.UNSCHEDULED, now) == 1


def end_for_session(session_id: str, reason: ScheduleEndReason, now: datetime) -> int:
    """The session was archived or deleted: end schedules set by it or into it (inside the
    caller's transaction)."""
    if reason not in SCHEDULE_ENDED_WITH_SESSION:
        raise ValueError(f"a session's end does not end schedules as {reason}")
    return (
        Schedule.update(ended_at=now, end_reason=reason, due_at=None, next_fire_at=None, held_since=None)
        .where(((Schedule.target == session_id) | (Schedule.set_by == session_id)) & Schedule.ended_at.is_null())
        .execute()
    )


# Showing ------------------------------------------------------------------------------------


def listed_for(session_id: str | None, now: datetime, ended_listed_seconds: float) -> list[Schedule]:
    """Active schedules and those ended within the hour; with `session_id`, only those firing
    into that conversation or set by it."""
    recent = now - timedelta(seconds=ended_listed_seconds)
    query = Schedule.select().where(Schedule.ended_at.is_null() | (Schedule.ended_at >= recent))
    if session_id is not None:
        query = query.where((Schedule.target == session_id) | (Schedule.set_by == session_id))
    return list(query.order_by(Schedule.created_at))


def view(schedule: Schedule, viewer_id: str | None = None) -> dict[str, Any]:
    """A schedule as list_schedules and the owner's page show it (docs/schedules.md#list_schedules)."""
    target = Session.get_by_id(schedule.target_id)
    entry: dict[str, Any] = {
        "id": schedule.id,
        "session": {"id": target.id, "title": target.title},
    }
    if schedule.set_by_id != viewer_id:
        setter = Session.get_by_id(schedule.set_by_id)
        entry["setBy"] = {"id": setter.id, "title": setter.title}
    entry.update(
        title=schedule.title,
        text=schedule.text[: defaults.SCHEDULE_TEXT_LISTED_CHARS],
        at=iso(schedule.at),
        everyMinutes=schedule.every_minutes,
        cron=schedule.cron,
        tz=schedule.tz,
        once=schedule.once,
        nextFireAt=iso(schedule.next_fire_at),
        lastFiredAt=iso(schedule.last_fired_at),
        firedCount=schedule.fired_count,
        skippedCount=schedule.skipped_count,
        heldForApproval=schedule.held_since is not None,
        heldSince=iso(schedule.held_since),
        active=schedule.ended_at is None,
    )
    if schedule.ended_at is not None:
        entry.update(endReason=schedule.end_reason, endedAt=iso(schedule.ended_at))
    return entry


def new_id() -> str:
    return ids.prefixed_id("sch")


def active_soonest_first() -> list[Schedule]:
    """Every active schedule, the next to fire first (the owner's ⏰ list)."""
    return list(Schedule.select().where(Schedule.ended_at.is_null()).order_by(Schedule.next_fire_at, Schedule.created_at))
