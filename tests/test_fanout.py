"""Fan-out (docs/events.md#how-events-are-held): the events of one ingested batch are held for each
watcher in one row, and read as before — one line each, in order, counted as events."""

from __future__ import annotations

import threading
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from rq.registry import ScheduledJobRegistry

from oar.core import events, ids, jobs, keys, lease_lock
from oar.core.db import database, write_transaction
from oar.core.models import Event, HeldEvent, Setting
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.watching import delivering, held, ingest
from tests.support.clients import poll
from tests.support.conversations import event_lines
from tests.support.relays import FAST_TIMES, Relay, own_relay


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


def test_a_delivery_of_many_events_is_a_short_message(tmp_path: Path) -> None:
    """A message lists DELIVERY_LINES_SHOWN event lines at most, urgent ones always, and counts
    the rest (docs/events.md#a-short-message); the subscription still counts every event."""
    with own_relay(tmp_path, {**FAST_TIMES, "DELIVERY_LINES_SHOWN": "3"}) as stack:
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        target = relay.conversation("Build")
        watcher = relay.conversation("watcher")
        watcher.ok("subscribe", sessions=["all"], events=["turn_end", "error"])
        with database.connection_context(), write_transaction():
            for n in range(5):
                events.record(target.session_id, "turn_end", {"turnId": ids.message_id(), "status": "done",
                                                              "excerpt": f"step {n}", "fromSession": None, "startedBy": "user"})
            events.record(target.session_id, "error", {"error": "boom"})
        jobs.poke_delivery(relay.runtime)
        [message] = poll("the delivery", lambda: event_lines(relay, watcher.session_id) or None, seconds=30)
    short = f"({target.session_id[:4]}…)"
    assert message.splitlines()[1:] == [
        f'[relay event] session "Build" {short}: turn_end (done) "step 0"',
        f'[relay event] session "Build" {short}: turn_end (done) "step 1"',
        f'[relay event] session "Build" {short}: error "boom"',
        "[relay event] … and 3 more events not listed (turn_end 3): list_sessions and read_session show where "
        "their sessions stand.",
    ]


def _record_turn_ends(session_id: str, count: int) -> list[int]:
    with database.connection_context(), write_transaction():
        return [events.record(session_id, "turn_end",
                              {"turnId": ids.message_id(), "status": "done", "excerpt": f"step {n}",
                               "fromSession": None, "startedBy": "user"}).seq for n in range(count)]


def _held_seqs(watcher_id: str) -> list[int]:
    """Every event number held for the watcher, once per time it is held (the engine's own
    lines, such as `all_idle`, hold none)."""
    with database.connection_context():
        rows = list(HeldEvent.select().where(HeldEvent.watcher == watcher_id))
    seqs: list[int] = []
    for row in rows:
        if row.seqs:
            seqs.extend(seq for first, last, _kind in row.seqs for seq in range(first, last + 1))
        elif row.event_seq is not None:
            seqs.append(row.event_seq)
    return sorted(seqs)


def _ingest_after(start: threading.Barrier, runtime: Runtime) -> None:
    start.wait()
    with database.connection_context():
        ingest.ingest_pending(runtime, utcnow)


