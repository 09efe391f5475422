"""Clients cannot use up the web's threads (docs/operations.md#slow-clients, docs/limits.md): a real
gunicorn with one worker of 4 threads, as a small deployment runs it.

- clients that send their request a byte every 2 s are cut off at the read deadlines, so the health
  check answers while they keep coming back;
- one conversation's long waits are capped (`REMOTE_RELAY_TOO_MANY_WAITS`), so its waits cannot take
  every thread either;
- `external/next` and `/api/v1/tasks` count against the conversation's rate limits.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.clients import Owner, poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack

THREADS = 4
MAX_WAITS = 2
# Short read deadlines, so that the test runs in seconds (the defaults are 10 s and 30 s).
TIMES = {**FAST_TIMES, "REQUEST_HEAD_TIMEOUT_SECONDS": "3", "REQUEST_BODY_TIMEOUT_SECONDS": "3"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    """A relay whose web is gunicorn with 1 worker × 4 threads, and a cap of 2 waits per conversation."""
    env = {"WEB_CONCURRENCY": "1", "OAR_WEB_THREADS": str(THREADS), }
    with own_relay(tmp_path_factory.mktemp("small"), TIMES, name="small", web="process", env=env) as stack:
        yield stack


@pytest.fixture
def owner(small: RelayStack) -> Owner:
    owner = Owner(small.url, small.config.owner_token or "")
    owner.open_for_agents()
    return owner


def healthy(url: str) -> bool:
    # A long timeout: a request given up and sent again would queue behind the slow clients anew.
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{url}/healthz", timeout=20).status_code == 200
    return False


class SlowClient(threading.Thread):
    """Sends a request a byte every 2 s, forever: its head (a header line that never ends), or, with
    `body`, a whole head (the owner's, to change a setting) and then its body. When the relay answers and closes, it reads the answer
    and connects again, as a client set on holding the relay's threads would."""

    def __init__(self, url: str, stop: threading.Event, *, body: bool, token: str) -> None:
        super().__init__(daemon=True)
        self.token = token
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.stop_sending = stop
        self.body = body
        self.answers: list[tuple[int, dict[str, Any]]] = []

    def run(self) -> None:
        while not self.stop_sending.is_set():
            with contextlib.suppress(OSError), socket.create_connection(self.address, timeout=10) as sock:
                if self.body:
                    sock.sendall(f"PATCH /api/v1/owner/settings HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer {self.token}\r\n"
                                 "Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n".encode())
                else:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
                while not self.stop_sending.wait(2):
                    if select.select([sock], [], [], 0)[0]:
                        self.answers.append(parse(sock))
                        break
                    sock.sendall(b" " if self.body else b"a")


def parse(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an answer the relay sent before closing the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    with contextlib.suppress(ValueError):
        return status, json.loads(body)
    return status, {}


def test_it_answers_the_health_check_while_slow_clients_hold_connections(small: RelayStack) -> None:
    stop = threading.Event()
    clients = [SlowClient(small.url, stop, body=index % 2 == 1, token=small.config.owner_token or "") for index in range(2 * THREADS)]
    try:
        for client in clients:
            client.start()
        # More slow clients than threads: without read deadlines every thread reads a slow request.
        poll("the health check to answer while slow clients send", lambda: healthy(small.url), seconds=40, every=0.2)
        assert all(client.is_alive() for client in clients)
        # The relay cut them off with a 408 in the JSON shape, for a slow head and a slow body alike.
        for kind in (False, True):
            client = next(client for client in clients if client.body is kind)
            poll(f"a slow {'body' if kind else 'head'} answered", lambda c=client: c.answers, seconds=30, every=0.2)
            status, body = client.answers[0]
            assert status == 408 and body["ok"] is False and body["code"] == "REMOTE_RELAY_INVALID_INPUT", (status, body)
            assert "did not arrive in time" in body["error"] and body["error"].endswith("Nothing was done.")
    finally:
        stop.set()
        for client in clients:
            client.join(15)
