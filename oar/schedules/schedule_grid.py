"""When a schedule fires: pure functions of the schedule's timing, its last due time and `now`.

Times are naive UTC datetimes, as the database stores them. Three kinds of timing (docs/schedules.md#firing):
- `at` alone fires once;
- `every_minutes` keeps a grid `anchor + k × interval` (the anchor is `at`, else the time
  the schedule was set plus one interval); times missed while the relay was down fire
  once, and the next time is the first grid point after `now`;
- `cron` (+ `tz`, an IANA zone) is evaluated in the zone's wall-clock time and converted
  to UTC, with the daylight-saving behaviour of Debian's cron: a fixed-time job (no `*` in
  its minute or hour field) whose time is skipped by the spring change fires just after
  the change, and fires once in the repeated autumn hour; wildcard jobs run by the new
  time (skipped wall times don't exist, repeated ones happen twice).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

# How far around a time to look for cron candidates: more than any DST shift (≤ 2 h).
DST_SLACK = timedelta(hours=3)
# Cron expressions that can never fire (30 February) are searched this far at most.
CRON_SEARCH_STEPS = 2_000

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class BadTiming(ValueError):
    """A timing the relay cannot use; the message says what was wrong."""


@dataclass(frozen=True)
class Timing:
    """What a schedule's times depend on. `anchor` is its first due time."""

    anchor: datetime
    every_seconds: float | None = None
    cron: str | None = None
    tz: str | None = None
    once: bool = False

    @property
    def recurring(self) -> bool:
        return not self.once and (self.every_seconds is not None or self.cron is not None)


@functools.cache
def known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def zone(name: str) -> ZoneInfo:
    """An IANA zone by its exact name (`Europe/Berlin`, `UTC`); anything else is refused."""
    if name not in known_zones():
        raise BadTiming(f'"{name[:64]}" is not an IANA time zone (for example "Europe/Berlin" or "UTC")')
    return ZoneInfo(name)


def normalise_cron(expression: str) -> str:
    """Five cron fields (or an @alias), checked; raises BadTiming."""
    text = " ".join(expression.split())
    text = CRON_ALIASES.get(text.lower(), text)
    if len(text.split(" ")) != 5:
        raise BadTiming(f'"{expression[:100]}" is not a cron expression of five fields (minute hour day month weekday)')
    try:
        valid = croniter.is_valid(text)
    except (CroniterError, ValueError):
        valid = False
    if not valid:
        raise BadTiming(f'"{expression[:100]}" is not a valid cron expression')
    return text


def parse_at(text: str, tz: str | None) -> datetime:
    """An ISO 8601 time as naive UTC; without an offset it is in `tz`, else in UTC."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadTiming(f'"{text[:64]}" is not an ISO 8601 time such as "2026-11-02T02:00:00Z"') from None
    if moment.tzinfo is None:
        moment = _localised(moment, zone(tz)) if tz else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(tzinfo=None)


def first_due(
    *, at: datetime | None, every_seconds: float | None, cron: str | None, tz: str | None, now: datetime
) -> datetime:
    """The first due time of a new schedule (docs/schedules.md#firing): `at`, else one interval from now,
    else the first cron time after now."""
    if at is not None:
        return at
    if every_seconds is not None:
        return now + timedelta(seconds=every_seconds)
    if cron is not None:
        due = next_cron_time(cron, tz or "UTC", now)
        if due is None:
            raise BadTiming(f'the cron expression "{cron}" never fires')
        return due
    raise BadTiming("give at, every_minutes or cron")


def next_due(timing: Timing, last_due: datetime, now: datetime) -> datetime | None:
    """The due time after a firing (or skip) of `last_due` at `now`; None when it has ended.

    Strictly after both: times missed while the relay was down are not made up for.
    """
    if not timing.recurring:
        return None
    after = max(last_due, now)
    if timing.every_seconds is not None:
        interval = timing.every_seconds
        steps = math.floor((after - timing.anchor).total_seconds() / interval) + 1
        due = timing.anchor + timedelta(seconds=steps * interval)
        while due <= after:  # float rounding at the boundary
            due += timedelta(seconds=interval)
        return due
    if timing.cron is None:
        raise ValueError("a schedule's timing needs every_seconds or cron")
    return next_cron_time(timing.cron, timing.tz or "UTC", after)


def next_cron_time(expression: str, tz: str, after: datetime) -> datetime | None:
    """The first time strictly after `after` (naive UTC) that the cron job runs in zone `tz`."""
    local = zone(tz)
    fixed = _is_fixed_time(expression)
    wall_after = after.replace(tzinfo=UTC).astimezone(local).replace(tzinfo=None)
    candidates = croniter(expression, wall_after - DST_SLACK)
    best: datetime | None = None
    try:
        for _ in range(CRON_SEARCH_STEPS):
            wall = candidates.get_next(datetime)
            instants = _instants(wall, local, fixed)
            if not instants:
                continue
            if best is not None and min(instants) > best:
                return best  # UTC instants only grow with wall time from here on
            for instant in instants:
                if instant > after and (best is None or instant < best):
                    best = instant
    except CroniterBadDateError:
        pass
    return best


def _is_fixed_time(expression: str) -> bool:
    """Debian's cron: only jobs with no `*` in the minute or hour field are DST-adjusted."""
    minute, hour = expression.split(" ")[:2]
    return "*" not in minute and "*" not in hour


def _instants(wall: datetime, local: ZoneInfo, fixed: bool) -> list[datetime]:
    """The UTC instants at which wall-clock time `wall` happens in `local` (for a cron job)."""
    earlier = wall.replace(tzinfo=local, fold=0).astimezone(UTC).replace(tzinfo=None)
    later = wall.replace(tzinfo=local, fold=1).astimezone(UTC).replace(tzinfo=None)
    if _exists(wall, local):
        if earlier == later or fixed:
            return [earlier]  # a repeated hour runs a fixed-time job once, in its first pass
        return [earlier, later]
    if not fixed:
        return []  # a wildcard job runs by the new time: this wall time never happens
    return [_end_of_gap(wall, local)]


def _exists(wall: datetime, local: ZoneInfo) -> bool:
    aware = wall.replace(tzinfo=local)
    return aware.astimezone(UTC).astimezone(local).replace(tzinfo=None) == wall


def _end_of_gap(wall: datetime, local: ZoneInfo) -> datetime:
    """The first instant after the spring change that skipped `wall` (in UTC)."""
    probe = wall.replace(second=0, microsecond=0)
    for _ in range(24 * 60):
        probe += timedelta(minutes=1)
        if _exists(probe, local):
            # Minute steps land on the change itself for every zone with whole-minute offsets.
            return probe.replace(tzinfo=local).astimezone(UTC).replace(tzinfo=None)
    raise AssertionError(f"no end of the DST gap after {wall} in {local}")


def _localised(wall: datetime, local: ZoneInfo) -> datetime:
    """Wall time in a zone as an aware time; a skipped time counts as just after the change."""
    if _exists(wall, local):
        return wall.replace(tzinfo=local, fold=0)
    return _end_of_gap(wall, local).replace(tzinfo=UTC)

