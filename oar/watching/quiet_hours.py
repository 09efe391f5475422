"""Quiet hours (docs/events.md#quiet-hours): a daily window in the local time of an IANA zone.

Pure arithmetic on aware UTC instants; nothing here reads the clock. The window runs from
`from` to `to` local time and may cross midnight. Clock changes follow the documented rules:
- autumn (a repeated hour): a `to` that occurs twice ends the window at its first pass;
  a `from` that occurs twice starts it at its first pass, and on the second pass the
  minutes before `from` count as outside (the documented known limit);
- spring (a skipped hour): a `to` inside the gap ends the window at the jump; a `from`
  inside the gap starts it at the jump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

TIME_OF_DAY = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")

MESSAGE_TIMES = 'quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)'
MESSAGE_DIFFER = "quiet_hours from and to must differ"
MESSAGE_NEEDS = "quiet_hours needs from, to and tz"


def message_zone(tz: str) -> str:
    return f'quiet_hours tz "{tz}" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")'


class BadQuietHours(ValueError):
    """The docs/events.md#subscriptions sentence that says what is wrong."""


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time
    tz: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def text(self) -> str:
        """`23:00–06:00 Europe/Berlin`, as event messages and cards show it."""
        return f"{self.start:%H:%M}–{self.end:%H:%M} {self.tz}"

    def as_dict(self) -> dict[str, str]:
        return {"from": f"{self.start:%H:%M}", "to": f"{self.end:%H:%M}", "tz": self.tz}


def parse(value: dict[str, object]) -> QuietHours | None:
    """Checked quiet hours from `{from, to, tz}`; None when every field is empty."""
    fields = {key: value.get(key) for key in ("from", "to", "tz")}
    if all(item in (None, "") for item in fields.values()):
        return None
    if any(not isinstance(item, str) or not item.strip() for item in fields.values()):
        raise BadQuietHours(MESSAGE_NEEDS)
    start_text, end_text, tz = (str(fields[key]).strip() for key in ("from", "to", "tz"))
    start, end = TIME_OF_DAY.match(start_text), TIME_OF_DAY.match(end_text)
    if start is None or end is None:
        raise BadQuietHours(MESSAGE_TIMES)
    if start_text == end_text:
        raise BadQuietHours(MESSAGE_DIFFER)
    if not is_zone(tz):
        raise BadQuietHours(message_zone(tz[:64]))
    return QuietHours(time(int(start[1]), int(start[2])), time(int(end[1]), int(end[2])), tz)


def is_zone(name: str) -> bool:
    """Only names of the IANA list (no file paths, no POSIX TZ strings)."""
    if name not in available_timezones() and name != "UTC":
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _to_utc(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The first instant the local clock shows `day at`; in a gap, the jump itself."""
    first = datetime.combine(day, at, tzinfo=zone).astimezone(UTC)  # fold=0: the first pass
    if first.astimezone(zone).replace(tzinfo=None) == datetime.combine(day, at):
        return first
    # Nonexistent (the clock jumped over it): find the jump between the two readings.
    low = datetime.combine(day, at, tzinfo=zone).replace(fold=1).astimezone(UTC)
    high = first
    if low > high:
        low, high = high, low
    before = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0)


def window_around(quiet: QuietHours, instant: datetime) -> tuple[datetime, datetime] | None:
    """The (start, end) of the quiet window holding `instant` (naive UTC, as stored), or None."""
    zone = quiet.zone
    naive = instant.tzinfo is None
    instant = instant.replace(tzinfo=UTC) if naive else instant
    local = instant.astimezone(zone)
    crosses = quiet.end <= quiet.start
    for start_day in (local.date() - timedelta(days=1), local.date()):
        end_day = start_day + timedelta(days=1) if crosses else start_day
        start = _to_utc(start_day, quiet.start, zone)
        end = _to_utc(end_day, quiet.end, zone)
        if not start <= instant < end:
            continue
        if local.fold == 1 and start_day == local.date() and local.time() < quiet.start:
            return None  # the second pass of a repeated hour, before `from` (known limit)
        if naive:
            return start.replace(tzinfo=None), end.replace(tzinfo=None)
        return start, end
    return None


def release_time(quiet: QuietHours | None, due: datetime) -> datetime:
    """When something due at `due` may be delivered: `due`, or the end of its quiet window."""
    if quiet is None:
        return due
    window = window_around(quiet, due)
    return due if window is None else window[1]
