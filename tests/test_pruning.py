"""Pruning the delivery engine's tables (docs/limits.md#retention) on a real stack: web, RQ
workers and the clock as their own processes, a SQLite file (or PostgreSQL with
OAR_TEST_DATABASE_URL).

Rows are aged by moving their timestamps back in the database, as a week would; then the
clock, started with a short PRUNE_EVERY_SECONDS, prunes them while every answer that shows
watching (list_subscriptions, the owner API, the page) stays the same.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from oar.core import defaults, events, ids, jobs
from oar.core.db import database, write_transaction
from oar.core.models import Event, EventLine, HeldEvent, Message
from oar.core.timeutil import utcnow
from oar.watching import held
from tests.support.clients import Agent, poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack

TIMES = {**FAST_TIMES, "PRUNE_EVERY_SECONDS": "0.5"}
WEEK_AND_A_DAY = timedelta(days=8)
TWO_HOURS = timedelta(hours=2)
CSRF = re.compile(r'name="csrf_token" value="[^"]+"')


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[RelayStack]:
    """Web in this process, workers as processes; the clock is started by each test once its
    rows are aged."""
    with own_relay(tmp_path, TIMES) as stack:
        yield stack


def held_rows(watcher: Agent) -> list[HeldEvent]:
    with database.connection_context():
        return list(HeldEvent.select().where(HeldEvent.watcher == watcher.session_id).order_by(HeldEvent.id))


def held_events(watcher: Agent) -> int:
    return sum(row.count for row in held_rows(watcher))


def event_seqs() -> list[int]:
    with database.connection_context():
        return [row.seq for row in Event.select(Event.seq).order_by(Event.seq)]


def event_messages(watcher: Agent) -> list[Message]:
    with database.connection_context():
        return list(Message.select().where((Message.session == watcher.session_id) & (Message.role == "event")))


def turns_ended(session: Agent) -> bool:
    with database.connection_context():
        return not Message.select().where(
            (Message.session == session.session_id) & Message.status.in_(("queued", "running"))).exists()


def age_everything() -> None:
    """A week and a day passes for the events, two hours for the held rows."""
    now = utcnow()
    with database.connection_context():
        Event.update(created_at=now - WEEK_AND_A_DAY).execute()
        HeldEvent.update(created_at=now - TWO_HOURS).execute()
        HeldEvent.update(delivered_at=now - TWO_HOURS).where(HeldEvent.delivered_at.is_null(False)).execute()


def page_views(stack: RelayStack, watchers: list[Agent]) -> list[str]:
    """The page's overview and each watcher's conversation page, as the signed-in owner sees them."""
    browser = requests.Session()
    assert stack.relay is not None
    browser.get(stack.url + "/", timeout=30)
    token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get(stack.url + "/", timeout=30).text)
    assert token is not None
    signed = browser.post(stack.url + "/", data={"token": stack.relay.config.owner_token,
                                                 "csrf_token": html.unescape(token.group(1))}, timeout=30)
    assert "Sign out" in signed.text, signed.text[:300]
    pages = [browser.get(stack.url + path, timeout=30).text for path in ["/", *(f"/sessions/{w.session_id}" for w in watchers)]]
    return [CSRF.sub("", page) for page in pages]


def watched_views(stack: RelayStack, watchers: list[Agent]) -> tuple[object, ...]:
    assert stack.relay is not None
    return (
        [w.ok("list_subscriptions") for w in watchers],
        stack.relay.owner.get("/api/v1/owner/subscriptions"),
        page_views(stack, watchers),
    )


def test_the_clock_prunes_delivered_held_rows_and_old_events_and_nothing_the_views_show(stack: RelayStack) -> None:
    assert stack.relay is not None
    desk = stack.relay.conversation("desk")
    target = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)["session"]
    now_watcher = stack.relay.conversation("now")
    later_watcher = stack.relay.conversation("later")
    now_watcher.ok("subscribe", sessions=[target], events=["turn_end"])
    later_watcher.ok("subscribe", sessions=[target], events=["turn_end"], digest_minutes=1440)
    for step in range(3):
        desk.ok("send", relay="this", session=target, text=f"step {step}", wait_seconds=30)
    # Counted in events: events ingested in one batch are held as one row (docs/events.md#how-events-are-held).
    poll("three events delivered to one watcher, three held for the other", lambda: (
        held_events(now_watcher) == 3 and all(row.delivered_at for row in held_rows(now_watcher))
        and held_events(later_watcher) == 3), seconds=30)
    # The delivered watcher's own turns (woken by the events) end before the views are compared.
    poll("the woken watcher's turns ended", lambda: turns_ended(now_watcher), seconds=30)
    undelivered = [(row.id, row.event_seq, row.line, row.due_at) for row in held_rows(later_watcher)]
    age_everything()
    before = watched_views(stack, [now_watcher, later_watcher])
    seqs = event_seqs()
    first_held = min(seq for _, seq, _, _ in undelivered if seq is not None)
    assert seqs[0] < first_held, "events before the first undelivered hold are there to prune"

    stack.start_clock()
    poll("delivered held rows pruned", lambda: held_rows(now_watcher) == [], seconds=30)
    poll("old events before the first undelivered hold pruned", lambda: event_seqs()[0] == first_held, seconds=30)

    # What the undelivered hold needs is kept: its rows, its events, and the newest event.
    assert [(row.id, row.event_seq, row.line, row.due_at) for row in held_rows(later_watcher)] == undelivered
    assert event_seqs() == [seq for seq in seqs if seq >= first_held]
    assert watched_views(stack, [now_watcher, later_watcher]) == before

    # Delivery goes on after pruning: a new event reaches the watcher that gets them at once.
    delivered = len(event_messages(now_watcher))
    desk.ok("send", relay="this", session=target, text="after pruning", wait_seconds=30)
    poll("the next event delivered", lambda: len(event_messages(now_watcher)) == delivered + 1, seconds=30)


def test_the_newest_event_is_kept_so_that_the_next_one_is_not_skipped(stack: RelayStack) -> None:
    """On SQLite a deleted highest `seq` is handed out again: an event numbered at or below the
    engine's cursor would never be delivered."""
    assert stack.relay is not None
    desk = stack.relay.conversation("desk")
    target = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)["session"]
    watcher = stack.relay.conversation("watcher")
    watcher.ok("subscribe", sessions=[target], events=["turn_end"])
    desk.ok("send", relay="this", session=target, text="one", wait_seconds=30)
    poll("the event delivered", lambda: len(event_messages(watcher)) == 1, seconds=30)
    poll("the woken watcher's turn ended", lambda: turns_ended(watcher), seconds=30)
    age_everything()
    stack.start_clock()
    poll("old events pruned", lambda: len(event_seqs()) <= 1, seconds=30)
    desk.ok("send", relay="this", session=target, text="two", wait_seconds=30)
    poll("the next event delivered", lambda: len(event_messages(watcher)) == 2, seconds=30)


