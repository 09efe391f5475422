"""The load suite: 200 concurrent long `wait`s plus reads at the highest rate the machine sustains.

A relay of its own (gunicorn web, two worker processes, the clock) on SQLite, or on PostgreSQL
when OAR_TEST_DATABASE_URL is set. 200 agents each wait on a conversation of their own whose
turn sleeps (`!sleep`): the waits run out (`queued`/`running`) or wake when the turn ends, and
a waiter whose turn ended writes the next prompt, so turns start, run and end all along. Beside
them, bench/load.py's closed-loop generator reads those conversations as fast as they answer.

Asserts: no 5xx and no "database is locked" (in answers or in any process's log), no traceback
in the logs, every wait answered. Prints p50/p99 of the reads and of how late the waits that ran
out answered after their `wait_seconds`. Short form ~25 s; the full form (OAR_SUITE=full) runs
5 minutes: `OAR_SUITE=full python -m pytest tests/test_load.py -s` (docs/benchmarks.md#load-suite-teststest_loadpy).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from bench.load import LoadGenerator, Workload
from bench.report import percentile
from tests.support import suites
from tests.support.clients import Agent, Client, Owner
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack

WAITERS = 200
SECONDS = suites.scale(25, 300)
WAIT_SECONDS = suites.scale(8, 60)
# How long a waited-on turn sleeps: some turns end inside a wait (the wait wakes), most outlast it.
TURN_SLEEP_SECONDS = suites.scale(6, 45)
# Readers: load generator processes × connections each.
READ_PROCESSES, READ_THREADS = 2, 8
# Enough gunicorn threads for every wait and every reader at once, with room to spare.
WEB = {"WEB_CONCURRENCY": "2", "OAR_WEB_THREADS": "160"}
# A waiting call re-reads the database at the relay's own pace, as in production.
TIMES = {**FAST_TIMES, "WAIT_RECHECK_SECONDS": "5"}
LOCKED = "database is locked"


@dataclass
class Waits:
    """What the waiters saw."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter[str] = field(default_factory=Counter)
    # Seconds past wait_seconds of the waits that ran out; seconds taken by the ones that woke.
    late: list[float] = field(default_factory=list)
    woke: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # Waits sent again after their connection was closed before any answer (see `waiter`).
    resent: int = 0

    def failed(self, text: str) -> None:
        with self.lock:
            self.failures.append(text)


def waiter(owner: Owner, agent: Agent, target: str, message_id: str, until: float, waits: Waits) -> None:
    """Wait on `target`'s prompt again and again until `until`; a done turn gets a next prompt."""
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {agent.token}"
    # The next prompt goes over a connection of this waiter's own: the owner's pool is 10 connections.
    prompts = Client(owner.base_url, owner.token)
    while time.monotonic() + WAIT_SECONDS <= until:
        started = time.monotonic()
        body: dict[str, Any] = {
            "action": "wait", "relay": "this", "session": target, "message_id": message_id, "wait_seconds": WAIT_SECONDS,
        }
        try:
            try:
                response = http.post(agent.base_url + "/api/v1/relay_tool", timeout=WAIT_SECONDS + 120, json=body)
            except requests.ConnectionError:
                # HTTP/1.1's keep-alive race: the server may close an idle connection just as the
                # next request goes out on it (after a next prompt that took about the keep-alive
                # time), and nothing was answered. A wait only reads, so it is sent again on a new
                # connection, as clients do with idempotent requests; the logs are checked below
                # for a web worker that died, which would drop connections too.
                with waits.lock:
                    waits.resent += 1
                http.close()
                response = http.post(agent.base_url + "/api/v1/relay_tool", timeout=WAIT_SECONDS + 120, json=body)
        except requests.RequestException as error:
            waits.failed(f"wait on {target[:8]} not answered: {error!r}")
            return
        took = time.monotonic() - started
        if response.status_code != 200 or LOCKED in response.text or response.json().get("ok") is not True:
            waits.failed(f"wait on {target[:8]}: {response.status_code} {response.text[:300]}")
            return
        status = response.json()["status"]
        with waits.lock:
            waits.statuses[status] += 1
            (waits.late if status in ("queued", "running") else waits.woke).append(
                took - WAIT_SECONDS if status in ("queued", "running") else took
            )
        if status not in ("queued", "running"):
            status_code, answer = prompts.request(
                "POST", f"/api/v1/owner/sessions/{target}/messages", {"text": f"!sleep {TURN_SLEEP_SECONDS}"},
            )
            if status_code != 201:
                waits.failed(f"next prompt for {target[:8]}: {status_code} {answer}")
                return
            message_id = answer["message_id"]


