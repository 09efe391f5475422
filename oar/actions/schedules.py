"""schedule, list_schedules and unschedule (docs/schedules.md#list_schedules).

Schedules exist only on this relay: `relay` may be omitted, and a paired relay is refused
with REMOTE_RELAY_UNSUPPORTED once relays can be paired (until then any other name is
REMOTE_RELAY_UNKNOWN, as for every action).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import cards, loop
from oar.core import defaults
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.fields import Param
from oar.core.models import Schedule, Session
from oar.core.shapes import RELAY, TITLE
from oar.core.timeutil import utcnow
from oar.schedules import schedule_grid, schedules
from oar.sessions import sessions
from oar.turns.turns import Provenance

SCHEDULED_NOTHING = "Nothing was scheduled."
UNSCHEDULED_NOTHING = "Nothing was unscheduled."


@action("schedule",
    params={
        "relay": RELAY,
        "text": Param("str", required=True, max_length=defaults.MAX_PROMPT_CHARS, description="the prompt to queue"),
        "at": Param("str", max_length=64, description='an ISO 8601 time, e.g. "2026-11-02T02:00:00Z"'),
        "every_minutes": Param(
            "int", minimum=1, maximum=defaults.SCHEDULE_EVERY_MINUTES_MAX, description="fire every this many minutes"
        ),
        "cron": Param("str", max_length=200, description='five cron fields, e.g. "0 9 * * 1-5"'),
        "tz": Param("str", max_length=64, description='an IANA time zone, e.g. "Europe/Berlin"'),
        "title": TITLE,
        "session": Param("str", max_length=64, description="a session id from list_sessions; default: this conversation"),
        "once": Param("bool", description="fire once, at the first time due, then end"),
    },
    level="full",
    writes=True,
    relay_optional=True,
    nothing=SCHEDULED_NOTHING,
)
def schedule(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Queue a prompt into this conversation or another session later, once or repeatedly."""
    caller = ctx.caller_session
    at, every_minutes, cron, tz = _timing_arguments(ctx, args)
    target = caller
    if args.get("session"):
        target = ctx.session(args["session"])
        if target.archived:
            raise not_found(f"Session {target.id[:8]} is archived.")
    into_other = target.id != caller.id
    _check_limits(caller, target)
    minute = ctx.runtime.time("SCHEDULE_MINUTE_SECONDS")
    every_seconds = every_minutes * minute if every_minutes else None
    try:
        first = schedule_grid.first_due(at=at, every_seconds=every_seconds, cron=cron, tz=tz, now=ctx.now)
    except schedule_grid.BadTiming as error:
        raise invalid(f"schedule: {error}.") from None
    title = (args.get("title") or "").strip() or sessions.title_from(args["text"])
    # Controlled like send: loop protection counts it once now and once per firing, and the
    # ask/plan-mode card is asked here, once; a firing has no turn and never asks (docs/schedules.md).
    cards.approve(ctx, cards.Request(
        action="schedule", nothing=SCHEDULED_NOTHING, target=target if into_other else None,
        excerpt=args["text"], counted=into_other, lines=(f'Schedule: "{title}" · {_card_timing(args)}',),
    ))
    if utcnow() - ctx.now > timedelta(seconds=1):  # the card took a while: the grid starts at the Allow
        first = schedule_grid.first_due(at=at, every_seconds=every_seconds, cron=cron, tz=tz, now=utcnow())
    # What the firings inherit (docs/schedules.md): the relay the setting turn came from, the caller's model and hops.
    turn_relay = Provenance.of(ctx.turn).relay if ctx.turn is not None else None
    origin = replace(ctx.provenance(), kind="schedule", relay=turn_relay)
    with write_transaction():
        row = Schedule.create(
            id=schedules.new_id(),
            target=target.id,
            set_by=caller.id,
            title=title,
            text=args["text"],
            at=at,
            every_minutes=every_minutes,
            cron=cron,
            tz=tz,
            once=bool(args.get("once")),
            anchor=first,
            every_seconds=every_seconds,
            due_at=first,
            next_fire_at=first,
            **origin.schedule_columns(),
            created_at=ctx.now,
        )
        if into_other:
            loop.count_prompt(caller)
    schedules.announce_due(ctx.runtime)
    view = schedules.view(row, caller.id)
    shown = {key: view[key] for key in ("id", "title", "everyMinutes", "once", "nextFireAt", "at", "cron", "tz", "session")}
    return {
        "summary": f"schedule → {ctx.relay_name}: {_cadence(row)}, next {view['nextFireAt']} ({row.id})"
        + (f" into session {target.id[:8]}" if into_other else ""),
        "schedule_id": row.id,
        "schedule": shown,
    }


