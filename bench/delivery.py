"""Fan-out of relay events (docs/events.md): `python -m bench delivery`.

1,000 sessions (by default) and 200 watcher conversations, each with one `["all"]`
subscription (one of the 20 a conversation may hold), so that every event reaches every
watcher: 10,000 `turn_end` events are held 2,000,000 times (in one bundle row per watcher
and ingested batch, docs/events.md#how-events-are-held). The relay runs as production
does (gunicorn, `oar worker`, `oar clock`, embedded Redis, SQLite); the events are written
by this process into the relay's database exactly as the relay's own emitters write them
(`oar.core.events.record`, one write transaction each), and the engine is poked (an ingest job
enqueued) after every 100 of them — the relay pokes after every turn end; a poke that finds
nothing new only costs a job. Figures:

- baseline: the same 10,000 event inserts, timed while nobody subscribes (raw insert rate);
- engine: events per second from the first measured insert until every event is held for
  every watcher (the engine's cursor has passed the last one: rows and cursor are written in
  one transaction), and until every held row is delivered;
- delivery lag: for each message delivered to a watcher, its `created_at` minus the due time
  of the window it closes (the earliest `due_at` among its rows): how late a delivery comes
  after its window closed, while the engine keeps ingesting;
- growth: the database's size after the run, then after the clock's pruning as it runs once
  the retention times have passed (`oar.watching.pruning`, docs/limits.md#retention; run here
  with a clock eight days ahead): the file's size and the bytes its pages in use hold (SQLite
  reuses freed pages; `VACUUM` would give them back to the file system).

Watchers are conversations in a long turn (a running turn seeded into the database), so a
delivery is queued as their next prompt (docs/events.md#delivery, "a busy watcher gets it queued"): their
own turns do not run during the measurement, which measures the engine alone.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import requests
from peewee import fn

from bench import report, seed, stack
from bench.owner import Owner
from oar.core import events, ids, jobs
from oar.core.config import Config, from_environment
from oar.core.db import database, open_database, write_transaction
from oar.core.models import HeldEvent, Message, Session, Setting
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.watching import ingest, pruning

POKE_EVERY = 100
# The goals of issue #37: events held for 200 ["all"] watchers per second, and how long after
# its window a held event waits to be delivered.
FANOUT_GOAL_PER_SECOND = 2_000
DELIVERY_P99_GOAL_MS = 1_000.0
DEADLINE_SECONDS = 900


@dataclass(frozen=True)
class FanoutFigures:
    sessions: int
    watchers: int
    events: int
    window_seconds: float
    insert_per_second: float
    measured_insert_seconds: float
    held_seconds: float
    delivered_seconds: float
    held_rows: int
    written_rows: int
    messages: int
    lag_ms: list[float]
    size_after_run: tuple[int, int]
    size_after_prune: tuple[int, int]
    pruned: dict[str, int]
    prune_seconds: float


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench delivery", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="watched sessions (default 1000)")
    parser.add_argument("--watchers", type=int, default=200, help='watchers, one ["all"] subscription each (default 200)')
    parser.add_argument("--events", type=int, default=10_000, help="turn_end events (default 10000)")
    parser.add_argument("--window", type=float, default=30.0,
                        help="DELIVERY_WINDOW_SECONDS, the coalescing window (default 30, as in production)")
    return parser.parse_args(argv)


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def insert_events(session_ids: Sequence[str], count: int, rng: random.Random, runtime: Runtime | None) -> tuple[int, int, float]:
    """`count` turn_end events of random sessions, one write transaction each, as the turn
    runner records them; returns (first seq, last seq, seconds)."""
    first = last = 0
    started = time.monotonic()
    with database.connection_context():
        for number in range(count):
            with write_transaction():
                event = events.record(
                    rng.choice(session_ids), "turn_end",
                    {"turnId": ids.message_id(), "status": "done", "excerpt": seed._words(rng, 8, 20), "fromSession": None},
                )
            first = first or event.seq
            last = event.seq
            if runtime is not None and (number + 1) % POKE_EVERY == 0:
                jobs.poke_delivery(runtime)
        if runtime is not None:
            jobs.poke_delivery(runtime)
    return first, last, time.monotonic() - started


def make_watchers(url: str, owner: Owner, count: int) -> list[tuple[str, str]]:
    """Owner conversations allowed to watch (no first-watch card), each in a long turn."""
    watchers = []
    for number in range(count):
        session_id, token = owner.conversation(f"watcher {number}")
        owner.call("PATCH", f"/sessions/{session_id}", {"approvals": ["watch_sessions"]})
        watchers.append((session_id, token))
    now = utcnow()
    with database.connection_context(), write_transaction():
        for session_id, _token in watchers:
            turn_id = ids.message_id()
            # A turn a worker never runs: its heartbeat is a day ahead, so the reconciler leaves it.
            Message.create(id=turn_id, session=session_id, role="user", text="(benchmark: a long turn)",
                           status="running", started_at=now, heartbeat_at=now + timedelta(days=1))
            Session.update(active_turn=turn_id).where(Session.id == session_id).execute()
    return watchers


def subscribe_all(url: str, watchers: Sequence[tuple[str, str]]) -> None:
    http = requests.Session()
    for _session_id, token in watchers:
        response = http.post(f"{url}/api/v1/relay_tool", json={"action": "subscribe", "sessions": ["all"]},
                             headers={"Authorization": f"Bearer {token}"}, timeout=60)
        if response.status_code != 200:
            raise RuntimeError(f"subscribe refused: {response.text[:500]}")


def wait_for(what: str, check, started: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds from `started` until `check()` is true (looked at every 0.25 s)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        with database.connection_context():
            if check():
                return time.monotonic() - started
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {DEADLINE_SECONDS} s")
        time.sleep(0.25)


def measure(args: argparse.Namespace) -> FanoutFigures:
    with stack.prepared() as ready:
        env = {**ready.env, "OAR_DELIVERY_WINDOW_SECONDS": str(args.window)}
        progress(f"seeding {args.sessions:,} sessions")
        seeded = seed.seed(ready.data_dir, args.sessions, 0)
        open_database(Config(data_dir=ready.data_dir))
        processes = stack.Processes(ready.log_dir)
        try:
            progress("starting the relay (web, worker, clock)")
            relay = stack.start_relay(processes, env)
            owner = Owner(relay.url, ready.owner_token)
            owner.open_to_agents()
            runtime = Runtime(from_environment(env))
            rng = random.Random(1)

            progress(f"baseline: {args.events:,} raw event inserts, nobody subscribed")
            _first, _last, baseline_seconds = insert_events(seeded.session_ids, args.events, rng, None)

            progress(f"{args.watchers} watchers subscribe to [\"all\"]")
            watchers = make_watchers(relay.url, owner, args.watchers)
            subscribe_all(relay.url, watchers)

            progress(f"measured: {args.events:,} events fanned out to {args.watchers} watchers")
            started = time.monotonic()
            first, last, insert_seconds = insert_events(seeded.session_ids, args.events, rng, runtime)

            def held() -> bool:
                cursor = Setting.get_or_none(Setting.key == ingest.CURSOR_KEY)
                return cursor is not None and int(cursor.value) >= last

            held_seconds = wait_for("every event held", held, started)
            progress(f"every event held after {held_seconds:.1f} s; waiting for the last windows to close")

            def delivered() -> bool:
                return not HeldEvent.select().where(
                    (HeldEvent.event_seq >= first) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
                ).exists()

            delivered_seconds = wait_for("every event delivered", delivered, started)
            processes.check_alive()
        finally:
            processes.stop_all()
        with database.connection_context():
            # Held events (a bundle row holds `count`), and the rows that hold them.
            rows = HeldEvent.select(fn.SUM(HeldEvent.count)).where(HeldEvent.event_seq >= first).scalar() or 0
            written = HeldEvent.select().where(HeldEvent.event_seq >= first).count()
            windows: dict[str, object] = {}
            for row in (
                HeldEvent.select(HeldEvent.message_id, HeldEvent.due_at)
                .where((HeldEvent.event_seq >= first) & HeldEvent.message_id.is_null(False))
                .tuples()
                .iterator()
            ):
                message_id, due_at = row
                if message_id not in windows or due_at < windows[message_id]:  # type: ignore[operator]
                    windows[message_id] = due_at
            created = dict(Message.select(Message.id, Message.created_at).where(Message.id.in_(list(windows))).tuples())
        lags = [(created[m] - due).total_seconds() * 1000 for m, due in windows.items()]  # type: ignore[operator]
        size_after_run = database_size()
        progress("pruning as the clock would once the retention times have passed")
        prune_started = time.monotonic()
        with database.connection_context():
            pruned, _complete = pruning.prune(runtime, utcnow() + timedelta(days=8))
        prune_seconds = time.monotonic() - prune_started
        size_after_prune = database_size()
        return FanoutFigures(
            sessions=args.sessions, watchers=args.watchers, events=args.events, window_seconds=args.window,
            insert_per_second=args.events / baseline_seconds, measured_insert_seconds=insert_seconds,
            held_seconds=held_seconds, delivered_seconds=delivered_seconds, held_rows=rows, written_rows=written,
            messages=len(windows),
            lag_ms=lags, size_after_run=size_after_run, size_after_prune=size_after_prune, pruned=pruned,
            prune_seconds=prune_seconds,
        )


def database_size() -> tuple[int, int]:
    """The SQLite file's size (after a WAL checkpoint) and the bytes of its pages in use."""
    with database.connection_context():
        database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size, pages, free = (database.execute_sql(f"PRAGMA {name}").fetchone()[0]
                                  for name in ("page_size", "page_count", "freelist_count"))
    return page_size * pages, page_size * (pages - free)


