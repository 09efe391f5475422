"""`python -m bench outside`: how soon an agent outside the relay is woken.

A relay as `python app.py`'s processes run it. An outside conversation ("helper") waits in
`take`, run as an MCP task (MCP 2026-07-28, the Tasks extension, over `/mcp`) and followed by
`subscriptions/listen`, as a client that backgrounds the call would follow it. Two things
arrive for it, one at a time:

- **events**: a turn of a session it watches (`subscribe`, `turn_end`) ends; the relay holds
  the event for its delivery window (`OAR_DELIVERY_WINDOW_SECONDS`, 30 s by default) and then
  delivers it. Figures: from the event (its row's `created_at`) to the client reading the
  task's `completed` status notification, and the same less the window;
- **prompts**: another conversation `send`s to it (`wait_seconds: 0`). Figure: from the send's
  request leaving the client to the client reading the notification.

And for each, from the item written into the conversation (its message's `created_at`) to the
task's `completed` written (`mcp_task.updated_at`): the relay's own part, clock to clock on
this machine. A client that polls `tasks/get` instead of listening adds up to one poll interval
(`pollIntervalMs`, 1,000 ms) to what it sees.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests

from bench import report, stack
from bench.owner import Owner
from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Event, Message
from oar.mcp_tasks.models import McpTask

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


class McpClient:
    """Raw MCP 2026-07-28 requests with the Tasks extension, as a conforming client sends them."""

    def __init__(self, url: str, token: str) -> None:
        self.url = f"{url}/mcp"
        self.http = requests.Session()
        self.http.headers.update({
            "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
        })

    def _body(self, method: str, params: dict[str, Any]) -> str:
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}
        return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}})

    def take_task(self) -> str:
        params = {"name": "relay_tool", "arguments": {"action": "take", "wait_seconds": 600}}
        answer = self.http.post(self.url, data=self._body("tools/call", params),
                                headers={"Mcp-Method": "tools/call", "Mcp-Name": "relay_tool"}, timeout=30).json()
        result = answer["result"]
        if result.get("resultType") != "task":
            raise RuntimeError(f"take did not answer a task: {answer}")
        return str(result["taskId"])

    def follow(self, task_id: str, seen: queue.Queue[tuple[str, float, dict[str, Any]]]) -> None:
        """Listen to the task; put (task id, time read, the task) once it has ended."""
        params = {"notifications": {"tasksStatus": [task_id]}}
        with self.http.post(self.url, data=self._body("subscriptions/listen", params), stream=True, timeout=700,
                            headers={"Mcp-Method": "subscriptions/listen"}) as answer:
            for line in answer.iter_lines(decode_unicode=True):
                if not line.startswith("data: "):
                    continue
                message = json.loads(line[len("data: "):])
                task = message.get("params", {})
                if message.get("method") == "notifications/tasks/status" and task.get("status") == "completed":
                    seen.put((task_id, time.time(), task))
                    return


@dataclass
class Arrival:
    kind: str  # "event" | "prompt"
    task_id: str
    started_at: float  # the event's row, or the send leaving the client
    seen_at: float  # the client read the completed notification
    message_id: str


def run_round(client: McpClient, trigger: Any) -> tuple[str, float, float, dict[str, Any]]:
    """One take task followed by a listen; `trigger()` makes something arrive and returns its start time."""
    task_id = client.take_task()
    seen: queue.Queue[tuple[str, float, dict[str, Any]]] = queue.Queue()
    follower = threading.Thread(target=client.follow, args=(task_id, seen), daemon=True)
    follower.start()
    time.sleep(0.05)  # the listen is open before anything arrives (its acknowledgment is not what is measured)
    started = trigger()
    _task_id, seen_at, task = seen.get(timeout=120)
    return task_id, started, seen_at, task


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench outside", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100, help="prompts sent to the outside agent (default 100)")
    parser.add_argument("--events", type=int, default=10, help="events delivered to it (default 10; each waits a window)")
    parser.add_argument("--window", type=float, default=None, help="OAR_DELIVERY_WINDOW_SECONDS for the relay (default: the relay's, 30)")
    args = parser.parse_args(argv)
    with stack.prepared() as ready:
        if args.window is not None:
            ready.env["OAR_DELIVERY_WINDOW_SECONDS"] = str(args.window)
        with stack.started(ready) as running:
            owner = Owner(running.relay.url, ready.owner_token)
            owner.open_to_agents()
            arrivals = measure(running.relay.url, owner, args)
        print(render(ready, arrivals, args), flush=True)
    return 0


def measure(url: str, owner: Owner, args: argparse.Namespace) -> list[Arrival]:
    helper = owner.call("POST", "/sessions", {"title": "helper outside", "agent_outside": True})
    client = McpClient(url, helper["token"])
    agent = requests.Session()
    agent.headers["Authorization"] = f"Bearer {helper['token']}"
    _desk, desk_token = owner.conversation("desk")
    desk = requests.Session()
    desk.headers["Authorization"] = f"Bearer {desk_token}"
    owner.call("PATCH", f"/sessions/{helper['session']['id']}", {"approvals": ["watch_sessions"]})
    owner.call("PATCH", f"/sessions/{_desk}", {"approvals": ["create_sessions"]})
    build = desk.post(f"{url}/api/v1/relay_tool", json={"action": "create_session", "relay": "this", "text": "hello",
                                                        "wait_seconds": 60}, timeout=90).json()["session"]
    subscribed = agent.post(f"{url}/api/v1/relay_tool", json={"action": "subscribe", "sessions": [build], "events": ["turn_end"]},
                            timeout=30).json()
    if not subscribed.get("ok"):
        raise RuntimeError(f"subscribe refused: {subscribed}")
    arrivals: list[Arrival] = []
    for number in range(args.events):
        progress(f"event {number + 1}/{args.events} (each waits the delivery window)")

        def send_to_build(n: int = number) -> float:
            done = desk.post(f"{url}/api/v1/relay_tool", json={"action": "send", "relay": "this", "session": build,
                                                                "text": f"step {n}", "wait_seconds": 60}, timeout=90).json()
            if done.get("status") != "done":
                raise RuntimeError(f"the watched turn did not end: {done}")
            return 0.0  # the event's own time is read from the database

        task_id, _started, seen_at, task = run_round(client, send_to_build)
        item = task["result"]["structuredContent"]["items"][0]
        arrivals.append(Arrival("event", task_id, 0.0, seen_at, item["message_id"]))
    for number in range(args.prompts):
        if number % 10 == 0:
            progress(f"prompt {number + 1}/{args.prompts}")
        if number % defaults.LOOP_PROMPTS_BEFORE_CARD == 0:
            # Loop protection asks the owner about a conversation's 31st prompt to other sessions
            # (docs/rules.md#loop-protection): a new sender every 30 keeps the path a plain send.
            _sender, sender_token = owner.conversation(f"sender {number}")
            desk.headers["Authorization"] = f"Bearer {sender_token}"

        def send_to_helper(n: int = number) -> float:
            started = time.time()
            sent = desk.post(f"{url}/api/v1/relay_tool", json={"action": "send", "relay": "this", "session": helper["session"]["id"],
                                                               "text": f"ping {n}", "wait_seconds": 0}, timeout=30).json()
            if not sent.get("ok"):
                raise RuntimeError(f"send refused: {sent}")
            return started

        task_id, started, seen_at, task = run_round(client, send_to_helper)
        item = task["result"]["structuredContent"]["items"][0]
        agent.post(f"{url}/api/v1/relay_tool", json={"action": "reply", "message_id": item["message_id"], "text": "pong"},
                   timeout=30)
        arrivals.append(Arrival("prompt", task_id, started, seen_at, item["message_id"]))
    return arrivals


def _figures(values_ms: list[float]) -> str:
    return (f"p50 {report.percentile(values_ms, 0.5):.1f} ms  p99 {report.percentile(values_ms, 0.99):.1f} ms  "
            f"max {max(values_ms):.1f} ms")


def _stamp(moment: datetime) -> float:
    return moment.replace(tzinfo=UTC).timestamp()


def render(ready: stack.Prepared, arrivals: list[Arrival], args: argparse.Namespace) -> str:
    open_database(Config(data_dir=ready.data_dir))
    window = args.window if args.window is not None else 30.0
    with database.connection_context():
        tasks = {row.id: _stamp(row.updated_at) for row in McpTask.select()}
        written = {row.id: _stamp(row.created_at) for row in Message.select().where(
            Message.id.in_([a.message_id for a in arrivals]))}
        event_times = sorted(_stamp(row.created_at) for row in Event.select().where(Event.kind == "turn_end"))
    lines = ["OAR Relay benchmark: an agent outside the relay woken by take (MCP task, followed by subscriptions/listen)"]
    for kind in ("event", "prompt"):
        chosen = [a for a in arrivals if a.kind == kind]
        if not chosen:
            continue
        relay_part = [(tasks[a.task_id] - written[a.message_id]) * 1000 for a in chosen]
        if kind == "event":
            # Each round's event is the newest turn_end written before its delivery message.
            starts = [max(t for t in event_times if t <= written[a.message_id]) for a in chosen]
            whole = [(a.seen_at - s) * 1000 for a, s in zip(chosen, starts, strict=True)]
            lines.append(f"events ({len(chosen)}): event → client sees the task completed  {_figures(whole)}")
            after = [w - window * 1000 for w in whole]
            lines.append(f"  less the delivery window ({window:g} s)                    {_figures(after)}")
        else:
            whole = [(a.seen_at - a.started_at) * 1000 for a in chosen]
            lines.append(f"prompts ({len(chosen)}): send → client sees the task completed   {_figures(whole)}")
        lines.append(f"  item written → task completed written (the relay's part) {_figures(relay_part)}")
    return "\n".join(lines)
