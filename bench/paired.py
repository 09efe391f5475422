"""`python -m bench paired`: `send` and relay events across paired relays, next to one relay.

Two relays as production runs them (each: embedded Redis, SQLite, gunicorn web, worker, clock,
a data directory of its own), "desk" paired with "build-box". The same echo session on
build-box is prompted `--sends` times, one after another, each `send` waiting for its reply:
from a conversation on build-box (one relay), and from a conversation on desk through the link
(paired). Wake latency is the time from build-box committing the reply (the prompt's
`completed_at` there) to the waiting `send` returning to its caller: on one relay the wake-up
signal, the waiting thread and its answer; across the link also the answer's way back through
desk. Both clocks are this machine's.

Event delivery lag: a session on build-box fails a turn (`!fail`, an `error` event, which is
delivered at once, never held) `--events` times; one conversation on build-box and one on desk
watch it. Lag is the failed turn's `completed_at` → the `created_at` of the event message in the
watching conversation: on one relay the engine's ingest and delivery; across the link also
build-box's outbox and desk's next fetch (every `OAR_PEER_EVENTS_POLL_SECONDS`, 3 s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC
from pathlib import Path

import requests

from bench import report, stack, wake
from bench.owner import Owner
from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message

WAIT_SECONDS = 60


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def relay_named(name: str) -> Iterator[tuple[stack.Prepared, stack.Server]]:
    with stack.prepared() as ready:
        env = {**ready.env, "OAR_RELAY_NAME": name}
        processes = stack.Processes(ready.log_dir)
        try:
            yield stack.Prepared(env=env, data_dir=ready.data_dir, log_dir=ready.log_dir,
                                 owner_token=ready.owner_token), stack.start_relay(processes, env)
        finally:
            processes.stop_all()


def measure(url: str, caller_token_for: Sequence[str], target: str, relay: str, sends: int, warm_up: int
            ) -> list[wake.SendTiming]:
    """`sends` waiting sends to `target`; a new calling conversation (token) every 30 sends keeps
    loop protection's card out of the measured path."""
    timings: list[wake.SendTiming] = []
    http = requests.Session()
    for number in range(warm_up + sends):
        if number % defaults.LOOP_PROMPTS_BEFORE_CARD == 0:
            http.headers["Authorization"] = f"Bearer {caller_token_for[number // defaults.LOOP_PROMPTS_BEFORE_CARD]}"
        payload = {"action": "send", "relay": relay, "session": target, "text": f"ping {number}",
                   "wait_seconds": WAIT_SECONDS}
        sent_at = time.time()
        result = http.post(f"{url}/api/v1/relay_tool", json=payload, timeout=WAIT_SECONDS + 60).json()
        received_at = time.time()
        if result.get("status") != "done":
            raise RuntimeError(f"send {number} did not finish: {result}")
        timings.append(wake.SendTiming(result["message_id"], sent_at, received_at))
    return timings[warm_up:]


def stamps(data_dir: Path, session_id: str, column: str) -> dict[str, float]:
    """Text → time (epoch seconds) of the session's messages, by `completed_at` or `created_at`."""
    open_database(Config(data_dir=data_dir))
    with database.connection_context():
        rows = Message.select().where(Message.session == session_id)
        return {row.text: getattr(row, column).replace(tzinfo=UTC).timestamp() for row in rows if getattr(row, column)}


def measure_events(box: stack.Server, box_owner: Owner, desk: stack.Server, desk_owner: Owner, count: int
                   ) -> tuple[str, str, str]:
    """`count` error events in one build-box session, watched from build-box and from desk; returns
    (source, local watcher, remote watcher) session ids once every event reached both watchers."""
    source, _ = box_owner.conversation("bench event source")
    local, local_token = box_owner.conversation("bench local watcher")
    box_owner.call("PATCH", f"/sessions/{local}", {"approvals": ["watch_sessions"]})
    remote, remote_token = desk_owner.conversation("bench remote watcher")
    desk_owner.call("POST", f"/sessions/{remote}/messages", {"text": "@build-box"})
    subscribe = {"action": "subscribe", "sessions": [source], "events": ["error"]}
    watched = requests.post(f"{box.url}/api/v1/relay_tool", json={**subscribe, "relay": "this"},
                            headers={"Authorization": f"Bearer {local_token}"}, timeout=60).json()
    if not watched.get("ok"):
        raise RuntimeError(f"subscribe on build-box: {watched}")
    answer: dict[str, object] = {}
    call = threading.Thread(target=lambda: answer.update(requests.post(
        f"{desk.url}/api/v1/relay_tool", json={**subscribe, "relay": "build-box"},
        headers={"Authorization": f"Bearer {remote_token}"}, timeout=120).json()))
    call.start()
    deadline = time.monotonic() + 60
    while call.is_alive() and time.monotonic() < deadline:  # build-box's owner allows the first watch
        for card in box_owner.call("GET", "/inbox")["cards"]:
            if card["action"] == "subscribe":
                box_owner.call("POST", f"/cards/{card['id']}", {"decision": "allow"})
        time.sleep(0.1)
    call.join(5)
    if not answer.get("ok"):
        raise RuntimeError(f"subscribe across the link: {answer}")
    for number in range(count):
        box_owner.call("POST", f"/sessions/{source}/messages", {"text": f"!fail lag {number}"})
        wanted = f"lag {number}"
        deadline = time.monotonic() + 60
        while True:
            seen = [any(wanted in m["text"] and m["role"] == "event" for m in owner.call("GET", f"/sessions/{sid}")["messages"])
                    for owner, sid in ((box_owner, local), (desk_owner, remote))]
            if all(seen):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"event {number} did not reach both watchers: {seen}")
            time.sleep(0.02)
    return source, local, remote


