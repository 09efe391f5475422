"""`python -m bench decisions`: how soon a waiting agent goes on once the owner decides from a notification.

A relay as `python app.py`'s processes run it, with an ntfy channel pointing at an ntfy server
on loopback (a small HTTP server that records each notification and its `X-Actions` header).
Each round, an agent's call waits on an approval card (`create_session` over HTTP, from a new
conversation with no remembered Allow, so that its notification goes out at once); the relay's
worker sends the ntfy notification with its Allow and Deny buttons; the benchmark presses Allow
as the ntfy app does (the `http` action's POST to `/api/v1/decide`). Figures: from that POST
leaving the client to the agent's waiting call's answer arriving (both `time.time()` on this
machine), and the POST's own round trip; docs/notifications.md#deciding-from-a-notification.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from bench import report, stack
from bench.owner import Owner

WAIT_SECONDS = 60


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


class NtfyServer:
    """An ntfy server on loopback: each notification's buttons (its X-Actions header, JSON) go on a queue."""

    def __init__(self) -> None:
        self.buttons: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        received = self.buttons

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.put(json.loads(self.headers.get("X-Actions") or "[]"))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.server.server_port}"


def one_round(url: str, owner: Owner, ntfy: NtfyServer, number: int) -> tuple[float, float]:
    """(decision POST → the agent's answer, the POST's round trip), in ms."""
    _session, token = owner.conversation(f"bench asker {number}")
    agent = requests.Session()
    agent.headers["Authorization"] = f"Bearer {token}"
    answered: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()

    def call() -> None:
        body = agent.post(f"{url}/api/v1/relay_tool", json={"action": "create_session", "relay": "this", "text": "hi"},
                          timeout=WAIT_SECONDS + 30).json()
        answered.put((time.time(), body))

    threading.Thread(target=call, daemon=True).start()
    buttons = ntfy.buttons.get(timeout=WAIT_SECONDS)
    allow = next(button for button in buttons if button["label"] == "Allow")
    pressed = time.time()
    # Each round's phone has an address of its own (through a trusted proxy), so that the rounds
    # stay within the decision endpoints' 30 requests a minute per address.
    headers = {**(allow.get("headers") or {}), "X-Forwarded-For": f"198.51.100.{number % 250 + 1}"}
    response = requests.request(allow["method"], allow["url"], headers=headers, data=allow["body"].encode(), timeout=30)
    round_trip = time.time() - pressed
    if response.status_code != 200:
        raise RuntimeError(f"the Allow button was refused: {response.status_code} {response.text[:300]}")
    arrived, body = answered.get(timeout=WAIT_SECONDS)
    if not body.get("ok"):
        raise RuntimeError(f"the waiting call was not allowed: {body}")
    return (arrived - pressed) * 1000, round_trip * 1000


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench decisions", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="cards decided by an ntfy button (default 30)")
    parser.add_argument("--warm-up", type=int, default=3, help="rounds made first and not counted (default 3)")
    args = parser.parse_args(argv)
    ntfy = NtfyServer()
    with stack.prepared() as ready:
        ready.env["OAR_TRUST_PROXY"] = "1"
        with stack.started(ready) as running:
            figures = measure(running.relay.url, ready.owner_token, ntfy, args)
    ntfy.server.shutdown()
    print("OAR Relay benchmark: an agent waiting on an approval card, allowed by an ntfy button")
    print(report.latency_line("decision POST → the waiting call's answer", [f[0] for f in figures]))
    print(report.latency_line("decision POST round trip", [f[1] for f in figures]))
    return 0


def measure(url: str, owner_token: str, ntfy: NtfyServer, args: argparse.Namespace) -> list[tuple[float, float]]:
    """Every round's figures, the warm-up rounds left out."""
    owner = Owner(url, owner_token)
    owner.open_to_agents()
    owner.call("PUT", "/notifications/phone", {"type": "url", "url": f"ntfy://{ntfy.host}/bench", "kinds": ["card_waiting"]})
    figures = []
    for number in range(args.warm_up + args.rounds):
        if number % 10 == 0:
            progress(f"round {number + 1}/{args.warm_up + args.rounds}")
        measured = one_round(url, owner, ntfy, number)
        if number >= args.warm_up:
            figures.append(measured)
    return figures
