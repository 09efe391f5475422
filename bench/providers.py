"""`python -m bench providers`: turns on a real provider kind against the fake LLM API.

50 sessions (by default) each get one prompt at once; the fake `chat` server streams a
2,000-token reply to each over real HTTP/SSE. Figures: relay overhead per turn — from the
fake handing over the last byte of the stream (`time.time()`) to the relay stamping the
turn `done` (`completed_at`, same machine clock) — as p50/p99, and the total throughput
(turns and streamed tokens per second, from the first prompt to the last reply).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC

from bench import report, stack
from bench.owner import Owner
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message
from tests.fakes.llm import FakeLLM

SETTLE_SECONDS = 600


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench providers", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50, help="concurrent sessions (default 50)")
    parser.add_argument("--tokens", type=int, default=2000, help="tokens per reply (default 2000)")
    args = parser.parse_args(argv)
    fake = FakeLLM().start()
    try:
        with stack.prepared() as ready, stack.started(ready) as running:
            owner = Owner(running.relay.url, ready.owner_token)
            owner.open_to_agents()
            owner.call("PUT", "/providers/fake", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key})
            progress(f"{args.sessions} sessions × one {args.tokens:,}-token reply, all at once")
            prompts = [f"#long {args.tokens} session {number}" for number in range(args.sessions)]
            started = time.time()
            with ThreadPoolExecutor(max_workers=min(args.sessions, 64)) as pool:
                created = list(pool.map(
                    lambda text: owner.call("POST", "/sessions", {"title": text[-20:], "provider": "fake", "text": text}),
                    prompts,
                ))
            by_message = {body["message_id"]: (body["session"]["id"], text) for body, text in zip(created, prompts, strict=True)}
            completed = wait_until_done(ready.data_dir, list(by_message))
            failed = [mid for mid, (status, _) in completed.items() if status != "done"]
            if failed:
                raise RuntimeError(f"{len(failed)} turns did not finish: {failed[:5]}")
            overhead_ms = [(completed[mid][1] - fake.last_byte[text]) * 1000 for mid, (_, text) in by_message.items()]
            wall = max(stamp for _, stamp in completed.values()) - started
            print(
                "\n".join([
                    "OAR Relay benchmark: providers",
                    f"workload     {args.sessions} concurrent sessions on a `chat` provider, {args.tokens:,}-token "
                    f"replies streamed over HTTP/SSE from a local fake; {running.worker_processes} RQ worker processes",
                    report.latency_line(f"relay overhead per turn ({args.sessions} turns)", overhead_ms),
                    f"throughput   {args.sessions / wall:.1f} turns/s, {args.sessions * args.tokens / wall:,.0f} "
                    f"tokens/s ({wall:.1f} s for all)",
                ]),
                flush=True,
            )
    finally:
        fake.stop()
    return 0


def wait_until_done(data_dir: object, message_ids: list[str]) -> dict[str, tuple[str, float]]:
    """Each prompt's final status and `completed_at` (as time.time()), read from the database."""
    open_database(Config(data_dir=data_dir))  # type: ignore[arg-type]
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        with database.connection_context():
            rows = list(Message.select(Message.id, Message.status, Message.completed_at).where(Message.id.in_(message_ids)))
        settled = {row.id: (row.status, row.completed_at.replace(tzinfo=UTC).timestamp()) for row in rows if row.completed_at}
        if len(settled) == len(message_ids):
            return settled
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(settled)} of {len(message_ids)} turns settled in {SETTLE_SECONDS} s")
        time.sleep(0.2)
