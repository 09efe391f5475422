"""`python -m bench tasks`: the time read_task_output takes for the tail of 1 MB, 100 MB and
(with --gigabyte) 1 GB outputs, read from the output file (SQLite, one node) and from the
database (PostgreSQL, any node: docs/tasks.md#where-the-output-is-kept). Either way the tail
is read from the end, so the time should stay flat as the output grows.

Each output is a test-runner-like log (varied lines, repeated lines, ANSI colours, a
credential) written to a temporary folder, then read as the action reads it (`read_window`
or the stored pieces through `window_of`, then `render`: ANSI, masking, folding, counts)
`--repeats` times. For the database, the file's end is first copied as a running task's job
copies it (`copy_new_bytes`), into a fresh PostgreSQL database on the server `--postgres`
names (created and dropped here), else into a temporary SQLite file; the copy of the end and
the copy of one more second of a busy task's output are timed too.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import peewee

from bench import report
from oar.background.output_store import copy_new_bytes, pieces_from_the_end
from oar.background.task_output import Tail, Window, read_window, render, window_of
from oar.core.config import Config
from oar.core.db import database, open_database, write_transaction
from oar.core.models import Session, Task
from oar.core.timeutil import utcnow
from oar.owner.bootstrap import migrate

MB = 1024 * 1024
# Issue #37: the tail read stays flat as the output grows. "Flat" here: the largest output's
# tail p50 within × 1.5 of the 1 MB output's (a read that scanned the file would be × 100 at 100 MB).
FLAT_GOAL_RATIO = 1.5
BLOCK = "".join(
    f"\x1b[32mPASSED\x1b[0m tests/test_mod_{n % 97}.py::test_case_{n} token=sk-ant-api03-{n:032d}\n"
    + ("progress 42%\n" * (n % 3))
    for n in range(2000)
).encode()
# What a busy task adds in a second, copied by its job once a second.
ONE_SECOND_OF_OUTPUT = BLOCK[: BLOCK.rindex(b"\n", 0, 64 * 1024) + 1]
SUMMARY = b"== 1 failed, 2000 passed in 12.34s ==\n"


def write_output(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            handle.write(BLOCK)
            written += len(BLOCK)
        handle.write(SUMMARY)


def measure(read: Callable[[], object], repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        tail = read()
        timings.append(time.perf_counter() - started)
        if isinstance(tail, Tail):
            assert tail.counts and tail.counts["final"], tail.counts
    return timings


@contextlib.contextmanager
def bench_database(folder: Path, postgres: str | None) -> Iterator[str]:
    """A migrated database bound to `oar.core.db.database`; yields what it is."""
    url = None
    if postgres:
        url = urlunsplit(urlsplit(postgres)._replace(path=f"/oar_bench_{secrets.token_hex(4)}"))
        _outside_transactions(postgres, f'CREATE DATABASE "{urlsplit(url).path[1:]}"')
    try:
        open_database(Config(data_dir=folder, database_url=url))
        migrate()
        yield "PostgreSQL" if url else "SQLite"
    finally:
        database.close()
        if hasattr(database.obj, "close_all"):
            database.obj.close_all()
        if url:
            _outside_transactions(postgres or "", f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')


def _outside_transactions(server_url: str, sql: str) -> None:
    parts = urlsplit(server_url)
    admin = peewee.PostgresqlDatabase(parts.path.lstrip("/") or "postgres", host=parts.hostname, port=parts.port or 5432,
                                      user=parts.username or "postgres", password=parts.password)
    admin.connect()
    admin.connection().autocommit = True
    try:
        admin.execute_sql(sql)
    finally:
        admin.close()


def copy(task_id: str, path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb") as handle, database.connection_context(), write_transaction():
        copy_new_bytes(task_id, handle)
    return time.perf_counter() - started


def file_tail(path: Path, lines: int) -> Tail:
    return render(read_window(path, lines), lines)


def stored_tail(task_id: str, lines: int) -> Tail:
    with database.connection_context():
        return render(window_of(pieces_from_the_end(task_id), lines), lines)


def stored_window(task_id: str, lines: int) -> Window:
    with database.connection_context():
        return window_of(pieces_from_the_end(task_id), lines)


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tasks", description=__doc__.splitlines()[0])
    parser.add_argument("--gigabyte", action="store_true", help="also measure a 1 GB output (writes 1 GB to the temp dir)")
    parser.add_argument("--repeats", type=int, default=50, help="reads per size (default 50)")
    parser.add_argument("--lines", type=int, default=50, help="lines asked for (default 50, the action's default)")
    parser.add_argument("--postgres", metavar="URL",
                        help="a PostgreSQL server (postgresql://user@host:5432/postgres) to keep the output in; "
                             "default: a temporary SQLite file")
    args = parser.parse_args(argv)
    sizes = [1 * MB, 100 * MB] + ([1024 * MB] if args.gigabyte else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="oar-bench-tasks-") as folder, \
            bench_database(Path(folder), args.postgres) as kind:
        with database.connection_context():
            Session.create(id="benchtasks", title="bench", provider="echo")
        for number, size in enumerate(sizes):
            path = Path(folder) / f"{size // MB}mb.log"
            print(f"[bench] writing {size // MB} MB", file=sys.stderr, flush=True)
            write_output(path, size)
            task_id = f"bench{number}"
            with database.connection_context():
                Task.create(id=task_id, session="benchtasks", description="bench", command="true", status="running",
                            output_path=str(path), started_at=utcnow())
            copied = copy(task_id, path)
            increments = []
            for _ in range(20):
                with open(path, "ab") as handle:
                    handle.write(ONE_SECOND_OF_OUTPUT)
                increments.append(copy(task_id, path))
            with open(path, "ab") as handle:
                handle.write(SUMMARY)
            copy(task_id, path)
            read_file = functools.partial(file_tail, path, args.lines)
            read_database = functools.partial(stored_tail, task_id, args.lines)
            measure(read_file, 3)  # a warm page cache, as for recent output
            from_file = measure(read_file, args.repeats)
            measure(read_database, 3)
            from_database = measure(read_database, args.repeats)
            file_only = measure(functools.partial(read_window, path, args.lines), args.repeats)
            database_only = measure(functools.partial(stored_window, task_id, args.lines), args.repeats)
            rows.append((size, from_file, from_database, file_only, database_only, copied, increments))
            path.unlink()
    print(f"read_task_output tail read, {args.lines} lines, {args.repeats} reads per size (ms); the file with a warm "
          f"page cache, the database: {kind}")
    print("  tail: read + render (ANSI, masking, folding, counts); read: the window alone; "
          "copy: the end of the file at once, then 64 KiB more (p50 of 20)")
    print(f"{'output':>9}  {'file tail p50':>13}  {'p99':>7}  {'db tail p50':>11}  {'p99':>7}  "
          f"{'file read p50':>13}  {'db read p50':>11}  {'copy end':>8}  {'copy 64K':>8}")
    for size, from_file, from_database, file_only, database_only, copied, increments in rows:
        print(f"{size // MB:>6} MB  {statistics.median(from_file) * 1000:13.2f}  {report.percentile(from_file, 0.99) * 1000:7.2f}  "
              f"{statistics.median(from_database) * 1000:11.2f}  {report.percentile(from_database, 0.99) * 1000:7.2f}  "
              f"{statistics.median(file_only) * 1000:13.2f}  {statistics.median(database_only) * 1000:11.2f}  "
              f"{copied * 1000:8.2f}  {statistics.median(increments) * 1000:8.2f}")
    print(flatness_line(rows[0][0], statistics.median(rows[0][1]), rows[-1][0], statistics.median(rows[-1][1])))
    return 0


def flatness_line(small: int, small_p50: float, large: int, large_p50: float) -> str:
    ratio = large_p50 / small_p50
    return report.goal_line(f"read_task_output tail, {small // MB} MB → {large // MB:,} MB",
                            f"p50 × {ratio:.2f} ({small_p50 * 1000:.2f} → {large_p50 * 1000:.2f} ms)",
                            f"≤ × {FLAT_GOAL_RATIO:g}", ratio <= FLAT_GOAL_RATIO)
