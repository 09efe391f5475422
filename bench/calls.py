"""`python -m bench calls`: what one call costs, measured with wrk (docs/benchmarks.md#what-a-call-costs-python--m-bench-calls).

The relay as the Procfile runs it (`gunicorn wsgi:app` with gunicorn.conf.py, `oar worker`, `oar
clock`, an embedded Redis, SQLite seeded with `--sessions` × `--messages`) and a bare Flask JSON
endpoint served by the same gunicorn configuration (bench/bare_app.py). wrk sends each workload
for `--seconds` over `--connections` keep-alive connections, with the bare endpoint measured
again between every two workloads, `--rounds` times. For each call: requests per second and the
CPU (user + system) the server's processes used per answered request, and, beside the goal
(issue #37), its ratio to the bare endpoint: each measurement divided by the mean of the bare
measurements just before and just after it, the median of those over the rounds. A machine whose
speed drifts over a run (a virtual machine's neighbours) moves both sides of each ratio alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import requests

from bench import report, seed, stack, usage, wrk
from bench.owner import Owner
from oar.core import defaults

BASELINE = "bare Flask JSON endpoint"
# The goals of issue #37: requests per second of each call ÷ the bare endpoint's, at least.
GOALS = {
    "/healthz": 0.8,
    "relay_tool read_session": 0.5,
    "relay_tool list_sessions": 0.5,
    "MCP tools/call list_sessions": 0.4,
}
JSON = (("Content-Type", "application/json"),)
# Headers an MCP client sends on every request (docs/mcp.md).
MCP = (("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"))
SEND = "relay_tool send (echo, wait_seconds 0)"
# A conversation's agent-to-agent prompts before the owner is asked (docs/rules.md#loop-protection).
SENDS_PER_SENDER = defaults.LOOP_PROMPTS_BEFORE_CARD - 1


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


@dataclass
class Measured:
    requests: int = 0
    seconds: float = 0.0
    failed: int = 0
    cpu_seconds: float = 0.0
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    # Each measurement's req/s and CPU per request ÷ the bare endpoint's around it (`between_bare`).
    ratios: list[float] = field(default_factory=list)
    cpu_ratios: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else math.nan

    @property
    def cpu_ms(self) -> float:
        return self.cpu_seconds * 1000 / self.requests if self.requests else math.nan

    def add(self, one: Measured) -> None:
        self.requests += one.requests
        self.seconds += one.seconds
        self.failed += one.failed
        self.cpu_seconds += one.cpu_seconds
        self.p50_ms += one.p50_ms
        self.p99_ms += one.p99_ms


def between_bare(measured: Measured, before: Measured, after: Measured, into: Measured) -> None:
    """`measured` added to `into`, with its ratios to the mean of the bare endpoint's
    measurements just before and after it."""
    into.add(measured)
    into.ratios.append(measured.per_second / statistics.mean([before.per_second, after.per_second]))
    into.cpu_ratios.append(measured.cpu_ms / statistics.mean([before.cpu_ms, after.cpu_ms]))


@dataclass(frozen=True)
class Workload:
    server: stack.Server
    requests: wrk.Requests
    check: str  # what a good answer holds, looked for in one request made by hand first


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench calls", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one wrk run (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running every workload (default 2)")
    parser.add_argument("--connections", type=int, default=16, help="wrk's keep-alive connections (default 16)")
    parser.add_argument("--threads", type=int, default=2, help="wrk's threads (default 2)")
    parser.add_argument("--sessions", type=int, default=1000, help="seeded sessions (default 1000)")
    parser.add_argument("--messages", type=int, default=50, help="messages per seeded session (default 50)")
    return parser.parse_args(argv)


def relay_tool(server: stack.Server, token: str, bodies: list[dict[str, object]], check: str) -> Workload:
    return Workload(server, wrk.Requests("POST", "/api/v1/relay_tool", [json.dumps(b) for b in bodies],
                                         tokens=[token], uses_per_token=10**9, headers=JSON), check)


def workloads(running: stack.Running, token: str, session_ids: Sequence[str]) -> dict[str, Workload]:
    """Every measured call but `send` (whose senders are made per round, `send_workload`); the
    bare endpoint first, the baseline the ratios divide by. It gets read_session's bodies and
    ignores them."""
    rng = random.Random(0)
    reads = [{"action": "read_session", "relay": "this", "session": rng.choice(session_ids)} for _ in range(500)]
    listing = [{"action": "list_sessions", "relay": "this"}]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "relay_tool", "arguments": {"action": "list_sessions", "relay": "this"}}}
    relay = running.relay
    return {
        BASELINE: relay_tool(running.bare, token, reads, '"ok":true'),
        "/healthz": Workload(relay, wrk.Requests("GET", "/healthz"), '"ok":true'),
        "relay_tool read_session": relay_tool(relay, token, reads, '"ok":true'),
        "relay_tool list_sessions": relay_tool(relay, token, listing, '"ok":true'),
        "MCP tools/call list_sessions": Workload(
            relay, wrk.Requests("POST", "/mcp", [json.dumps(call)], tokens=[token], uses_per_token=10**9, headers=MCP),
            '"isError":false'),
    }


def send_workload(running: stack.Running, owner: Owner, target: str, expected: float, threads: int) -> Workload:
    """`send` with `wait_seconds: 0` to one idle echo session (it answers each in the worker,
    beside the measurement), from enough new conversations that none sends a 30th prompt:
    `expected` requests, from the bare endpoint's rate, with room to spare."""
    senders = max(threads, math.ceil(expected * 1.5 / SENDS_PER_SENDER) + threads)
    progress(f"  {senders} sender conversations for send")
    tokens = [owner.conversation(f"bench sender {n}")[1] for n in range(senders)]
    body = {"action": "send", "relay": "this", "session": target, "text": "ping", "wait_seconds": 0}
    return Workload(running.relay, wrk.Requests("POST", "/api/v1/relay_tool", [json.dumps(body)], tokens=tokens,
                                                uses_per_token=SENDS_PER_SENDER, headers=JSON), '"ok":true')


