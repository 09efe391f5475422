"""A closed-loop load generator on loopback: client processes × threads, each thread with
its own keep-alive connection, sending the next request as soon as the last one answered.

Several processes, because one Python process tops out on the GIL before a gunicorn server
does; `http.client` rather than `requests`, because its lower per-request cost leaves more
of the machine's two cores to the server under test. Both servers get the very same client.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Workload:
    """What one measurement sends: a relay_tool action (its `session` picked at random)."""

    url: str
    token: str
    action: dict[str, Any]
    session_ids: tuple[str, ...] = ()

    def body(self, rng: random.Random) -> bytes:
        payload = dict(self.action)
        if self.session_ids:
            payload["session"] = rng.choice(self.session_ids)
        return json.dumps(payload).encode()


@dataclass
class Tally:
    """Requests one client process completed in its measured window."""

    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def add(self, other: Tally, *, sequential: bool = False) -> None:
        """Fold in another tally: run alongside this one, or after it (a later round)."""
        self.ok += other.ok
        self.errors += other.errors
        self.seconds = self.seconds + other.seconds if sequential else max(self.seconds, other.seconds)
        self.latencies.extend(other.latencies)

    @property
    def per_second(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


class LoadGenerator:
    """A pool of client processes, started once and reused for every measurement."""

    def __init__(self, processes: int, threads: int) -> None:
        self.processes = processes
        self.threads = threads
        # spawn, not fork: the benchmark process holds Redis and database connections and threads.
        self.pool = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"))

    def __enter__(self) -> LoadGenerator:
        # Start the processes now, so that their start-up is not inside the first measurement.
        for future in [self.pool.submit(time.sleep, 0) for _ in range(self.processes)]:
            future.result()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    @property
    def connections(self) -> int:
        return self.processes * self.threads

    def run(self, workload: Workload, seconds: float) -> Tally:
        futures: list[Future[Tally]] = [
            self.pool.submit(drive, workload, self.threads, seconds, seed) for seed in range(self.processes)
        ]
        total = Tally()
        for future in futures:
            total.add(future.result(timeout=seconds + 60))
        return total


def drive(workload: Workload, threads: int, seconds: float, seed: int) -> Tally:
    """One client process: `threads` connections for `seconds` (runs in a pool process)."""
    stop_at = time.monotonic() + seconds
    tallies = [Tally() for _ in range(threads)]
    workers = [
        threading.Thread(target=_connection_loop, args=(workload, stop_at, tally, random.Random(seed * 1000 + n)))
        for n, tally in enumerate(tallies)
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    total = Tally()
    for tally in tallies:
        total.add(tally)
    total.seconds = time.monotonic() - started
    return total


def _connection_loop(workload: Workload, stop_at: float, tally: Tally, rng: random.Random) -> None:
    target = urlsplit(workload.url)
    path = target.path or "/"
    headers = {"Authorization": f"Bearer {workload.token}", "Content-Type": "application/json"}
    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    try:
        while time.monotonic() < stop_at:
            body = workload.body(rng)
            sent = time.perf_counter()
            try:
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                # A dropped keep-alive connection: count it, reconnect, carry on.
                tally.errors += 1
                connection.close()
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                continue
            if response.status == 200:
                tally.ok += 1
                tally.latencies.append(time.perf_counter() - sent)
            else:
                tally.errors += 1
    finally:
        connection.close()