SEEDED = 3 * defaults.PRUNE_BATCH
SEEDED_FROM = 10_000_000  # event numbers of the seeded rows: far past any real event


def test_a_clock_killed_mid_prune_loses_nothing_and_the_next_clock_finishes(stack: RelayStack) -> None:
    assert stack.relay is not None
    desk = stack.relay.conversation("desk")
    target = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)["session"]
    watcher = stack.relay.conversation("watcher")
    watcher.ok("subscribe", sessions=[target], events=["turn_end"], digest_minutes=1440)
    desk.ok("send", relay="this", session=target, text="one", wait_seconds=30)
    poll("the event held", lambda: len(held_rows(watcher)) == 1, seconds=30)
    kept = [(row.id, row.line, row.due_at) for row in held_rows(watcher)]
    # Delivered rows of a long-past fan-out, as a wide one leaves them (three batches).
    long_ago = utcnow() - TWO_HOURS
    with database.connection_context():
        subscription_id = held_rows(watcher)[0].subscription_id
        held.insert([(watcher.session_id, SEEDED_FROM + n, subscription_id, "turn_end", "[relay event] old", 1, None,
                      None, False, "window", None, long_ago, long_ago, False) for n in range(SEEDED)])
        HeldEvent.update(delivered_at=long_ago, message_id="m_old").where(HeldEvent.event_seq >= SEEDED_FROM).execute()
    before = watcher.ok("list_subscriptions")

    def seeded_left() -> int:
        with database.connection_context():
            return HeldEvent.select().where(HeldEvent.event_seq >= SEEDED_FROM).count()

    # A second between batches: the clock is killed with some batches done and some not.
    stack.start_clock(OAR_PRUNE_PAUSE_SECONDS="1")
    poll("the first batches pruned", lambda: seeded_left() < SEEDED, seconds=30)
    stack.kill("clock")
    left = seeded_left()
    assert 0 < left < SEEDED and left % defaults.PRUNE_BATCH == 0, left  # whole batches, none half done
    assert [(row.id, row.line, row.due_at) for row in held_rows(watcher) if row.event_seq < SEEDED_FROM] == kept
    assert watcher.ok("list_subscriptions") == before

    stack.start_clock()
    poll("the next clock prunes the rest", lambda: seeded_left() == 0, seconds=30)
    assert [(row.id, row.line, row.due_at) for row in held_rows(watcher)] == kept
    assert watcher.ok("list_subscriptions") == before


