"""`python -m bench providers`: turns on a real provider kind against the fake LLM API.

50 sessions (by default) each get one prompt at once; the fake `chat` server streams a
2,000-token reply to each over real HTTP/SSE, at 100 tokens/s per stream (by default; 0: as
fast as the relay reads). Figures: relay overhead per turn — from the fake handing over the
last byte of the stream (`time.time()`) to the relay stamping the turn `done`
(`completed_at`, same machine clock) — as p50/p99; the total throughput (turns and streamed
tokens per second, from the first prompt to the last reply); the worker processes' CPU time
per 1,000 streamed tokens; the memory (RSS) of all relay processes idle and at the peak of
the load. `--ramp` then raises the per-stream rate, doubling it, until the relay no longer
keeps up (p99 overhead above 50 ms, or a stream taking 10 % longer than its rate says: the
relay's reads held the fake back). `--spread F` gives the replies different lengths, spread
evenly over tokens × (1 ± F) with the same mean, so that the streams end at different
moments as real replies do; by default (0) all 50 end within the same tenth of a second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from bench import report, stack, usage
from bench.owner import Owner
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message
from tests.fakes.llm import FakeLLM

SETTLE_SECONDS = 600
# The goal of issue #37: the relay's overhead per streamed turn, p99 (50 streams at 100 tokens/s).
OVERHEAD_P99_GOAL_MS = 50.0
# What "keeps up" means for --ramp: that goal, and how much longer than its rate says a stream
# may take (socket buffers full: the relay reads slower than it is sent).
RAMP_P99_MS = OVERHEAD_P99_GOAL_MS
RAMP_STRETCH = 1.10
RAMP_LIMIT = 12_800  # tokens/s per stream the ramp stops at, kept up or not
RSS_SAMPLE_SECONDS = 1.0


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Round:
    sessions: int
    tokens: int
    rate: float  # tokens/s per stream the fake sent at; 0: as fast as possible
    overhead_ms: list[float]
    stretch: list[float]  # each stream's time from first to last byte ÷ what its rate says
    sent_per_second: float  # tokens/s the fake sent, from its first byte to its last, all streams
    wall: float
    worker_cpu: float  # seconds of CPU of the worker process tree during the round
    web_cpu: float
    peak_rss: int
    peak_pss: int

    @property
    def streamed(self) -> int:
        return self.sessions * self.tokens

    @property
    def tokens_per_second(self) -> float:
        return self.streamed / self.wall

    @property
    def cpu_ms_per_1000(self) -> float:
        return self.worker_cpu / self.streamed * 1000 * 1000

    def kept_up(self) -> bool:
        return report.percentile(self.overhead_ms, 0.99) <= RAMP_P99_MS and max(self.stretch) <= RAMP_STRETCH


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench providers", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50, help="concurrent sessions (default 50)")
    parser.add_argument("--tokens", type=int, default=2000, help="tokens per reply (default 2000)")
    parser.add_argument(
        "--tokens-per-second", type=float, default=100.0,
        help="tokens/s the fake sends per stream (default 100; 0: as fast as the relay reads)",
    )
    parser.add_argument(
        "--spread", type=float, default=0.0,
        help="reply lengths spread evenly over tokens × (1 ± spread), the same mean (default 0: all alike)",
    )
    parser.add_argument("--ramp", action="store_true", help="then double the per-stream rate until the relay falls behind")
    parser.add_argument("--ramp-seconds", type=float, default=5.0, help="length of one ramp round's streams (default 5)")
    args = parser.parse_args(argv)
    fake = FakeLLM(tokens_per_second=args.tokens_per_second).start()
    try:
        with stack.prepared() as ready, stack.started(ready) as running:
            owner = Owner(running.relay.url, ready.owner_token)
            owner.open_to_agents()
            owner.call("PUT", "/providers/fake", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key})
            load_average = os.getloadavg()[0]
            idle_rss, idle_pss = usage.memory_total(running.pids)
            pace = f"{args.tokens_per_second:g} tokens/s per stream" if args.tokens_per_second else "as fast as possible"
            progress(f"{args.sessions} sessions × one {args.tokens:,}-token reply, all at once, {pace}")
            main = one_round(owner, fake, ready.data_dir, running.pids, args.sessions, args.tokens, "main", args.spread)
            lines = [
                "OAR Relay benchmark: providers",
                f"machine      load average {load_average:.2f} before measuring",
                f"workload     {args.sessions} concurrent sessions on a `chat` provider, {args.tokens:,}-token "
                f"replies streamed over HTTP/SSE from a local fake, {pace}; "
                f"{running.worker_processes} RQ worker processes",
                *round_lines(main),
                f"memory       all relay processes (web, worker, clock, redis), RSS: {usage.megabytes(idle_rss)} idle, "
                f"{usage.megabytes(main.peak_rss)} at the peak of the load; PSS: {usage.megabytes(idle_pss)} idle, "
                f"{usage.megabytes(main.peak_pss)} at the peak",
                report.p99_goal_line(f"{args.sessions} streams at {args.tokens_per_second:g} tokens/s: overhead",
                                     main.overhead_ms, OVERHEAD_P99_GOAL_MS),
            ]
            if args.ramp:
                lines += ramp(owner, fake, ready.data_dir, running.pids, args)
            print("\n".join(lines), flush=True)
    finally:
        fake.stop()
    return 0


def round_lines(result: Round) -> list[str]:
    return [
        report.latency_line(f"relay overhead per turn ({result.sessions} turns)", result.overhead_ms),
        f"throughput   {result.sessions / result.wall:.1f} turns/s, {result.tokens_per_second:,.0f} "
        f"tokens/s ({result.wall:.1f} s from the first prompt to the last reply; the fake sent "
        f"{result.sent_per_second:,.0f} tokens/s from its first byte to its last)",
        f"relay CPU    worker processes {result.cpu_ms_per_1000:.1f} ms per 1,000 tokens "
        f"({result.worker_cpu:.2f} s for {result.streamed:,}); web {result.web_cpu:.2f} s",
    ]


def ramp(owner: Owner, fake: FakeLLM, data_dir: Path, pids: dict[str, int], args: argparse.Namespace) -> list[str]:
    """Double the per-stream rate from 200 tokens/s until a round does not keep up."""
    lines = [f"ramp         {args.sessions} streams, each round {args.ramp_seconds:g} s of tokens; kept up: "
             f"p99 overhead ≤ {RAMP_P99_MS:g} ms and no stream {RAMP_STRETCH - 1:.0%} longer than its rate says"]
    best = None
    rate = max(200.0, args.tokens_per_second * 2)
    while rate <= RAMP_LIMIT:
        fake.tokens_per_second = rate
        tokens = int(rate * args.ramp_seconds)
        progress(f"ramp: {args.sessions} streams × {rate:g} tokens/s")
        result = one_round(owner, fake, data_dir, pids, args.sessions, tokens, f"ramp{rate:g}")
        kept = result.kept_up()
        lines.append(
            f"  {rate:>6g}/s per stream, offered {args.sessions * rate:>7,.0f}/s: sent {result.sent_per_second:>7,.0f}/s "
            f"(longest stream × {max(result.stretch):.2f}), "
            f"overhead p50 {report.percentile(result.overhead_ms, 0.5):7.2f} ms p99 {report.percentile(result.overhead_ms, 0.99):8.2f} ms, "
            f"worker CPU {result.cpu_ms_per_1000:.1f} ms/1,000 tokens {'kept up' if kept else 'FELL BEHIND'}"
        )
        if not kept:
            break
        best = result
        rate *= 2
    if best is not None:
        lines.append(f"highest sustained aggregate: {best.sent_per_second:,.0f} tokens/s ({best.sessions} × {best.rate:g}/s)")
    return lines


def spread_note(spread: float) -> str:
    return f" (lengths spread ± {spread:.0%}, the same mean)" if spread else ""


def lengths(sessions: int, tokens: int, spread: float) -> list[int]:
    """Reply lengths evenly over tokens × (1 ± spread), in an order that mixes short and long."""
    if sessions < 2 or not spread:
        return [tokens] * sessions
    even = [round(tokens * (1 - spread + 2 * spread * n / (sessions - 1))) for n in range(sessions)]
    return even[::2] + even[1::2]


def one_round(
    owner: Owner, fake: FakeLLM, data_dir: Path, pids: dict[str, int], sessions: int, tokens: int, label: str,
    spread: float = 0.0,
) -> Round:
    sizes = lengths(sessions, tokens, spread)
    prompts = [f"#long {size} {label} session {number}" for number, size in enumerate(sizes)]
    before = usage.sample_all(pids)
    started = time.time()
    with ThreadPoolExecutor(max_workers=min(sessions, 64)) as pool:
        created = list(pool.map(
            lambda text: owner.call("POST", "/sessions", {"title": text[-20:], "provider": "fake", "text": text}),
            prompts,
        ))
    by_message = {body["message_id"]: text for body, text in zip(created, prompts, strict=True)}
    peak = [0, 0]

    def watch_memory() -> None:
        peak[:] = map(max, peak, usage.memory_total(pids))

    completed = wait_until_done(data_dir, list(by_message), watch_memory)
    after = usage.sample_all(pids)
    failed = [mid for mid, (status, _) in completed.items() if status != "done"]
    if failed:
        raise RuntimeError(f"{len(failed)} turns did not finish: {failed[:5]}")
    return Round(
        sessions=sessions, tokens=tokens, rate=fake.tokens_per_second,
        overhead_ms=[(completed[mid][1] - fake.last_byte[text]) * 1000 for mid, text in by_message.items()],
        stretch=[
            (fake.last_byte[text] - fake.first_byte[text]) * fake.tokens_per_second / size if fake.tokens_per_second else 1.0
            for text, size in zip(prompts, sizes, strict=True)
        ],
        sent_per_second=sum(sizes) / (max(fake.last_byte[t] for t in prompts) - min(fake.first_byte[t] for t in prompts)),
        wall=max(stamp for _, stamp in completed.values()) - started,
        worker_cpu=after["worker"].cpu_seconds - before["worker"].cpu_seconds,
        web_cpu=after["web"].cpu_seconds - before["web"].cpu_seconds,
        peak_rss=peak[0],
        peak_pss=peak[1],
    )


def wait_until_done(
    data_dir: object, message_ids: list[str], every_second: Callable[[], None] = lambda: None
) -> dict[str, tuple[str, float]]:
    """Each prompt's final status and `completed_at` (as time.time()), read from the database."""
    open_database(Config(data_dir=data_dir))  # type: ignore[arg-type]
    deadline = time.monotonic() + SETTLE_SECONDS
    next_sample = 0.0
    while True:
        if time.monotonic() >= next_sample:
            every_second()
            next_sample = time.monotonic() + RSS_SAMPLE_SECONDS
        with database.connection_context():
            rows = list(Message.select(Message.id, Message.status, Message.completed_at).where(Message.id.in_(message_ids)))
        settled = {row.id: (str(row.status), row.completed_at.replace(tzinfo=UTC).timestamp()) for row in rows if row.completed_at}
        if len(settled) == len(message_ids):
            return settled
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(settled)} of {len(message_ids)} turns settled in {SETTLE_SECONDS} s")
        time.sleep(0.2)
