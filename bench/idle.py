"""`python -m bench idle`: what the relay's processes use when there is nothing to do.

A fresh relay as `python app.py`'s processes run it (web, worker, clock and the embedded
Redis), an empty database, no session: after a settling pause, the CPU time (user +
system) and wake-ups (voluntary context switches of every thread) of each process tree
over `--seconds` (default 60), as a share of one core and per second, and the memory
(RSS and PSS, bench/usage.py) of each. A loop that wakes many times a second shows in the wake-ups first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from bench import report, stack, usage

SETTLE_SECONDS = 10.0
IDLE_GOAL_PERCENT = 1.0  # issue #37: an idle relay takes less than 1 % of a core


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench idle", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the measurement (default 60)")
    args = parser.parse_args(argv)
    with stack.prepared() as ready, stack.started(ready) as running:
        progress(f"relay up; settling {SETTLE_SECONDS:g} s, then measuring {args.seconds:g} s")
        time.sleep(SETTLE_SECONDS)
        load_average = os.getloadavg()[0]
        before = usage.sample_all(running.pids)
        started = time.monotonic()
        time.sleep(args.seconds)
        after = usage.sample_all(running.pids)
        elapsed = time.monotonic() - started
    lines = [
        "OAR Relay benchmark: idle",
        f"machine      load average {load_average:.2f} before measuring; {elapsed:.0f} s with nothing to do",
        f"{'process':<10} {'CPU % of a core':>16} {'wake-ups/s':>11} {'RSS':>8} {'PSS':>8}",
    ]
    total_cpu = total_wakeups = 0.0
    total_rss = total_pss = 0
    for role, sample in after.items():
        cpu = sample.cpu_seconds - before[role].cpu_seconds
        wakeups = sample.wakeups - before[role].wakeups
        total_cpu, total_wakeups = total_cpu + cpu, total_wakeups + wakeups
        total_rss, total_pss = total_rss + sample.rss_bytes, total_pss + sample.pss_bytes
        lines.append(
            f"{role:<10} {cpu / elapsed * 100:>16.2f} {wakeups / elapsed:>11.1f} "
            f"{usage.megabytes(sample.rss_bytes):>8} {usage.megabytes(sample.pss_bytes):>8}"
        )
    lines.append(
        f"{'all':<10} {total_cpu / elapsed * 100:>16.2f} {total_wakeups / elapsed:>11.1f} "
        f"{usage.megabytes(total_rss):>8} {usage.megabytes(total_pss):>8}"
    )
    idle_percent = total_cpu / elapsed * 100
    lines.append(report.goal_line("idle CPU", f"{idle_percent:.2f} % of a core", f"< {IDLE_GOAL_PERCENT:g} %",
                                  idle_percent < IDLE_GOAL_PERCENT))
    print("\n".join(lines), flush=True)
    return 0