def _timing_arguments(
    ctx: CallContext, args: dict[str, Any]
) -> tuple[datetime | None, int | None, str | None, str | None]:
    """(at, every_minutes, cron, tz), checked; raises INVALID_INPUT."""
    every_minutes = args.get("every_minutes")
    cron = args.get("cron")
    tz = args.get("tz")
    if not (args.get("at") or every_minutes or cron):
        raise invalid("schedule needs at (a time), every_minutes or cron.")
    if every_minutes and cron:
        raise invalid("schedule takes every_minutes or cron, not both: cron replaces every_minutes.")
    try:
        if tz is not None:
            tz = tz.strip()
            schedule_grid.zone(tz)
        if cron is not None:
            cron = schedule_grid.normalise_cron(cron)
        at = schedule_grid.parse_at(args["at"], tz) if args.get("at") else None
    except schedule_grid.BadTiming as error:
        raise invalid(f"schedule: {error}.") from None
    if at is not None and at <= ctx.now:
        raise invalid(
            f"schedule: at ({args['at'][:64]}) is in the past; it is now {ctx.now.isoformat(timespec='seconds')}Z."
        )
    return at, every_minutes, cron, tz


def _check_limits(caller: Session, target: Session) -> None:
    if schedules.active_into(target.id) >= defaults.SCHEDULES_INTO_CONVERSATION:
        raise ActionError(
            "REMOTE_RELAY_SCHEDULE_LIMIT",
            f"Session {target.id[:8]} already has {defaults.SCHEDULES_INTO_CONVERSATION} active schedules firing "
            f"into it; unschedule one first.",
        )
    if target.id != caller.id and schedules.active_set_for_others(caller.id) >= defaults.SCHEDULES_SET_FOR_OTHERS:
        raise ActionError(
            "REMOTE_RELAY_SCHEDULE_LIMIT",
            f"This conversation already has {defaults.SCHEDULES_SET_FOR_OTHERS} active schedules into other "
            f"sessions; unschedule one first.",
        )


def _card_timing(args: dict[str, Any]) -> str:
    timing = [f"at {args['at']}"] if args.get("at") else []
    if args.get("every_minutes"):
        timing.append(f"every {args['every_minutes']} min")
    if args.get("cron"):
        timing.append(f'cron "{args["cron"]}" {args.get("tz") or "UTC"}')
    return ", ".join(timing) + (" · once" if args.get("once") else "")


def _cadence(row: Schedule) -> str:
    if row.once or not (row.every_minutes or row.cron):
        return "once"
    if row.every_minutes:
        return f"every {row.every_minutes} min"
    return f'cron "{row.cron}" {row.tz or "UTC"}'


@action("list_schedules", params={"relay": RELAY}, level="read", relay_optional=True)
def list_schedules(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Schedules firing into this conversation or set by it, and those ended within the hour."""
    rows = schedules.listed_for(ctx.caller_session.id, ctx.now, ctx.runtime.time("SCHEDULE_ENDED_LISTED_SECONDS"))
    listed = [schedules.view(row, ctx.caller_session.id) for row in rows]
    active = sum(1 for entry in listed if entry["active"])
    return {
        "summary": f"list_schedules → {ctx.relay_name}: {active} active, {len(listed) - active} ended within the hour",
        "schedules": listed,
    }


@action("unschedule",
    params={"relay": RELAY, "schedule_id": Param("str", required=True, max_length=64, description="an id sch_…")},
    level="read",
    writes=True,
    relay_optional=True,
    nothing=UNSCHEDULED_NOTHING,
)
def unschedule(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """End a schedule firing into this conversation or set by it."""
    schedule_id = args["schedule_id"].strip()
    row = Schedule.get_or_none(
        (Schedule.id == schedule_id) & ((Schedule.target == ctx.caller_session.id) | (Schedule.set_by == ctx.caller_session.id))
    )
    if row is None:
        raise not_found(
            f'This conversation has no schedule "{schedule_id[:64]}" (firing into it or set by it).'
        )
    cards.approve(ctx, cards.Request(action="unschedule", nothing=UNSCHEDULED_NOTHING, lines=(f'Schedule: "{row.title}" ({row.id})',)))
    ended = schedules.unschedule(row.id, ctx.now)
    row = Schedule.get_by_id(row.id)
    result: dict[str, Any] = {
        "summary": f"unschedule → {ctx.relay_name}: {row.id} " + ("ended" if ended else f"had ended ({row.end_reason})"),
        "schedule_id": row.id,
        "schedule": schedules.view(row, ctx.caller_session.id),
    }
    if not ended:
        result["note"] = f"The schedule had already ended ({row.end_reason}); nothing changed."
    return result
