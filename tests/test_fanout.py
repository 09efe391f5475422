"""Fan-out (docs/events.md#how-events-are-held): the events of one ingested batch are held for each
watcher in one row, and read as before — one line each, in order, counted as events."""

from __future__ import annotations

from oar.core import events, ids, jobs
from oar.core.db import database, write_transaction
from oar.core.models import HeldEvent
from tests.support.clients import poll
from tests.support.conversations import event_lines
from tests.support.relays import Relay


def test_a_batch_of_events_is_one_held_row_per_watcher_and_one_line_per_event(relay: Relay) -> None:
    assert relay.runtime is not None
    target = relay.conversation("Build")
    watchers = [relay.conversation(f"watcher {n}") for n in range(3)]
    for watcher in watchers:
        watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
    # Five turn ends committed together: the engine reads them in one batch.
    with database.connection_context(), write_transaction():
        recorded = [events.record(target.session_id, "turn_end",
                                  {"turnId": ids.message_id(), "status": "done", "excerpt": f"step {n}",
                                   "fromSession": None, "startedBy": "user"}) for n in range(5)]
    jobs.poke_delivery(relay.runtime)

    def held() -> list[HeldEvent] | None:
        with database.connection_context():
            rows = list(HeldEvent.select().where(HeldEvent.event_seq >= recorded[0].seq))
        return rows if sum(row.count for row in rows) == 15 else None

    rows = poll("the five events held for each watcher", held, seconds=30)
    # One row per watcher, not one per watcher and event.
    assert sorted(row.watcher_id for row in rows) == sorted(w.session_id for w in watchers), rows
    listed = watchers[0].ok("list_subscriptions")["subscriptions"][0]
    assert listed["heldCount"] in (0, 5), listed  # 0 once delivered
    short = f"({target.session_id[:4]}…)"
    expected = [f'[relay event] session "Build" {short}: turn_end (done) "step {n}"' for n in range(5)]
    for watcher in watchers:
        [message] = poll("the delivery", lambda w=watcher: event_lines(relay, w.session_id) or None, seconds=30)
        assert message.splitlines()[1:] == expected