def conversations(owner: Owner) -> list[tuple[Agent, str, str]]:
    """200 (waiting agent, its target conversation, the target's prompt): one wait per conversation,
    so a cap on concurrent waits per conversation is never what the suite measures."""
    pairs = []
    for number in range(WAITERS):
        agent = owner.conversation(f"waiter {number}")
        target = owner.post("/api/v1/owner/sessions", {"title": f"target {number}"})["session"]["id"]
        # Staggered lengths, so that turns end at different times throughout the run.
        sleep = TURN_SLEEP_SECONDS + number % 7
        prompt = owner.post(f"/api/v1/owner/sessions/{target}/messages", {"text": f"!sleep {sleep}"})["message_id"]
        pairs.append((agent, target, prompt))
    return pairs


def logs_of(running: RelayStack) -> dict[str, str]:
    return {path.name: path.read_text(errors="replace") for path in Path(running.logs).glob("*.log")}


def ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5) * 1000:,.1f} ms, p99 {percentile(values, 0.99) * 1000:,.1f} ms"


def test_it_serves_200_long_waits_and_reads_at_full_rate(tmp_path: Path) -> None:
    external_redis = os.environ.get("OAR_TEST_REDIS_URL")
    with own_relay(tmp_path, TIMES, web="process", clock=True, env=WEB, redis_url=external_redis) as running:
        assert running.relay is not None
        owner = running.relay.owner
        pairs = conversations(owner)
        reader = owner.conversation("reader")
        reads = Workload(running.url + "/api/v1/relay_tool", reader.token, {"action": "read_session", "relay": "this"},
                         tuple(target for _agent, target, _prompt in pairs))
        waits = Waits()
        with LoadGenerator(READ_PROCESSES, READ_THREADS) as load:
            until = time.monotonic() + SECONDS
            threads = [
                threading.Thread(target=waiter, args=(owner, agent, target, prompt, until, waits), daemon=True)
                for agent, target, prompt in pairs
            ]
            for thread in threads:
                thread.start()
            read = load.run(reads, SECONDS)
            for thread in threads:
                thread.join(WAIT_SECONDS + 180)
        assert not any(thread.is_alive() for thread in threads), "a wait was not answered"
        logs = logs_of(running)
    database = "PostgreSQL" if os.environ.get("OAR_TEST_DATABASE_URL") else "SQLite"
    answered = sum(waits.statuses.values())
    print(
        f"\nload on {database}, {SECONDS} s: {WAITERS} concurrent waits of {WAIT_SECONDS} s "
        f"({answered} answered: {dict(waits.statuses)}); reads {read.per_second:,.0f}/s over "
        f"{READ_PROCESSES * READ_THREADS} connections, {read.ok:,} ok, {read.errors} errors\n"
        f"  reads (read_session):             {ms(read.latencies)}\n"
        f"  waits that ran out, late by:      {ms(waits.late)}\n"
        f"  waits woken by their turn's end:  {ms(waits.woke)} after the call\n"
        f"  waits sent again after a closed keep-alive connection: {waits.resent}"
    )
    assert not waits.failures, "\n".join(waits.failures[:10])
    assert read.errors == 0 and read.ok > 0, (read.ok, read.errors)
    # Every waiter answered every wait it started (at least one each), and waits did run their full length.
    assert answered >= WAITERS and waits.late, dict(waits.statuses)
    # No web worker died or was replaced (a resent wait is the keep-alive race, not a lost worker).
    assert logs["web.log"].count("Booting worker") == int(WEB["WEB_CONCURRENCY"]), logs["web.log"][-3000:]
    for name, text in logs.items():
        assert LOCKED not in text, f"{name}: {text[text.index(LOCKED) - 2000:][:3000]}"
        assert "Traceback" not in text, f"{name}: {text[text.index('Traceback'):][:3000]}"
