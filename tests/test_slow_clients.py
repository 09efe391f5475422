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
import redis
import requests

from oar.core import keys
from oar.core.errors import STATUS_BY_CODE
from tests.support.clients import Agent, Owner, poll
from tests.support.relays import FAST_TIMES, RelayStack, own_relay

pytestmark = pytest.mark.stack

THREADS = 4
MAX_WAITS = 2
# Short read deadlines and wait leases, so that the test runs in seconds (the defaults are 10 s, 30 s and 30 s).
TIMES = {
    **FAST_TIMES, "REQUEST_HEAD_TIMEOUT_SECONDS": "3", "REQUEST_BODY_TIMEOUT_SECONDS": "3", "WAIT_SLOT_LEASE_SECONDS": "3",
}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    """A relay whose web is gunicorn with 1 worker × 4 threads, and a cap of 2 waits per conversation."""
    env = {"WEB_CONCURRENCY": "1", "OAR_WEB_THREADS": str(THREADS), "OAR_MAX_WAITS_PER_CONVERSATION": str(MAX_WAITS)}
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


def test_an_agent_call_whose_body_does_not_arrive_in_time_is_answered_408(small: RelayStack, owner: Owner) -> None:
    """The agents' call lane (oar/web/call_lane.py) reads the body itself; a body cut off by the
    deadline is answered as the app answers it elsewhere, and the connection is closed."""
    agent = owner.conversation("slow body")
    host, port = small.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /api/v1/relay_tool HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer {agent.token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"action\":".encode())
        status, body = parse(sock)  # reads until the relay closes the connection
    assert status == 408 and body["code"] == "REMOTE_RELAY_INVALID_INPUT", (status, body)
    assert "did not arrive in time" in body["error"] and body["error"].endswith("Nothing was done.")


def slots(small: RelayStack, conversation: str) -> list[float]:
    """The lease ends of the conversation's wait slots, as the relay keeps them in Redis."""
    connection = redis.Redis.from_url(small.config.redis_url or "")
    return [score for _, score in connection.zrange(keys.wait_slots(small.config.namespace, conversation), 0, -1, withscores=True)]


def waiting_session(desk: Agent) -> tuple[str, str]:
    """A session the desk created, busy for a minute: its id and its turn's message id."""
    created = desk.ok("create_session", relay="this", text="!sleep 60", wait_seconds=0)
    return created["session"], created["message_id"]


def test_one_conversation_waits_at_most_so_many_at_once(small: RelayStack, owner: Owner) -> None:
    desk = owner.conversation("many waits")
    session, message = waiting_session(desk)
    answers: list[tuple[int, dict[str, Any]]] = []

    def wait() -> None:
        answers.append(desk.call("wait", relay="this", session=session, message_id=message, wait_seconds=60))

    # One more wait than the web has threads, as in a conversation that fans out its waits.
    calls = [threading.Thread(target=wait, daemon=True) for _ in range(THREADS + 1)]
    try:
        for call in calls:
            call.start()
        refused = poll("the waits past the cap refused", lambda: len(answers) >= THREADS + 1 - MAX_WAITS and list(answers))
        for status, body in refused:
            assert status == STATUS_BY_CODE["REMOTE_RELAY_TOO_MANY_WAITS"] == 429, body
            assert body["ok"] is False and body["code"] == "REMOTE_RELAY_TOO_MANY_WAITS" and body["maxWaits"] == MAX_WAITS
            assert f"already has {MAX_WAITS} calls waiting" in body["error"], body
        assert healthy(small.url)
        # The waits that hold slots renew their leases while they wait (the lease is 3 s here).
        first = poll("the slots held", lambda: len(held := slots(small, desk.session_id)) == MAX_WAITS and held)
        poll("the leases renewed", lambda: min(slots(small, desk.session_id)) > max(first), every=0.2)
        # A refused call changes nothing: a send that would wait sends nothing.
        count = len(owner.get(f"/api/v1/owner/sessions/{session}")["messages"])
        sent = desk.refused("send", "REMOTE_RELAY_TOO_MANY_WAITS", relay="this", session=session, text="more", wait_seconds=30)
        assert sent["error"].endswith("Nothing was sent.")
        assert len(owner.get(f"/api/v1/owner/sessions/{session}")["messages"]) == count
        # Calls that do not wait still go through; another conversation has slots of its own.
        desk.ok("read_session", relay="this", session=session)
        other = owner.conversation("other waits")
        other_session, other_message = waiting_session(other)
        assert other.ok("wait", relay="this", session=other_session, message_id=other_message, wait_seconds=1)["status"] in ("queued", "running")
    finally:
        desk.call("stop", relay="this", session=session)
        for call in calls:
            call.join(30)
    assert [status for status, _ in answers].count(200) == MAX_WAITS
    # Each wait gave its slot back.
    assert slots(small, desk.session_id) == []


