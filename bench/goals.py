"""`python -m bench goals`: every part of the benchmark that measures a goal of issue #37, one
after the other, each in a process of its own; their output passes through, then the goals'
table: each figure beside its goal, met or not (docs/benchmarks.md#every-goal-at-once-python--m-bench-goals).

The parts run in turn, never at once: each measures CPU or latency on the same cores. About 20
minutes on a 2-core machine, most of it the main run's schedules and the 1 GB task output.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
# Each part's command line after `python -m bench`, in the order they run.
PARTS: tuple[tuple[str, ...], ...] = (
    ("calls",),
    ("startup",),
    ("footprint",),
    ("footprint", "--procfile"),
    ("idle",),
    ("--schedules", "1000"),
    ("delivery",),
    ("providers",),
    ("tasks", "--gigabyte"),
)
GOAL_PREFIX = "goal  "


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench goals", description=__doc__.splitlines()[0])
    parser.add_argument("--skip", action="append", default=[], metavar="PART",
                        help="leave a part out (its first word: calls, startup, footprint, idle, "
                             "main, delivery, providers, tasks); may be given more than once")
    return parser.parse_args(argv)


def part_name(part: tuple[str, ...]) -> str:
    return "main" if part[0].startswith("--") else part[0]


def run_part(part: tuple[str, ...]) -> tuple[int, list[str]]:
    """Runs one part, passing its output through; returns its exit status and its goal lines."""
    print(f"\n== python -m bench {' '.join(part)}", flush=True)
    process = subprocess.Popen([sys.executable, "-m", "bench", *part], cwd=PROJECT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    goals = []
    for line in process.stdout:
        print(line, end="", flush=True)
        if line.startswith(GOAL_PREFIX):
            goals.append(line.rstrip("\n"))
    return process.wait(), goals


def head() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT, capture_output=True, text=True)
    return commit.stdout.strip() or "unknown commit"


def run(argv: Sequence[str]) -> int:
    args = parse_arguments(argv)
    load_before = os.getloadavg()[0]
    table: list[str] = []
    failed: list[str] = []
    for part in PARTS:
        if part_name(part) in args.skip:
            continue
        status, goals = run_part(part)
        table += goals
        if status != 0:
            failed.append(" ".join(part))
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n== every goal, {today}, {head()}, {os.cpu_count()} CPUs, load average {load_before:.2f} before the first part")
    print("\n".join(table), flush=True)
    for part in failed:
        print(f"python -m bench {part} failed: its goals are missing above", flush=True)
    unmet = sum(1 for line in table if line.endswith("NOT MET"))
    print(f"{len(table)} figures; {unmet} goals not met", flush=True)
    return 1 if failed else 0