def render(figures: FanoutFigures) -> str:
    engine_rate = figures.events / figures.held_seconds
    return "\n".join([
        "OAR Relay benchmark: delivery fan-out",
        f"machine      {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} after the run",
        f"workload     {figures.sessions:,} sessions, {figures.watchers} watchers with one [\"all\"] subscription each, "
        f"{figures.events:,} turn_end events ({figures.held_rows:,} held events in {figures.written_rows:,} rows); "
        f"window {figures.window_seconds:g} s",
        f"baseline     raw event insert (one write transaction each): {figures.insert_per_second:,.0f} events/s",
        f"engine       every event held for every watcher {figures.held_seconds:.1f} s after the first insert: "
        f"{engine_rate:,.0f} events/s ({engine_rate * figures.watchers:,.0f} held events/s), "
        f"× {engine_rate / figures.insert_per_second:.3f} of the raw insert rate "
        f"(the inserts themselves took {figures.measured_insert_seconds:.1f} s)",
        f"delivered    every held row delivered {figures.delivered_seconds:.1f} s after the first insert, "
        f"in {figures.messages:,} messages",
        report.latency_line(f"delivery lag after the window ({figures.messages:,})", figures.lag_ms)
        + f"   first {min(figures.lag_ms):7.2f} ms",
        report.goal_line(f"fan-out, {figures.watchers} [\"all\"] watchers", f"{engine_rate:,.0f} events/s", f"≥ {FANOUT_GOAL_PER_SECOND:,} /s", engine_rate >= FANOUT_GOAL_PER_SECOND),
        report.p99_goal_line("delivery lag after the window", figures.lag_ms, DELIVERY_P99_GOAL_MS),
        f"database     after the run {mb(figures.size_after_run[0])} file, {mb(figures.size_after_run[1])} in use; "
        f"after pruning ({figures.prune_seconds:.1f} s: {figures.pruned['held']:,} held rows, "
        f"{figures.pruned['events']:,} events, {figures.pruned['wakeups']:,} wake-ups) "
        f"{mb(figures.size_after_prune[0])} file, {mb(figures.size_after_prune[1])} in use",
    ])


def mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def run(argv: Sequence[str]) -> int:
    args = parse_arguments(argv)
    # SIGTERM unwinds like Ctrl-C, so that every child is stopped and the temp dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    figures = measure(args)
    print(render(figures), flush=True)
    progress(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

