"""The pure delivery decisions (docs/events.md#quiet-hours): windows, urgency, the hourly cap, digests, quiet hours."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from oar.watching import delivery
from oar.watching.quiet_hours import parse
from tests.support.product_probes import wakeups_in_hour

T0 = datetime(2026, 6, 1, 12, 0)
TIMING = delivery.Timing()


def test_it_opens_a_window_and_the_next_event_joins_it() -> None:
    rules = [delivery.Rules("sub_a", T0)]
    due, reason, _ = delivery.due_for(rules, "turn_end", T0, [], 0, TIMING)
    assert (due, reason) == (T0 + timedelta(seconds=30), delivery.WINDOW)
    held = [delivery.Held(1, due, reason)]
    assert delivery.due_for(rules, "turn_end", T0 + timedelta(seconds=10), held, 0, TIMING)[0] == due


def test_urgent_events_come_at_once_and_take_the_window_along() -> None:
    held = [delivery.Held(1, T0 + timedelta(seconds=30), delivery.WINDOW)]
    due, reason, _ = delivery.due_for([delivery.Rules("sub_a", T0)], "error", T0, held, 99, TIMING)
    assert (due, reason) == (T0, delivery.URGENT)
    assert [h.key for h in delivery.batch([*held, delivery.Held(2, T0, reason, True)], T0)] == [1, 2]


def test_over_twenty_wakeups_an_hour_the_rest_come_every_ten_minutes() -> None:
    due, reason, _ = delivery.due_for([delivery.Rules("sub_a", T0)], "turn_end", T0, [], 20, TIMING)
    assert (due, reason) == (T0 + timedelta(minutes=10), delivery.CAP)


def test_digest_minutes_and_quiet_hours_and_the_first_subscription_that_lets_it_through() -> None:
    digest = delivery.Rules("sub_d", T0, digest_minutes=30)
    assert delivery.due_for([digest], "turn_end", T0, [], 0, TIMING)[:2] == (T0 + timedelta(minutes=30), delivery.DIGEST)
    night = delivery.Rules("sub_q", T0, quiet=parse({"from": "11:00", "to": "15:00", "tz": "UTC"}))
    assert delivery.due_for([night], "turn_end", T0, [], 0, TIMING)[:2] == (datetime(2026, 6, 1, 15, 0), delivery.QUIET)
    plain = delivery.Rules("sub_p", T0)
    assert delivery.due_for([digest, night, plain], "turn_end", T0, [], 0, TIMING)[2] == "sub_p"
    assert delivery.due_for([night], "question_asked", T0, [], 0, TIMING)[:2] == (T0, delivery.URGENT)


def test_the_digest_line_reads_like_the_spec() -> None:
    rules = delivery.Rules("sub_d", T0, digest_minutes=30)
    assert delivery.digest_line(4, {delivery.DIGEST}, [rules], None) == (
        "Digest of 4 events (subscription sub_d every 30 min; questions and errors come at once):"
    )
    assert delivery.digest_line(1, {delivery.DIGEST}, [rules], None) is None
    quiet = parse({"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"})
    assert delivery.digest_line(3, {delivery.QUIET}, [], quiet) == (
        "Held during quiet hours (23:00–06:00 Europe/Berlin): 3 events, delivered now that the window has "
        "ended; questions and errors came at once."
    )


kinds = st.sampled_from(delivery.EVENT_KINDS)
options = st.builds(
    lambda digest, quiet_start: delivery.Rules(
        "sub_x", T0, digest_minutes=digest,
        quiet=parse({"from": f"{quiet_start:02d}:00", "to": f"{(quiet_start + 3) % 24:02d}:00", "tz": "Europe/Berlin"})
        if quiet_start is not None else None,
    ),
    st.none() | st.integers(1, 120),
    st.none() | st.integers(0, 23),
)


def test_a_long_delivery_lists_its_first_lines_and_counts_the_rest_by_kind() -> None:
    bundle = delivery.Piece([("turn_end", f"end {n}") for n in range(5)], kinds={"turn_end": 5})
    error, idle = delivery.Piece([("error", "boom")], always=True), delivery.Piece([("all_idle", "idle")], always=True)
    pieces = [bundle, error, delivery.Piece([("task_finished", "task")]), idle]
    assert delivery.listed_lines(pieces, 8) == [f"end {n}" for n in range(5)] + ["boom", "task", "idle"]
    # Urgent and engine lines are listed whatever the room; the others fill what is left in order.
    assert delivery.listed_lines(pieces, 4) == [
        "end 0", "end 1", "boom", "idle",
        "[relay event] … and 4 more events not listed (turn_end 3, task_finished 1): list_sessions and "
        "read_session show where their sessions stand.",
    ]
    # Counted from the lines when a piece does not give its kinds.
    mixed = delivery.Piece([("turn_end", "a"), ("task_failed", "b"), ("turn_end", "c")])
    assert delivery.listed_lines([mixed], 2)[-1].startswith("[relay event] … and 1 more event not listed (turn_end 1)")
    assert delivery.listed_lines([error] * 3, 1) == ["boom"] * 3


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7200), kinds), max_size=40), st.lists(options, min_size=1, max_size=3))
def test_no_event_is_lost_or_delivered_twice(stream: list[tuple[int, str]], subscriptions: list[delivery.Rules]) -> None:
    """Random event streams and options, delivered by stepping time: each event exactly once,
    never before it arrived, urgent ones at once."""
    arrivals = sorted(stream)
    held: list[delivery.Held] = []
    delivered: dict[int, datetime] = {}
    wakeups: list[datetime] = []
    moments = sorted({T0 + timedelta(seconds=s) for s, _ in arrivals})

    def deliver_until(limit: datetime) -> None:
        while held and (nxt := delivery.next_due(held)) is not None and nxt <= limit:
            for item in delivery.batch(held, nxt):
                assert item.key not in delivered
                delivered[item.key] = nxt
                held.remove(item)
            wakeups.append(nxt)

    for key, (offset, kind) in enumerate(arrivals):
        now = T0 + timedelta(seconds=offset)
        deliver_until(now)
        count = wakeups_in_hour(wakeups, now, TIMING)
        due, reason, _ = delivery.due_for(subscriptions, kind, now, held, count, TIMING)
        assert due >= now
        held.append(delivery.Held(key, due, reason, kind in delivery.URGENT_KINDS))
        deliver_until(now if kind in delivery.URGENT_KINDS else now - timedelta(microseconds=1))
        if kind in delivery.URGENT_KINDS:
            assert delivered[key] == now
    deliver_until(datetime.max)
    assert sorted(delivered) == list(range(len(arrivals)))
    assert moments == [] or min(delivered.values(), default=moments[0]) >= moments[0]


def test_only_the_turn_end_of_an_event_started_turn_wakes_no_watcher() -> None:
    # docs/events.md#watchers-that-wake-each-other
    assert not delivery.wakes_watchers("turn_end", "event")
    for started_by in ("user", "agent", "schedule", None):
        assert delivery.wakes_watchers("turn_end", started_by)
    for kind in ("error", "question_asked", "question_answered", "task_failed", "stalled"):
        assert delivery.wakes_watchers(kind, "event")


def test_events_are_read_up_to_a_gap_that_may_still_commit() -> None:
    from datetime import datetime, timedelta

    from oar.core.models import Event
    from oar.watching.ingest import committed_in_order

    now = datetime(2026, 11, 30, 12, 0, 0)
    grace = timedelta(seconds=10)

    def event(seq: int, age: float) -> Event:
        return Event(seq=seq, session="s", kind="turn_end", payload={}, created_at=now - timedelta(seconds=age))

    fresh = [event(11, 1), event(12, 1), event(14, 1), event(15, 1)]
    # 13 may belong to a transaction that has not committed: stop before it.
    assert [e.seq for e in committed_in_order(10, fresh, now, grace)] == [11, 12]
    # A gap right after the cursor holds back everything behind it.
    assert committed_in_order(10, [event(12, 1)], now, grace) == []
    # A gap older than the grace is a rolled-back insert: read on.
    old = [event(11, 30), event(13, 30), event(14, 1)]
    assert [e.seq for e in committed_in_order(10, old, now, grace)] == [11, 13, 14]
    # Nothing read yet: the numbering may start anywhere.
    assert [e.seq for e in committed_in_order(0, [event(500, 1), event(501, 1)], now, grace)] == [500, 501]


# Heartbeats and stalls: pure decisions ------------------------------------------------------------

FIVE_MINUTES = 300.0


def test_heartbeats_follow_the_grid_from_the_subscription_and_skip_quiet_hours() -> None:
    assert delivery.heartbeat_after(T0, FIVE_MINUTES, T0, None) == T0 + timedelta(minutes=5)
    assert delivery.heartbeat_after(T0, FIVE_MINUTES, T0 + timedelta(minutes=5), None) == T0 + timedelta(minutes=10)
    # A relay that was down for an hour: the next grid point after now, not one per missed time.
    assert delivery.heartbeat_after(T0, FIVE_MINUTES, T0 + timedelta(minutes=61), None) == T0 + timedelta(minutes=65)
    # No heartbeats inside the window (docs/events.md#delivery): the first grid point at or after its end.
    quiet = parse({"from": "12:20", "to": "13:02", "tz": "UTC"})
    assert delivery.heartbeat_after(T0, FIVE_MINUTES, T0 + timedelta(minutes=16), quiet) == datetime(2026, 6, 1, 13, 5)
    assert delivery.heartbeat_after(T0, FIVE_MINUTES, T0 + timedelta(minutes=16), None) == datetime(2026, 6, 1, 12, 20)
    # A heartbeat whose time has come is made only outside the window.
    assert delivery.heartbeat_wanted(datetime(2026, 6, 1, 12, 15), datetime(2026, 6, 1, 12, 19), quiet)
    assert not delivery.heartbeat_wanted(datetime(2026, 6, 1, 12, 15), datetime(2026, 6, 1, 12, 21), quiet)
    assert not delivery.heartbeat_wanted(datetime(2026, 6, 1, 12, 25), datetime(2026, 6, 1, 12, 21), None)


def test_a_daily_heartbeat_whose_time_is_always_quiet_never_comes() -> None:
    quiet = parse({"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"})
    anchor = datetime(2026, 6, 1, 1, 0)  # 03:00 in Berlin, every day inside the window
    due = delivery.heartbeat_after(anchor, 86_400, anchor, quiet)
    assert not delivery.heartbeat_wanted(due, due, quiet)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 86_400 * 3),  # after, seconds from T0
    st.sampled_from([300.0, 600.0, 1800.0, 3600.0, 5400.0]),
    st.integers(0, 23), st.integers(1, 12),
    st.sampled_from(["Europe/Berlin", "America/New_York", "UTC", "Australia/Lord_Howe"]),
    st.sampled_from([datetime(2026, 3, 28, 20, 0), datetime(2026, 10, 24, 21, 0), datetime(2026, 11, 1, 3, 0)]),
)
def test_heartbeat_times_are_on_the_grid_after_now_and_outside_quiet_hours(
    after_seconds: int, every: float, start_hour: int, hours: int, tz: str, anchor: datetime
) -> None:
    """Across daylight-saving nights in several zones: always later than `after`, on the
    grid, and outside the quiet window (docs/events.md#delivery)."""
    from oar.watching.quiet_hours import window_around

    quiet = parse({"from": f"{start_hour:02d}:00", "to": f"{(start_hour + hours) % 24:02d}:30", "tz": tz})
    after = anchor + timedelta(seconds=after_seconds)
    due = delivery.heartbeat_after(anchor, every, after, quiet)
    assert due > after
    assert (due - anchor) % timedelta(seconds=every) == timedelta(0)
    assert window_around(quiet, due) is None


def test_a_turn_is_quiet_since_its_output_last_changed_as_the_sweeper_saw_it() -> None:
    started = T0 - timedelta(minutes=3)
    # First look: no output yet → quiet since it started; some output → from now.
    assert delivery.quiet_since(None, None, 0, started, T0) == started
    assert delivery.quiet_since(None, None, 120, started, T0) == T0
    # Same size as last time → still the same spell; changed → a new spell from now.
    assert delivery.quiet_since(120, T0, 120, started, T0 + timedelta(minutes=4)) == T0
    assert delivery.quiet_since(120, T0, 180, started, T0 + timedelta(minutes=4)) == T0 + timedelta(minutes=4)


def test_each_stalled_minutes_value_is_reported_once_per_quiet_spell() -> None:
    since = T0
    assert delivery.stalls_due(since, [15, 30, 15], [], T0 + timedelta(minutes=14), 60) == []
    assert delivery.stalls_due(since, [15, 30, 15], [], T0 + timedelta(minutes=15), 60) == [15]
    assert delivery.stalls_due(since, [15, 30], [15], T0 + timedelta(minutes=20), 60) == []
    assert delivery.stalls_due(since, [15, 30], [15], T0 + timedelta(minutes=31), 60) == [30]
    assert delivery.stalls_due(since, [15, 30], [], T0 + timedelta(minutes=31), 60) == [15, 30]
    # A shortened minute (tests and demos) scales every value alike.
    assert delivery.stalls_due(since, [2], [], T0 + timedelta(seconds=2), 1) == [2]


held_items = st.lists(
    st.builds(
        lambda key, offset, reason: delivery.Held(key, T0 + timedelta(seconds=offset), reason),
        st.integers(0, 10_000), st.integers(-600, 1200),
        st.sampled_from([delivery.WINDOW, delivery.CAP, delivery.DIGEST, delivery.QUIET, delivery.OWN, delivery.URGENT]),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(held_items, kinds, st.integers(0, 40), st.lists(options, min_size=1, max_size=3))
def test_the_open_slots_decide_like_every_held_event(
    held: list[delivery.Held], kind: str, wakeups: int, subscriptions: list[delivery.Rules]
) -> None:
    """The engine keeps only the open window and cap digest while it holds a batch."""
    assert delivery.due_for(subscriptions, kind, T0, held, wakeups, TIMING) == delivery.due_for(
        subscriptions, kind, T0, delivery.open_slots(held, T0), wakeups, TIMING
    )