def lags(failed: dict[str, float], delivered: dict[str, float], count: int) -> list[float]:
    """Per event: its turn's end → the watcher's event message, in ms."""
    found = []
    for number in range(count):
        ended = failed[f"!fail lag {number}"]
        message = next(at for text, at in delivered.items() if f"lag {number}" in text and text.startswith("[relay event"))
        found.append((message - ended) * 1000)
    return found


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench paired", description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200, help="sends measured each way (default 200)")
    parser.add_argument("--warm-up-sends", type=int, default=20, help="sends made first and not counted (default 20)")
    parser.add_argument("--events", type=int, default=30, help="error events watched from both relays (default 30)")
    args = parser.parse_args(argv)
    conversations = (args.sends + args.warm_up_sends) // defaults.LOOP_PROMPTS_BEFORE_CARD + 1
    with relay_named("build-box") as (box_ready, box), relay_named("desk") as (_desk_ready, desk):
        box_owner, desk_owner = Owner(box.url, box_ready.owner_token), Owner(desk.url, _desk_ready.owner_token)
        for owner in (box_owner, desk_owner):
            owner.open_to_agents()
        box_owner.call("PATCH", "/settings", {"accept_agent_prompts": True})
        token = box_owner.call("POST", "/pairing-tokens", {"label": "bench"})["token"]
        desk_owner.call("POST", "/relays", {"url": box.url, "token": token})
        target, _ = box_owner.conversation("bench echo target")
        progress(f"two relays up; {conversations} calling conversations on each")
        local_tokens = [box_owner.conversation(f"local sender {n}")[1] for n in range(conversations)]
        remote_tokens = []
        for n in range(conversations):
            session, agent_token = desk_owner.conversation(f"remote sender {n}")
            desk_owner.call("POST", f"/sessions/{session}/messages", {"text": "@build-box"})  # unlocks it there
            remote_tokens.append(agent_token)
        load_average = os.getloadavg()[0]
        progress(f"{args.sends} sends on one relay")
        local = measure(box.url, local_tokens, target, "this", args.sends, args.warm_up_sends)
        progress(f"{args.sends} sends across the link")
        remote = measure(desk.url, remote_tokens, target, "build-box", args.sends, args.warm_up_sends)
        one, paired = wake.figures(box_ready.data_dir, local), wake.figures(box_ready.data_dir, remote)
        progress(f"{args.events} events watched from both relays")
        source, local_watcher, remote_watcher = measure_events(box, box_owner, desk, desk_owner, args.events)
        failed = stamps(box_ready.data_dir, source, "completed_at")
        lag_one = lags(failed, stamps(box_ready.data_dir, local_watcher, "created_at"), args.events)
        lag_paired = lags(failed, stamps(_desk_ready.data_dir, remote_watcher, "created_at"), args.events)
    print("OAR Relay benchmark: paired relays")
    print(f"machine      {os.cpu_count()} CPUs, load average {load_average:.2f} at the start")
    print(report.latency_line(f"wake latency, one relay ({args.sends} sends)", one.wake_ms))
    print(report.latency_line(f"wake latency, across the link ({args.sends})", paired.wake_ms))
    print(report.latency_line(f"send round trip, one relay ({args.sends})", one.round_trip_ms))
    print(report.latency_line(f"send round trip, across the link ({args.sends})", paired.round_trip_ms))
    print(report.latency_line(f"event delivery lag, one relay ({args.events})", lag_one))
    print(report.latency_line(f"event delivery lag, across the link ({args.events})", lag_paired))
    return 0
