"""`python -m bench tasks`: the time read_task_output takes for the tail of 1 MB, 100 MB and
(with --gigabyte) 1 GB outputs. The tail is read from the end of the file, so the time
should stay flat as the output grows.

Each output is a test-runner-like log (varied lines, repeated lines, ANSI colours, a
credential) written to a temporary folder, then read as the action reads it
(`read_window` + `render`: ANSI, masking, folding, counts) `--repeats` times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import report
from oar.background.task_output import read_window, render

MB = 1024 * 1024
BLOCK = "".join(
    f"\x1b[32mPASSED\x1b[0m tests/test_mod_{n % 97}.py::test_case_{n} token=sk-ant-api03-{n:032d}\n"
    + ("progress 42%\n" * (n % 3))
    for n in range(2000)
).encode()


def write_output(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            handle.write(BLOCK)
            written += len(BLOCK)
        handle.write(b"== 1 failed, 2000 passed in 12.34s ==\n")


def measure(path: Path, lines: int, repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        tail = render(read_window(path, lines), lines)
        timings.append(time.perf_counter() - started)
        assert tail.counts and tail.counts["final"], tail.counts
    return timings


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tasks", description=__doc__.splitlines()[0])
    parser.add_argument("--gigabyte", action="store_true", help="also measure a 1 GB output (writes 1 GB to the temp dir)")
    parser.add_argument("--repeats", type=int, default=50, help="reads per size (default 50)")
    parser.add_argument("--lines", type=int, default=50, help="lines asked for (default 50, the action's default)")
    args = parser.parse_args(argv)
    sizes = [1 * MB, 100 * MB] + ([1024 * MB] if args.gigabyte else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="oar-bench-tasks-") as folder:
        for size in sizes:
            path = Path(folder) / f"{size // MB}mb.log"
            print(f"[bench] writing {size // MB} MB", file=sys.stderr, flush=True)
            write_output(path, size)
            measure(path, args.lines, 3)  # warm the page cache, as a task's recent output is
            timings = measure(path, args.lines, args.repeats)
            rows.append((size, timings))
            path.unlink()
    print("read_task_output tail read (read_window + render), "
          f"{args.lines} lines, {args.repeats} reads per size, warm page cache")
    print(f"{'output':>10}  {'p50 ms':>8}  {'p99 ms':>8}  {'max ms':>8}")
    for size, timings in rows:
        print(f"{size // MB:>7} MB  {statistics.median(timings) * 1000:8.2f}  "
              f"{report.percentile(timings, 0.99) * 1000:8.2f}  {max(timings) * 1000:8.2f}")
    return 0