def test_the_lines_of_delivered_bundles_go_and_those_an_undelivered_bundle_carries_stay(stack: RelayStack) -> None:
    """A batch's events are held as one bundle per watcher with their lines written once
    (docs/events.md#how-events-are-held): once every bundle that carries a line is delivered and
    pruned, the line goes too; the lines of a bundle still held stay with it."""
    assert stack.relay is not None and stack.relay.runtime is not None
    target = stack.relay.conversation("Build")
    now_watcher = stack.relay.conversation("now")
    now_watcher.ok("subscribe", sessions=[target.session_id], events=["turn_end"])

    def commit_batch(label: str) -> list[int]:
        with database.connection_context(), write_transaction():
            recorded = [events.record(target.session_id, "turn_end",
                                      {"turnId": ids.message_id(), "status": "done", "excerpt": f"{label} {n}",
                                       "fromSession": None, "startedBy": "user"}) for n in range(4)]
        jobs.poke_delivery(stack.relay.runtime)
        return [event.seq for event in recorded]

    def line_seqs() -> list[int]:
        with database.connection_context():
            return sorted({row.seq for row in EventLine.select(EventLine.seq)})

    delivered_batch = commit_batch("first")
    poll("the first batch delivered", lambda: held_rows(now_watcher) and all(r.delivered_at for r in held_rows(now_watcher)),
         seconds=30)
    later_watcher = stack.relay.conversation("later")
    later_watcher.ok("subscribe", sessions=[target.session_id], events=["turn_end"], digest_minutes=1440)
    kept_batch = commit_batch("second")
    poll("the second batch held for the digest", lambda: len(held_rows(later_watcher)) == 1, seconds=30)
    poll("the second batch delivered to the other watcher", lambda: all(r.delivered_at for r in held_rows(now_watcher))
         and len(held_rows(now_watcher)) == 2, seconds=30)
    assert set(delivered_batch + kept_batch) <= set(line_seqs()), line_seqs()
    before = later_watcher.ok("list_subscriptions")
    age_everything()

    stack.start_clock()
    poll("the delivered watcher's rows pruned", lambda: held_rows(now_watcher) == [], seconds=30)
    poll("the lines only delivered bundles carried pruned", lambda: not set(delivered_batch) & set(line_seqs()), seconds=30)
    assert set(kept_batch) <= set(line_seqs())
    assert later_watcher.ok("list_subscriptions") == before