def check(name: str, workload: Workload) -> None:
    """One request by hand first: a misconfigured run fails loudly rather than measure errors."""
    asked = workload.requests
    headers = dict(asked.headers)
    if asked.tokens:
        headers["Authorization"] = f"Bearer {asked.tokens[-1]}"  # the last: never one the run uses up
    answer = requests.request(asked.method, workload.server.url + asked.path, data=asked.bodies[0] if asked.bodies else None,
                              headers=headers, timeout=30)
    if answer.status_code != 200 or workload.check not in answer.text.replace(" ", ""):
        raise RuntimeError(f"{name}: {asked.method} {asked.path} answered {answer.status_code}: {answer.text[:500]}")


def measure(name: str, workload: Workload, args: argparse.Namespace) -> Measured:
    before = usage.sample(workload.server.pid).cpu_seconds
    result = wrk.run(workload.server.url, workload.requests, args.seconds, args.threads, args.connections)
    progress(f"  {name}: {result.requests / result.seconds:,.0f} req/s, {result.non_2xx + result.socket_errors} failed")
    return Measured(
        requests=result.requests - result.non_2xx, seconds=result.seconds, failed=result.non_2xx + result.socket_errors,
        cpu_seconds=usage.sample(workload.server.pid).cpu_seconds - before, p50_ms=[result.p50_ms], p99_ms=[result.p99_ms],
    )


