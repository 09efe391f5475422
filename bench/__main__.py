"""`python -m bench`: start a relay and a bare Flask baseline, measure, print, stop.

Figures (docs/benchmarks.md says what each means):
- throughput of relay_tool `read_session` and `list_sessions` with 1,000 sessions × 50
  messages in the database, and of a bare Flask JSON endpoint served the same way; the
  ratio relay ÷ bare is the figure to compare across machines;
- wake latency of `send` (reply completed → waiting send returned) and send round trip.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from bench import report, schedules, seed, stack, usage, wake
from bench.load import LoadGenerator, Tally, Workload
from bench.owner import Owner

WARM_UP_SECONDS = 1.0
# The goals of issue #37 this run measures (the others: `python -m bench goals`).
WAKE_P99_GOAL_MS = 5.0
FIRING_P99_GOAL_MS = 50.0


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "part", nargs="?", choices=("all", "schedules"), default="all",
        help="what to measure: everything (default), or only schedule firing accuracy; "
        "`python -m bench tasks [--gigabyte] [--postgres URL]`, `python -m bench providers`, `python -m bench delivery`, "
        "`python -m bench idle`, `python -m bench footprint`, `python -m bench calls`, `python -m bench startup`, `python -m bench instructions`, `python -m bench caches`, "
        "`python -m bench outside`, `python -m bench decisions` and `python -m bench watching` run one part alone; "
        "`python -m bench goals` runs every part with a goal and prints each figure beside its goal",
    )
    parser.add_argument(
        "--schedules", type=int, default=1000, help="schedules due within one minute (default 1000; 0: none)"
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one measurement round (default 4)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds, each measuring every endpoint in turn (default 2)"
    )
    parser.add_argument("--processes", type=int, default=2, help="load generator processes (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="connections per load generator process (default 8)")
    parser.add_argument("--sessions", type=int, default=1000, help="seeded sessions (default 1000)")
    parser.add_argument("--messages", type=int, default=50, help="messages per seeded session (default 50)")
    parser.add_argument("--sends", type=int, default=200, help="sends for the wake latency (default 200)")
    parser.add_argument("--warm-up-sends", type=int, default=20, help="sends made first and not counted (default 20)")
    return parser.parse_args(argv)


def progress(text: str) -> None:
    """Progress goes to stderr; stdout holds only the figures."""
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def check_workload(workload: Workload) -> None:
    """One request by hand first: a misconfigured run should fail loudly, not measure errors."""
    response = requests.post(
        workload.url,
        data=workload.body(random.Random(0)),
        headers={"Authorization": f"Bearer {workload.token}", "Content-Type": "application/json"},
        timeout=30,
    )
    if response.status_code != 200 or response.json().get("ok") is not True:
        raise RuntimeError(f"{workload.url} answered {response.status_code}: {response.text[:500]}")


@dataclass
class Measured:
    """One endpoint's requests over every round, and the CPU its server's processes used meanwhile."""

    tally: Tally
    server_cpu_seconds: float = 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return self.server_cpu_seconds * 1000 / self.tally.ok if self.tally.ok else float("nan")


def measure_throughput(
    load: LoadGenerator, workloads: dict[str, tuple[Workload, int]], seconds: float, rounds: int
) -> dict[str, Measured]:
    """Every endpoint in turn, `rounds` times, so that drift in the machine's load (other
    jobs on a shared machine) spreads over all endpoints instead of falling on one. Each
    workload comes with the pid of the server answering it: the CPU (user + system) of that
    server's processes over each round, divided by the requests answered, is steadier than
    req/s on a machine shared with other jobs (their load takes cores, not CPU time)."""
    for name, (workload, _pid) in workloads.items():
        check_workload(workload)
        progress(f"warming up {name}")
        load.run(workload, WARM_UP_SECONDS)
    totals = {name: Measured(Tally()) for name in workloads}
    for number in range(1, rounds + 1):
        for name, (workload, pid) in workloads.items():
            progress(f"round {number}/{rounds}: {name} for {seconds:g} s")
            before = usage.sample(pid).cpu_seconds
            totals[name].tally.add(load.run(workload, seconds), sequential=True)
            totals[name].server_cpu_seconds += usage.sample(pid).cpu_seconds - before
    return totals


def throughput_rows(totals: dict[str, Measured], baseline: str) -> list[report.ThroughputRow]:
    bare = totals[baseline].tally.per_second
    bare_cpu = totals[baseline].cpu_ms_per_request
    return [
        report.ThroughputRow(
            name=name,
            per_second=measured.tally.per_second,
            p50_ms=report.percentile(measured.tally.latencies, 0.50) * 1000,
            p99_ms=report.percentile(measured.tally.latencies, 0.99) * 1000,
            errors=measured.tally.errors,
            ratio=measured.tally.per_second / bare if bare else float("nan"),
            cpu_ms=measured.cpu_ms_per_request,
            cpu_ratio=bare_cpu / measured.cpu_ms_per_request if measured.cpu_ms_per_request else float("nan"),
        )
        for name, measured in totals.items()
    ]


@dataclass(frozen=True)
class Results:
    seeded: seed.Seeded
    shape: stack.GunicornShape
    worker_processes: int
    connections: int
    load_average: float
    throughput: dict[str, Measured]
    wake: wake.WakeFigures
    firing: schedules.FiringFigures | None = None


def relay_workloads(
    running: stack.Running, token: str, session_ids: Sequence[str]
) -> dict[str, tuple[Workload, int]]:
    """The three measured endpoints, each with its server's pid; the first is the baseline
    the ratios divide by."""
    endpoint = "/api/v1/relay_tool"
    read = {"action": "read_session", "relay": "this"}
    relay, bare = running.relay, running.bare
    return {
        # The bare server gets the same bytes as read_session; it ignores them.
        "bare Flask JSON (baseline)": (Workload(bare.url + endpoint, token, read, tuple(session_ids)), bare.pid),
        "relay_tool read_session": (Workload(relay.url + endpoint, token, read, tuple(session_ids)), relay.pid),
        "relay_tool list_sessions": (
            Workload(relay.url + endpoint, token, {"action": "list_sessions", "relay": "this"}), relay.pid
        ),
    }


def run(args: argparse.Namespace) -> Results:
    """The whole benchmark: every process it starts is stopped and every file removed on return."""
    with stack.prepared() as ready:
        progress(f"seeding {args.sessions:,} sessions × {args.messages} messages")
        seeded = seed.seed(ready.data_dir, args.sessions, args.messages)
        progress("starting the relay (web, worker, clock) and the bare Flask baseline")
        with stack.started(ready) as running, LoadGenerator(args.processes, args.threads) as load:
            load_average = os.getloadavg()[0]
            owner = Owner(running.relay.url, ready.owner_token)
            owner.open_to_agents()
            _caller, token = owner.conversation("bench")
            workloads = relay_workloads(running, token, seeded.session_ids)
            throughput = measure_throughput(load, workloads, args.seconds, args.rounds)
            progress(f"{args.warm_up_sends} + {args.sends} sends to an echo session, one at a time")
            timings = wake.measure_sends(running.relay.url, owner, args.sends, args.warm_up_sends)
            firing = measure_firing(args, running, owner, ready.data_dir)
        return Results(
            seeded=seeded,
            shape=running.shape,
            worker_processes=running.worker_processes,
            connections=load.connections,
            load_average=load_average,
            throughput=throughput,
            wake=wake.figures(ready.data_dir, timings),
            firing=firing,
        )


def measure_firing(
    args: argparse.Namespace, running: stack.Running, owner: Owner, data_dir: Path
) -> schedules.FiringFigures | None:
    if args.schedules <= 0:  # `--schedules 0`: no firing figure (the relay's reads and wakes alone)
        return None
    progress(f"{args.schedules:,} schedules due within one minute (about two minutes)")
    return schedules.measure(running.relay.url, owner, data_dir, args.schedules)


def run_schedules_only(args: argparse.Namespace) -> schedules.FiringFigures | None:
    """`python -m bench schedules`: a fresh relay, no seeded data, only firing accuracy."""
    with stack.prepared() as ready, stack.started(ready) as running:
        owner = Owner(running.relay.url, ready.owner_token)
        owner.open_to_agents()
        return measure_firing(args, running, owner, ready.data_dir)


def firing_line(firing: schedules.FiringFigures) -> str:
    return report.latency_line(f"schedule firing lag ({firing.count:,} due in 1 min)", firing.lag_ms)


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown CPU"


def render(args: argparse.Namespace, results: Results) -> str:
    sends = len(results.wake.wake_ms)
    return "\n".join(
        [
            "OAR Relay benchmark",
            f"machine      {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, load average {results.load_average:.2f} before measuring",
            f"servers      {results.shape.describe()} (gunicorn.conf.py), relay and baseline alike; "
            f"the relay also runs {results.worker_processes} RQ worker processes and the clock",
            f"database     SQLite, {args.sessions:,} sessions × {args.messages} messages "
            f"({results.seeded.messages:,} messages, seeded in {results.seeded.seconds:.1f} s); embedded Redis",
            f"load         {results.connections} keep-alive connections ({args.processes} processes × {args.threads} "
            f"threads), {args.rounds} × {args.seconds:g} s per endpoint",
            "",
            report.throughput_table(throughput_rows(results.throughput, next(iter(results.throughput)))),
            "",
            report.latency_line(f"wake latency ({sends} sends)", results.wake.wake_ms),
            report.latency_line(f"send round trip ({sends} sends)", results.wake.round_trip_ms),
            *([firing_line(results.firing)] if results.firing else []),
            "",
            report.p99_goal_line("wake latency", results.wake.wake_ms, WAKE_P99_GOAL_MS),
            *([report.p99_goal_line("schedule firing lag", results.firing.lag_ms, FIRING_P99_GOAL_MS)]
              if results.firing else []),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["goals"]:  # `python -m bench goals`: every part with a goal, then the goals' table
        from bench import goals

        return goals.run(argv[1:])
    if argv[:1] == ["tasks"]:  # `python -m bench tasks [--gigabyte]`: only the task output tail
        from bench import tasks

        return tasks.run(argv[1:])
    if argv[:1] == ["providers"]:  # `python -m bench providers`: turns streamed from a fake LLM API
        from bench import providers

        return providers.run(argv[1:])
    if argv[:1] == ["calls"]:  # `python -m bench calls`: what a call costs, measured with wrk
        from bench import calls

        return calls.run(argv[1:])
    if argv[:1] == ["startup"]:  # `python -m bench startup`: python app.py until it is healthy
        from bench import startup

        return startup.run(argv[1:])
    if argv[:1] == ["footprint"]:  # `python -m bench footprint`: memory and disk of the embedded default
        from bench import footprint

        return footprint.run(argv[1:])
    if argv[:1] == ["idle"]:  # `python -m bench idle`: CPU, wake-ups and memory of an idle relay
        from bench import idle

        return idle.run(argv[1:])
    if argv[:1] == ["paired"]:  # `python -m bench paired`: send across paired relays and on one relay
        from bench import paired

        return paired.run(argv[1:])
    if argv[:1] == ["instructions"]:  # `python -m bench instructions`: callgrind's count per read
        from bench import instructions

        return instructions.run(argv[1:])
    if argv[:1] == ["caches"]:  # `python -m bench caches`: a read's time with the caches warm and flushed
        from bench import caches

        return caches.run(argv[1:])
    if argv[:1] == ["outside"]:  # `python -m bench outside`: an agent outside the relay woken by take
        from bench import outside

        return outside.run(argv[1:])
    if argv[:1] == ["decisions"]:  # `python -m bench decisions`: a waiting agent allowed by an ntfy button
        from bench import decisions

        return decisions.run(argv[1:])
    if argv[:1] == ["watching"]:  # `python -m bench watching`: what metrics and traces cost per call
        from bench import watching

        return watching.run(argv[1:])
    if argv[:1] == ["delivery"]:  # `python -m bench delivery`: relay events fanned out to 200 watchers
        from bench import delivery

        return delivery.run(argv[1:])
    args = parse_arguments(argv)
    # SIGTERM unwinds like Ctrl-C, so that every child is stopped and the temp dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        if args.part == "schedules":
            firing = run_schedules_only(args)
            print(f"OAR Relay benchmark: schedules\nmachine      {os.cpu_count()} CPUs ({cpu_model()})", flush=True)
            if firing is not None:
                print(firing_line(firing), flush=True)
            progress(f"done in {time.monotonic() - started:.0f} s")
            return 0
        results = run(args)
    except KeyboardInterrupt:
        progress("interrupted; children stopped, temporary files removed")
        return 130
    print(render(args, results), flush=True)
    from bench import tasks

    print(flush=True)
    tasks.run([])
    from bench import providers

    print(flush=True)
    providers.run([])
    progress(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