def test_calls_waiting_on_approval_cards_hold_wait_slots_too(small: RelayStack, owner: Owner) -> None:
    asker = owner.conversation("asker", approvals=())  # its first create_session asks the owner

    def cards() -> list[dict[str, Any]]:
        return [c for c in owner.get("/api/v1/owner/inbox")["cards"] if c["session"]["id"] == asker.session_id]

    calls = [
        threading.Thread(target=lambda: asker.call("create_session", relay="this", text="hi", wait_seconds=0), daemon=True)
        for _ in range(MAX_WAITS)
    ]
    try:
        for call in calls:
            call.start()
        poll("the cards the calls wait on", lambda: len(cards()) == MAX_WAITS)
        refused = asker.refused("create_session", "REMOTE_RELAY_TOO_MANY_WAITS", relay="this", text="one more", wait_seconds=0)
        assert refused["error"].endswith("Nothing was created."), refused
        assert len(cards()) == MAX_WAITS  # no card for the refused call
    finally:
        for card in cards():
            owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "deny"})
        for call in calls:
            call.join(30)
    assert slots(small, asker.session_id) == []


def test_the_slots_of_a_killed_web_lapse_with_their_lease(small: RelayStack, owner: Owner) -> None:
    desk = owner.conversation("killed web")
    session, message = waiting_session(desk)

    def wait() -> None:
        with contextlib.suppress(requests.RequestException):  # the web is killed under it
            desk.call("wait", relay="this", session=session, message_id=message, wait_seconds=60)

    calls = [threading.Thread(target=wait, daemon=True) for _ in range(MAX_WAITS)]
    for call in calls:
        call.start()
    poll("the slots held", lambda: len(slots(small, desk.session_id)) == MAX_WAITS)
    small.kill("web")
    small.start_web()
    poll("the lapsed slots let a wait through", lambda: desk.call(
        "wait", relay="this", session=session, message_id=message, wait_seconds=1)[0] == 200, every=0.5)
    desk.ok("stop", relay="this", session=session)
    for call in calls:
        call.join(30)


def test_external_polls_and_task_calls_count_against_the_rate_limits(small: RelayStack, owner: Owner) -> None:
    status, body = owner.request("PUT", "/api/v1/owner/providers/outside", {"kind": "external", "models": ["own-model"]})
    assert status == 200, body
    attached = owner.conversation("outside agent", provider="outside")
    owner.settings(rate_calls_per_minute=2, rate_writes_per_minute=1, allow_shell_tasks=True)
    for _ in range(2):
        status, body = attached.request("GET", "/api/v1/external/next?wait_seconds=0")
        assert status == 200 and body["turn"] is None, body
    status, body = attached.request("GET", "/api/v1/external/next?wait_seconds=0")
    assert status == 429 and body["code"] == "REMOTE_RELAY_RATE_LIMITED" and body["retryAfterSeconds"] >= 1, body

    desk = owner.conversation("tasks")
    status, body = desk.request("POST", "/api/v1/tasks", {"command": "true"})
    assert status == 201, body
    status, refused = desk.request("POST", "/api/v1/tasks", {"command": "true"})
    assert status == 429 and refused["code"] == "REMOTE_RELAY_RATE_LIMITED", refused
    assert refused["error"].endswith("Nothing was run.")
    status, refused = desk.request("POST", f"/api/v1/tasks/{body['task']['taskId']}/stop")
    assert status == 429 and refused["code"] == "REMOTE_RELAY_RATE_LIMITED", refused
    assert refused["error"].endswith("Nothing was stopped.")
