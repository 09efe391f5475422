"""`python -m bench watching`: what metrics and traces cost per agent call (docs/benchmarks.md#watching-it-python--m-bench-watching).

A `read_session` call (the relay's fastest, so the one where an added cost shows most) is made
through the WSGI app in a child process of its own, as `python -m bench caches` makes it, with
metrics and traces off, metrics on (`OAR_METRICS=on`, counting into a fresh multiprocess
folder), traces on (`OTEL_EXPORTER_OTLP_ENDPOINT` at an OTLP/HTTP receiver in this process that
takes each batch and drops it) and both on. The four run in turn, `--rounds` times, so that a
drift in the machine's load falls on each; the figure is the median call of all rounds, and the
difference to the run with both off is the cost per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench import stack
from bench.instructions import WARM_UP_CALLS, caller, progress, seeded_plan

ENDPOINT = "read_session"
SETUPS = ("both off", "metrics on", "traces on", "both on")


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench watching", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setup, in turn (default 3)")
    parser.add_argument("--sessions", type=int, default=200, help="seeded sessions (default 200)")
    parser.add_argument("--messages", type=int, default=20, help="messages per seeded session (default 20)")
    return parser.parse_args(argv)


def child(plan_file: Path, setup_file: Path, calls: int) -> None:
    """In a setup's own process: every call's seconds, and the process's CPU seconds over them all
    (every thread's: the span exporter's too), as JSON on stdout."""
    import os

    plan = json.loads(plan_file.read_text())
    os.environ.update(plan["env"])
    os.environ.update(json.loads(setup_file.read_text()))
    call = caller(plan, ENDPOINT)
    for _ in range(WARM_UP_CALLS):
        call()
    timed: list[float] = []
    cpu_started = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        call()
        timed.append(time.perf_counter() - started)
    print(json.dumps({"calls": timed, "cpu": time.process_time() - cpu_started}))


@contextmanager
def dropping_receiver() -> Iterator[str]:
    """An OTLP/HTTP endpoint that answers every export 200 and keeps nothing."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def setup_environment(setup: str, endpoint: str, scratch: Path) -> dict[str, str]:
    env: dict[str, str] = {"OAR_METRICS": "off"}
    if setup in ("metrics on", "both on"):
        folder = Path(tempfile.mkdtemp(prefix="metrics-", dir=scratch))
        env.update(OAR_METRICS="on", PROMETHEUS_MULTIPROC_DIR=str(folder))
    if setup in ("traces on", "both on"):
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="oar-bench")
    return env


def measured(plan_file: Path, env: dict[str, str], scratch: Path, calls: int) -> tuple[list[float], float]:
    setup_file = scratch / "setup.json"
    setup_file.write_text(json.dumps(env))
    command = [sys.executable, "-m", "bench.watching", "--child", str(plan_file), str(setup_file), str(calls)]
    done = subprocess.run(command, cwd=stack.PROJECT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {env} run failed:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.splitlines()[-1])
    return [float(seconds) for seconds in figures["calls"]], float(figures["cpu"]) / calls


def run(argv: Sequence[str]) -> int:
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), Path(argv[2]), int(argv[3]))
        return 0
    args = parse_arguments(argv)
    times: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    cpu: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    with seeded_plan(args.sessions, args.messages) as plan_file, dropping_receiver() as endpoint, \
            tempfile.TemporaryDirectory(prefix="oar-bench-watching-") as scratch_dir:
        scratch = Path(scratch_dir)
        for number in range(1, args.rounds + 1):
            for setup in SETUPS:
                progress(f"round {number}/{args.rounds}: {setup}, {args.calls} calls")
                calls, cpu_per_call = measured(plan_file, setup_environment(setup, endpoint, scratch), scratch, args.calls)
                times[setup].extend(calls)
                cpu[setup].append(cpu_per_call)
    print("OAR Relay benchmark: watching it (read_session through the WSGI app, one process per run, no HTTP server)")
    print(f"database     SQLite, {args.sessions:,} sessions × {args.messages} messages; {args.rounds} rounds × "
          f"{args.calls} calls per setup after {WARM_UP_CALLS} warm-up calls")
    off, off_cpu = statistics.median(times["both off"]), statistics.median(cpu["both off"])
    print(f"{'setup':<14}{'median µs':>11}{'+ µs':>8}{'CPU µs':>9}{'+ µs':>8}   (CPU: the process's, every thread, per call; median of the runs)")
    for setup in SETUPS:
        median, used = statistics.median(times[setup]), statistics.median(cpu[setup])
        print(f"{setup:<14}{median * 1e6:>11.0f}{(median - off) * 1e6:>+8.0f}{used * 1e6:>9.0f}{(used - off_cpu) * 1e6:>+8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
