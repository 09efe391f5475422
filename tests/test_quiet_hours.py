"""Quiet hours on named dates across clock changes (docs/events.md#quiet-hours). Times are naive UTC."""

from __future__ import annotations

from datetime import datetime

import pytest

from oar.watching.quiet_hours import BadQuietHours, QuietHours, parse, release_time, window_around


def quiet(start: str, end: str, tz: str) -> QuietHours:
    checked = parse({"from": start, "to": end, "tz": tz})
    assert checked is not None
    return checked


def test_it_ends_a_berlin_window_crossing_midnight_at_six_local() -> None:
    window = quiet("23:00", "06:00", "Europe/Berlin")
    assert window_around(window, datetime(2026, 1, 14, 23, 30)) == (datetime(2026, 1, 14, 22, 0), datetime(2026, 1, 15, 5, 0))
    assert release_time(window, datetime(2026, 1, 15, 6, 0)) == datetime(2026, 1, 15, 6, 0)


def test_it_ends_at_the_jump_when_berlin_springs_past_to() -> None:
    window = quiet("01:00", "02:30", "Europe/Berlin")  # 02:30 does not exist on 29 March 2026
    assert release_time(window, datetime(2026, 3, 29, 0, 30)) == datetime(2026, 3, 29, 1, 0)


def test_a_berlin_window_containing_the_spring_change_is_an_hour_shorter() -> None:
    window = quiet("23:00", "06:00", "Europe/Berlin")
    assert window_around(window, datetime(2026, 3, 29, 1, 0)) == (datetime(2026, 3, 28, 22, 0), datetime(2026, 3, 29, 4, 0))


def test_it_ends_at_the_first_pass_when_berlin_repeats_to_in_autumn() -> None:
    window = quiet("00:00", "02:30", "Europe/Berlin")  # 02:30 happens twice on 25 October 2026
    assert release_time(window, datetime(2026, 10, 24, 23, 0)) == datetime(2026, 10, 25, 0, 30)
    assert release_time(window, datetime(2026, 10, 25, 0, 45)) == datetime(2026, 10, 25, 0, 45)


def test_new_york_spring_and_autumn() -> None:
    window = quiet("22:00", "07:00", "America/New_York")
    assert release_time(window, datetime(2026, 3, 8, 5, 0)) == datetime(2026, 3, 8, 11, 0)  # 07:00 EDT
    assert release_time(window, datetime(2026, 11, 1, 5, 0)) == datetime(2026, 11, 1, 12, 0)  # 07:00 EST


def test_a_from_inside_the_repeated_hour_starts_at_the_first_pass_known_limit() -> None:
    window = quiet("01:30", "05:00", "America/New_York")  # 01:00–02:00 happens twice on 1 Nov 2026
    assert window_around(window, datetime(2026, 11, 1, 5, 40)) is not None  # 01:40 EDT, first pass
    assert window_around(window, datetime(2026, 11, 1, 6, 10)) is None  # 01:10 EST, second pass before from
    assert window_around(window, datetime(2026, 11, 1, 6, 40)) is not None  # 01:40 EST


def test_lord_howe_half_hour_shift() -> None:
    window = quiet("01:00", "02:15", "Australia/Lord_Howe")  # 02:00→02:30 on 4 October 2026
    # 01:30 local (+10:30) = 15:00 UTC the day before; the window ends at the jump, 15:30 UTC.
    assert release_time(window, datetime(2026, 10, 3, 15, 0)) == datetime(2026, 10, 3, 15, 30)
    autumn = quiet("00:00", "01:45", "Australia/Lord_Howe")  # 02:00→01:30 on 5 April 2026
    # 01:45 first pass is +11:00: 14:45 UTC on 4 April.
    assert release_time(autumn, datetime(2026, 4, 4, 14, 0)) == datetime(2026, 4, 4, 14, 45)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"from": "24:00", "to": "06:00", "tz": "UTC"}, 'quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)'),
        ({"from": "06:00", "to": "06:00", "tz": "UTC"}, "quiet_hours from and to must differ"),
        ({"from": "23:00", "to": "06:00", "tz": "Berlin"},
         'quiet_hours tz "Berlin" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")'),
        ({"from": "23:00", "to": "06:00"}, "quiet_hours needs from, to and tz"),
    ],
)
def test_it_refuses_bad_quiet_hours_with_the_spec_sentences(value: dict[str, str], message: str) -> None:
    with pytest.raises(BadQuietHours) as raised:
        parse(value)
    assert str(raised.value) == message


def test_all_fields_empty_counts_as_absent() -> None:
    assert parse({"from": "", "to": "", "tz": ""}) is None