def one_round(running: stack.Running, owner: Owner, target: str, measured: dict[str, Workload],
              args: argparse.Namespace, totals: dict[str, Measured]) -> None:
    """Every workload once, the bare endpoint measured before the first and after each."""
    bare = totals[BASELINE]
    before = measure(BASELINE, measured[BASELINE], args)
    bare.add(before)
    for name, workload in measured.items():
        if name == BASELINE:
            continue
        this = measure(name, workload, args)
        after = measure(BASELINE, measured[BASELINE], args)
        between_bare(this, before, after, totals[name])
        bare.add(after)
        before = after
    sending = send_workload(running, owner, target, bare.per_second * args.seconds, args.threads)
    check("send", sending)
    this = measure("relay_tool send", sending, args)
    after = measure(BASELINE, measured[BASELINE], args)
    between_bare(this, before, after, totals[SEND])
    bare.add(after)


def run(argv: Sequence[str]) -> int:
    args = parse_arguments(argv)
    with stack.prepared() as ready:
        progress(f"seeding {args.sessions:,} sessions × {args.messages} messages")
        seeded = seed.seed(ready.data_dir, args.sessions, args.messages)
        progress("starting the relay (gunicorn wsgi:app, oar worker, oar clock) and the bare Flask baseline")
        with stack.started(ready) as running:
            owner = Owner(running.relay.url, ready.owner_token)
            owner.open_to_agents()
            _caller, token = owner.conversation("bench")
            target, _ = owner.conversation("bench echo target")
            measured = workloads(running, token, seeded.session_ids)
            for name, workload in measured.items():
                check(name, workload)
                wrk.run(workload.server.url, workload.requests, 1.0, args.threads, args.connections)  # warm-up
            totals = {name: Measured() for name in [*measured, SEND]}
            for number in range(1, args.rounds + 1):
                progress(f"round {number}/{args.rounds}")
                one_round(running, owner, target, measured, args, totals)
            print(render(args, running, totals), flush=True)
    return 0


def render(args: argparse.Namespace, running: stack.Running, totals: dict[str, Measured]) -> str:
    header = (f"{'call':<40}{'req/s':>9}{'× bare':>8}{'(range)':>12}{'goal':>7}{'CPU ms/req':>12}{'× bare':>8}"
              f"{'p50 ms':>8}{'p99 ms':>8}{'failed':>8}")
    lines = [
        "OAR Relay benchmark: what a call costs (wrk)",
        f"machine      {os.cpu_count()} CPUs; {running.shape.describe()} (gunicorn.conf.py), relay and bare alike",
        f"load         wrk, {args.threads} threads × {args.connections} connections, {args.rounds} × {args.seconds:g} s "
        f"per call, the bare endpoint again between every two calls; SQLite with {args.sessions:,} sessions × {args.messages} messages",
        "", header, "-" * len(header),
    ]
    for name, figures in totals.items():
        ratio, spread = (1.0, "") if name == BASELINE else (ratio_of(figures), f"{min(figures.ratios):.2f}–{max(figures.ratios):.2f}")
        cpu_ratio = 1.0 if name == BASELINE else statistics.median(figures.cpu_ratios)
        goal = GOALS.get(name)
        goal_text = "" if goal is None else f"≥{goal:g}" + (" ✓" if ratio >= goal else " ✗")
        lines.append(
            f"{name:<40}{figures.per_second:>9,.0f}{ratio:>8.2f}{spread:>12}{goal_text:>7}{figures.cpu_ms:>12.3f}"
            f"{cpu_ratio:>8.2f}{max(figures.p50_ms):>8.1f}{max(figures.p99_ms):>8.1f}{figures.failed:>8}"
        )
    lines.append("× bare: each measurement ÷ the bare endpoint's just before and after it, the median over the rounds "
                 "(range: the lowest and highest)")
    lines.append("CPU × bare: the call's server CPU per request ÷ the bare endpoint's (how many times its cost)")
    for name, goal in GOALS.items():
        ratio = ratio_of(totals[name])
        lines.append(report.goal_line(f"{name} req/s (wrk)", f"× {ratio:.2f} of the bare endpoint's", f"≥ × {goal:g}",
                                      ratio >= goal))
    return "\n".join(lines)


def ratio_of(figures: Measured) -> float:
    return statistics.median(figures.ratios)
