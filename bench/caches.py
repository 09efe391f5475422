"""`python -m bench caches`: the time of a `read_session` and a `list_sessions` call, and of a
call of the bare Flask app, with the processor's caches warm and with them flushed.

`python -m bench instructions` counts what a call executes; it cannot say what a call costs
when what it touches is no longer in the caches, as happens under gunicorn, where the load
generator and the other processes run between two requests of one worker. Here each endpoint
runs in a child process of its own, through the WSGI app (no HTTP server, as `instructions`
calls it): `--calls` calls one after the other (warm), and `--calls` calls each after writing
one byte in every 64 of a `--flush-mib` buffer (cold: the cores' own caches, and as much of a
shared cache as the buffer covers, hold other data). Only the calls are timed; the median of
each is printed. The relay is seeded as `python -m bench` seeds it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import stack
from bench.instructions import ENDPOINTS, WARM_UP_CALLS, caller, progress, seeded_plan

CACHE_LINE = 64
# Warm and cold calls alternate in rounds of this many each, so that a drift in the machine's load falls on both.
ROUND = 50


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench caches", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per endpoint, each way (default 1000)")
    parser.add_argument("--flush-mib", type=int, default=32, help="buffer written before each cold call, in MiB (default 32)")
    parser.add_argument("--sessions", type=int, default=1000, help="seeded sessions (default 1000)")
    parser.add_argument("--messages", type=int, default=50, help="messages per seeded session (default 50)")
    return parser.parse_args(argv)


def child(plan_file: Path, endpoint: str, calls: int, flush_mib: int) -> None:
    """In an endpoint's own process: the median seconds of a warm and of a cold call, as JSON on stdout."""
    plan = json.loads(plan_file.read_text())
    os.environ.update(plan["env"])
    call = caller(plan, endpoint)
    buffer = bytearray(flush_mib << 20)
    lines = len(range(0, len(buffer), CACHE_LINE))

    def timed() -> float:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    for _ in range(WARM_UP_CALLS):
        call()
    warm: list[float] = []
    cold: list[float] = []
    for round_start in range(0, calls, ROUND):
        size = min(ROUND, calls - round_start)
        warm.extend(timed() for _ in range(size))
        for number in range(size):
            buffer[::CACHE_LINE] = bytes([number & 0xFF]) * lines
            cold.append(timed())
    print(json.dumps({"warm": statistics.median(warm), "cold": statistics.median(cold)}))


def measured(plan_file: Path, endpoint: str, args: argparse.Namespace) -> dict[str, float]:
    command = [
        sys.executable, "-m", "bench.caches", "--child", str(plan_file), endpoint, str(args.calls), str(args.flush_mib),
    ]
    done = subprocess.run(command, cwd=stack.PROJECT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{endpoint} failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.splitlines()[-1]))


def run(argv: Sequence[str]) -> int:
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), argv[2], int(argv[3]), int(argv[4]))
        return 0
    args = parse_arguments(argv)
    with seeded_plan(args.sessions, args.messages) as plan_file:
        times: dict[str, dict[str, float]] = {}
        for endpoint in ENDPOINTS:
            progress(f"{endpoint}: {args.calls} warm and {args.calls} cold calls")
            times[endpoint] = measured(plan_file, endpoint, args)
    print("OAR Relay benchmark: caches (through the WSGI app in one process per endpoint, no HTTP server)")
    print(
        f"database     SQLite, {args.sessions:,} sessions × {args.messages} messages; {args.calls} calls each way after "
        f"{WARM_UP_CALLS} warm-up calls; cold: {args.flush_mib} MiB written before each call; load average "
        f"{os.getloadavg()[0]:.2f} after the run"
    )
    print(f"{'endpoint':<16}{'warm µs':>10}{'cold µs':>10}{'cold − warm':>13}   bare ÷ this, warm / cold")
    bare = times["bare"]
    for endpoint in ENDPOINTS:
        warm, cold = times[endpoint]["warm"] * 1e6, times[endpoint]["cold"] * 1e6
        print(
            f"{endpoint:<16}{warm:>10.0f}{cold:>10.0f}{cold - warm:>13.0f}   "
            f"{bare['warm'] / times[endpoint]['warm']:.2f} / {bare['cold'] / times[endpoint]['cold']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
