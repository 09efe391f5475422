"""When schedules fire (docs/schedules.md#firing): the pure grid and cron functions, on named dates.

Daylight saving changes used (all verifiable in the tz database):
- Europe/Berlin: spring 2026-03-29 02:00 CET → 03:00 CEST (01:00 UTC);
  autumn 2026-10-25 03:00 CEST → 02:00 CET (01:00 UTC), so 02:00–02:59 happens twice.
- America/New_York: spring 2026-03-08 02:00 EST → 03:00 EDT (07:00 UTC);
  autumn 2026-11-01 02:00 EDT → 01:00 EST (06:00 UTC), so 01:00–01:59 happens twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from oar.schedules.schedule_grid import BadTiming, Timing, first_due, next_cron_time, next_due, normalise_cron, parse_at


def utc(*parts: int) -> datetime:
    return datetime(*parts)  # naive UTC, as the database stores times


def fires(expression: str, tz: str, start: datetime, count: int) -> list[datetime]:
    times, after = [], start
    for _ in range(count):
        after = next_cron_time(expression, tz, after)
        assert after is not None
        times.append(after)
    return times


# every_minutes and at ---------------------------------------------------------------------


def test_it_fires_every_interval_from_the_first_time() -> None:
    timing = Timing(anchor=utc(2026, 5, 1, 9, 0), every_seconds=3600)
    assert next_due(timing, utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 9, 0, 0, 400)) == utc(2026, 5, 1, 10, 0)


def test_it_fires_missed_times_once_and_keeps_its_grid_after_downtime() -> None:
    timing = Timing(anchor=utc(2026, 5, 1, 9, 0), every_seconds=3600)
    # Down from 9:30 to 13:17: the 10:00, 11:00, 12:00 and 13:00 firings are one firing at 13:17…
    assert next_due(timing, utc(2026, 5, 1, 10, 0), utc(2026, 5, 1, 13, 17)) == utc(2026, 5, 1, 14, 0)
    # …and a firing exactly on a grid point moves to the next one, never the same one again.
    assert next_due(timing, utc(2026, 5, 1, 14, 0), utc(2026, 5, 1, 14, 0)) == utc(2026, 5, 1, 15, 0)


def test_it_keeps_a_grid_of_odd_intervals_to_the_microsecond() -> None:
    anchor = utc(2026, 5, 1, 9, 0, 0, 123_000)
    timing = Timing(anchor=anchor, every_seconds=7 * 60)
    due = next_due(timing, anchor, anchor + timedelta(days=3, seconds=5))
    assert due is not None and due > anchor + timedelta(days=3, seconds=5)
    assert (due - anchor) % timedelta(minutes=7) == timedelta(0)


def test_at_alone_and_once_fire_one_time() -> None:
    at = utc(2026, 5, 1, 9, 0)
    assert next_due(Timing(anchor=at), at, at) is None
    assert next_due(Timing(anchor=at, every_seconds=60, once=True), at, at) is None
    assert next_due(Timing(anchor=at, cron="0 9 * * *", tz="UTC", once=True), at, at) is None


def test_the_first_time_is_at_else_one_interval_from_now_else_the_next_cron_time() -> None:
    now = utc(2026, 5, 1, 9, 0, 30)
    at = utc(2026, 5, 2, 0, 0)
    assert first_due(at=at, every_seconds=600, cron=None, tz=None, now=now) == at
    assert first_due(at=None, every_seconds=600, cron=None, tz=None, now=now) == utc(2026, 5, 1, 9, 10, 30)
    assert first_due(at=None, every_seconds=None, cron="0 9 * * *", tz="Europe/Berlin", now=now) == utc(2026, 5, 2, 7, 0)


def test_at_is_parsed_with_its_offset_or_in_the_zone_given() -> None:
    assert parse_at("2026-11-02T02:00:00Z", None) == utc(2026, 11, 2, 2, 0)
    assert parse_at("2026-11-02T03:00:00+01:00", None) == utc(2026, 11, 2, 2, 0)
    assert parse_at("2026-11-02T02:00:00", None) == utc(2026, 11, 2, 2, 0)
    assert parse_at("2026-07-01T09:00", "Europe/Berlin") == utc(2026, 7, 1, 7, 0)
    # A wall time skipped by the spring change counts as just after the change.
    assert parse_at("2026-03-29T02:30", "Europe/Berlin") == utc(2026, 3, 29, 1, 0)


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01T00:00:00Z", "", "2026-11-02 25:00", "12:00"])
def test_unparseable_times_are_refused(text: str) -> None:
    with pytest.raises(BadTiming, match="is not an ISO 8601 time"):
        parse_at(text, None)


@pytest.mark.parametrize("expression", ["61 * * * *", "* * * *", "0 0 * * * *", "every day", "0 25 * * *", "@often"])
def test_invalid_cron_expressions_are_refused(expression: str) -> None:
    with pytest.raises(BadTiming):
        normalise_cron(expression)


def test_cron_aliases_are_five_fields() -> None:
    assert normalise_cron("@daily") == "0 0 * * *"
    assert normalise_cron("  0   9 * *  1-5 ") == "0 9 * * 1-5"


@pytest.mark.parametrize("name", ["Mars/Olympus", "CET+1", "europe/berlin", "../etc/passwd", "Berlin"])
def test_unknown_zones_are_refused(name: str) -> None:
    with pytest.raises(BadTiming, match="is not an IANA time zone"):
        next_cron_time("0 9 * * *", name, utc(2026, 5, 1))


def test_a_cron_expression_that_never_fires_has_no_next_time() -> None:
    assert next_cron_time("0 0 30 2 *", "UTC", utc(2026, 1, 1)) is None
    with pytest.raises(BadTiming, match="never fires"):
        first_due(at=None, every_seconds=None, cron="0 0 30 2 *", tz="UTC", now=utc(2026, 1, 1))


# Cron in a zone: wall-clock time, and Debian cron's daylight-saving behaviour ------------------


def test_a_daily_job_follows_the_wall_clock_across_the_berlin_changes() -> None:
    # 09:00 Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    spring = fires("0 9 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 3)
    assert spring == [utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    autumn = fires("0 9 * * *", "Europe/Berlin", utc(2026, 10, 23, 12), 3)
    assert autumn == [utc(2026, 10, 24, 7), utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]


def test_a_daily_time_skipped_in_spring_fires_just_after_the_change_in_berlin() -> None:
    # 02:30 does not exist on 2026-03-29; the clock jumps from 02:00 to 03:00 CEST = 01:00 UTC.
    times = fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 3)
    assert times == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]


def test_a_daily_time_in_the_repeated_autumn_hour_fires_once_in_berlin() -> None:
    # 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET); the job runs at the first.
    times = fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 3)
    assert times == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]


def test_a_daily_time_skipped_in_spring_fires_just_after_the_change_in_new_york() -> None:
    # 02:15 does not exist on 2026-03-08; 03:00 EDT = 07:00 UTC.
    times = fires("15 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2)
    assert times == [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 15)]


def test_a_daily_time_in_the_repeated_autumn_hour_fires_once_in_new_york() -> None:
    # 01:30 happens at 05:30 UTC (EDT) and 06:30 UTC (EST) on 2026-11-01.
    times = fires("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert times == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_several_times_skipped_by_the_change_fire_once_just_after_it() -> None:
    times = fires("0,20,40 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 4)
    assert times[:3] == [utc(2026, 3, 28, 1, 0), utc(2026, 3, 28, 1, 20), utc(2026, 3, 28, 1, 40)]
    assert times[3] == utc(2026, 3, 29, 1, 0)
    assert next_cron_time("0,20,40 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 0)


def test_an_hourly_wildcard_job_runs_every_real_hour_through_both_changes() -> None:
    """Wildcard jobs run by the new time: none for the skipped hour, two in the repeated one."""
    spring = fires("0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 30), 3)
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]  # 01:00 CET, 03:00, 04:00 CEST
    autumn = fires("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 30), 4)
    assert autumn == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2), utc(2026, 10, 25, 3)]


def test_a_minutely_wildcard_job_in_new_york_keeps_running_through_the_autumn_change() -> None:
    times = fires("*/30 * * * *", "America/New_York", utc(2026, 11, 1, 5, 0), 4)
    assert times == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 7, 0)]


def test_a_cron_schedule_after_downtime_fires_once_and_resumes_on_its_times() -> None:
    timing = Timing(anchor=utc(2026, 5, 1, 7), cron="0 9 * * *", tz="Europe/Berlin")
    # Last due 1 May 07:00 UTC; the relay was down until 4 May 12:00 UTC: one firing now, then 5 May.
    assert next_due(timing, utc(2026, 5, 1, 7), utc(2026, 5, 4, 12)) == utc(2026, 5, 5, 7)