def test_two_ingesters_that_read_the_same_batch_hold_it_once(tmp_path: Path) -> None:
    """Ingestion matches a batch before its write transaction (docs/events.md#how-events-are-held):
    of two ingesters that read the same batch, the second finds the cursor moved, drops its
    work and writes nothing."""
    with own_relay(tmp_path, worker=False) as stack:  # no worker: nothing ingests but the test
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        runtime = relay.runtime
        target = relay.conversation("Build")
        watchers = [relay.conversation(f"watcher {n}") for n in range(3)]
        for watcher in watchers:
            watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
        recorded = _record_turn_ends(target.session_id, 5)
        with database.connection_context():
            now = utcnow()
            first, second = ingest.read_batch(now), ingest.read_batch(now)
            assert first is not None and second is not None and first.after == second.after
            assert ingest.claim_and_hold(runtime, now, first) == 5
            with pytest.raises(held.Lost):
                ingest.claim_and_hold(runtime, now, second)
            assert ingest.ingest(runtime, now) == 0  # nothing left after the claimed batch
        for watcher in watchers:
            assert _held_seqs(watcher.session_id) == recorded

        # Racing for real: two threads ingest the same new events, round after round.
        later: list[int] = []
        for _round in range(8):
            later += _record_turn_ends(target.session_id, 7)
            start = threading.Barrier(2)
            threads = [threading.Thread(target=_ingest_after, args=(start, runtime)) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        for watcher in watchers:
            assert _held_seqs(watcher.session_id) == recorded + later


def test_ingesting_while_nothing_is_watched_writes_nothing(tmp_path: Path) -> None:
    """Until the first subscription there is no cursor to move: a background ingestion reads
    nothing and adds no row (a refused call's "nothing changed" must hold while jobs run)."""
    with own_relay(tmp_path, worker=False) as stack:  # no worker: nothing ingests but the test
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        target = relay.conversation("Build")
        _record_turn_ends(target.session_id, 3)
        with database.connection_context():
            assert ingest.ingest_pending(relay.runtime, utcnow) == 0
            assert not Setting.select().where(Setting.key == held.CURSOR_KEY).exists()
        watcher = relay.conversation("watcher")
        watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
        with database.connection_context():
            # A watcher that somehow lacks the row (it is written with the subscription) gets it.
            Setting.delete().where(Setting.key == held.CURSOR_KEY).execute()
            later = _record_turn_ends(target.session_id, 2)
            assert ingest.ingest_pending(relay.runtime, utcnow) > 0
        assert set(later) <= set(_held_seqs(watcher.session_id))


def _record(session_id: str, count: int, from_session: str | None = None) -> list[int]:
    with database.connection_context(), write_transaction():
        return [events.record(session_id, "turn_end",
                              {"turnId": ids.message_id(), "status": "done", "excerpt": f"step {n}",
                               "fromSession": from_session, "startedBy": "user"}).seq for n in range(count)]


def test_watchers_alike_are_matched_together_and_each_leaves_out_its_own(tmp_path: Path) -> None:
    """Watchers whose one subscription has the same filters are matched once for all
    (docs/decisions.md#fan-out-matching-once-per-group-issue-14): each still leaves out its own
    session's events and those from before it subscribed, gets its own prompt in a row of its
    own, and a watcher with two subscriptions is matched as before."""
    with own_relay(tmp_path, worker=False) as stack:  # no worker: nothing ingests but the test
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        target = relay.conversation("Build")
        plain = [relay.conversation(f"watcher {n}") for n in range(3)]
        for watcher in plain:
            watcher.ok("subscribe", sessions=["all"])
        double = relay.conversation("two subscriptions")
        double.ok("subscribe", sessions=["all"])
        double.ok("subscribe", sessions=[target.session_id], events=["turn_end"])
        own_session = plain[0].session_id
        early = _record(target.session_id, 3) + _record(own_session, 2)
        late = relay.conversation("late")
        late.ok("subscribe", sessions=["all"])
        own_prompt = _record(target.session_id, 1, from_session=plain[1].session_id)
        rest = _record(target.session_id, 4)
        with database.connection_context():
            assert held.cursor() < early[0]  # nothing ingested yet: one batch holds them all
            assert ingest.ingest(relay.runtime, utcnow()) == len(early) + 1 + len(rest)
        everything = sorted(early + own_prompt + rest)
        assert _held_seqs(own_session) == sorted(set(everything) - set(early[3:]))
        assert _held_seqs(plain[1].session_id) == everything
        assert _held_seqs(plain[2].session_id) == everything
        assert _held_seqs(double.session_id) == everything
        assert _held_seqs(late.session_id) == sorted(own_prompt + rest)
        with database.connection_context():
            [alone] = HeldEvent.select().where(
                (HeldEvent.watcher == plain[1].session_id) & (HeldEvent.event_seq == own_prompt[0])
            )
            bundles = list(HeldEvent.select().where(
                (HeldEvent.watcher == plain[2].session_id) & HeldEvent.event_seq.is_null(False)
            ))
        assert alone.count == 1 and alone.seqs is None and alone.turn_id is not None
        assert len(bundles) == 1 and bundles[0].count == len(everything)


def test_the_first_subscription_starts_the_engine_after_the_events_before_it(tmp_path: Path) -> None:
    """No subscription holds an event from before it was written, so the engine's cursor
    starts past the history (but for the last EVENT_GAP_GRACE, which may still be committing):
    the first watcher's events do not wait behind a week of old ones being read."""
    with own_relay(tmp_path, worker=False) as stack:  # no worker: nothing ingests but the test
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        target = relay.conversation("Build")
        watcher = relay.conversation("watcher")
        old = _record_turn_ends(target.session_id, 3)
        with database.connection_context():  # these three happened an hour ago
            Event.update(created_at=utcnow() - timedelta(hours=1)).where(Event.seq.in_(old)).execute()
        recent = _record_turn_ends(target.session_id, 2)  # and these a moment before subscribing
        watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
        with database.connection_context():
            assert held.cursor() == old[-1]
            later = _record_turn_ends(target.session_id, 2)
            # The recent ones are read again, and hold nothing: they came before the subscription.
            assert ingest.ingest_pending(relay.runtime, utcnow) == len(recent) + len(later)
        assert _held_seqs(watcher.session_id) == later


def test_an_ingestion_out_of_time_leaves_the_rest_to_a_worker(tmp_path: Path) -> None:
    """The clock's sweep ingests for about one period; the jobs of events committed meanwhile
    found its lock taken and left their events to it. What it leaves goes to a worker's job
    at once, not to the next sweep (no clock runs here, and no delivery starts a turn whose
    end would ingest it: the window is an hour)."""
    with own_relay(tmp_path, {**FAST_TIMES, "DELIVERY_WINDOW_SECONDS": "3600"}, worker=False) as stack:
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        target = relay.conversation("Build")
        watcher = relay.conversation("watcher")
        watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
        recorded = _record_turn_ends(target.session_id, ingest.INGEST_BATCH + 5)
        with database.connection_context():
            # No time at all: one batch, and the rest left.
            assert ingest.ingest_pending(relay.runtime, utcnow, budget_seconds=0) == ingest.INGEST_BATCH
        stack.start_worker()
        poll("the rest ingested by a worker", lambda: _cursor_at(recorded[-1]), seconds=60)
        assert _held_seqs(watcher.session_id) == recorded


def _cursor_at(seq: int) -> bool:
    with database.connection_context():
        return held.cursor() >= seq


def test_a_sweep_hands_the_watchers_due_since_its_lag_back_to_a_job(tmp_path: Path) -> None:
    """The clock's sweep delivers what is a period overdue and leaves the rest to the due
    jobs; a due job that ran while the sweep held the delivery lock found it taken and left
    its watchers to the sweep. The sweep hands them back to a job, at once."""
    with own_relay(tmp_path, worker=False) as stack:
        relay = stack.relay
        assert relay is not None and relay.runtime is not None
        runtime = relay.runtime
        target = relay.conversation("Build")
        watcher = relay.conversation("watcher")
        watcher.ok("subscribe", sessions=["all"], events=["turn_end"])
        _record_turn_ends(target.session_id, 2)
        with database.connection_context():
            ingest.ingest_pending(runtime, utcnow)
            due = held.next_due(watcher.session_id)
        assert due is not None
        poll("the window closed", lambda: utcnow() >= due, seconds=30)
        # The due time's jobs are the ones that found the lock taken: gone, as they returned.
        runtime.queue.empty()
        scheduled = ScheduledJobRegistry(queue=runtime.queue)
        for job_id in scheduled.get_job_ids():
            scheduled.remove(job_id)
        with database.connection_context():
            sweep = lease_lock.take(runtime.redis, keys.delivery_lock(runtime.config.namespace), 30)
            assert sweep is not None and sweep.held
            stamp = int(due.replace(tzinfo=UTC).timestamp() * 1000) + 1
            assert delivering.run_due_job(runtime, stamp, utcnow) == 0  # the lock was taken
            sweep.release()
            # The sweep itself, with its lag: nothing is that overdue.
            assert delivering.deliver_overdue(runtime, utcnow, lag_seconds=3600) == 0
        stack.start_worker()
        [message] = poll("the delivery", lambda: event_lines(relay, watcher.session_id) or None, seconds=60)
        assert len(message.splitlines()) == 3
