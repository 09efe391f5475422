"""The agents' call lane (oar/web/call_lane.py): ordinary `POST /api/v1/relay_tool` and `POST /mcp`
calls are answered in front of Flask, the rest by Flask's views, and both answer alike, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from flask import Flask, request_started
from werkzeug.test import EnvironBuilder, run_wsgi_app

from oar.core import defaults
from oar.web import page_auth, retry_after
from oar.web.call_lane import ROUTES
from tests.support.clients import Agent
from tests.support.relays import Relay, RelayStack

ROUTE = "/api/v1/relay_tool"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


@pytest.fixture
def app(stack: RelayStack, relay: Relay) -> Flask:
    assert stack.app is not None, "the shared relay's web runs in this process"
    return stack.app


class Doors:
    """Sends a body through the app either with its length (the lane answers) or in chunks, as a
    streamed body without `Content-Length` (Flask's view answers); counts the requests Flask ran."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.flask_requests = 0

    def _ran(self, _sender: Any, **_extra: Any) -> None:
        self.flask_requests += 1

    def send(self, body: bytes, token: str | None, *, chunked: bool, path: str = ROUTE, **extra: str) -> Answered:
        headers = {"Content-Type": "application/json", **extra}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        environ = EnvironBuilder(path=path, method="POST", data=body, headers=headers).get_environ()
        if chunked:  # as a WSGI server gives a body sent in chunks: no length, the input ends by itself
            environ.pop("CONTENT_LENGTH", None)
            environ["wsgi.input_terminated"] = True
        else:
            environ["CONTENT_LENGTH"] = str(len(body))
        chunks, status, answer_headers = run_wsgi_app(self.app, environ, buffered=True)
        return Answered(status, dict(answer_headers), b"".join(chunks))

    def both(self, body: bytes, token: str | None, path: str = ROUTE, **headers: str) -> tuple[Answered, Answered]:
        with request_started.connected_to(self._ran, self.app):
            by_lane = self.send(body, token, chunked=False, path=path, **headers)
            assert self.flask_requests == 0, "a call with its length is answered before Flask"
            by_flask = self.send(body, token, chunked=True, path=path, **headers)
            assert self.flask_requests == 1, "a chunked call is answered by Flask's view"
        self.flask_requests = 0
        return by_lane, by_flask


@dataclass(frozen=True)
class Answered:
    status: str
    headers: dict[str, str]
    body: bytes


def calls(desk: Agent) -> Iterator[tuple[bytes, str | None]]:
    """Answers that do not change between two calls: reads, and refusals of every kind at the edge."""
    read = {"action": "read_session", "relay": "this", "session": desk.session_id}
    yield json.dumps(read).encode(), desk.token
    yield json.dumps({"action": "list_sessions", "relay": "this"}).encode(), desk.token
    yield json.dumps({"action": "read_session", "relay": "this", "session": "nothing-here"}).encode(), desk.token
    yield json.dumps({"action": "no_such_action"}).encode(), desk.token
    yield json.dumps({"action": "read_session", "relay": "this", "session": 5}).encode(), desk.token
    yield json.dumps(read).encode(), "not-a-token"
    yield json.dumps(read).encode(), None
    for body in (b"", b"not json", b"[1, 2]", b"NaN", b"[" * 5000, "[1]".encode("utf-16"), b'{"action": "\\ud800"}'):
        yield body, desk.token


def test_a_call_with_its_length_and_a_chunked_one_are_answered_alike(app: Flask, desk: Agent) -> None:
    doors = Doors(app)
    for body, token in calls(desk):
        by_lane, by_flask = doors.both(body, token)
        assert by_lane == by_flask, body[:60]
        assert by_lane.headers["Content-Type"] == "application/json"
        assert by_lane.body.endswith(b"\n") and "ok" in json.loads(by_lane.body)


def mcp_calls() -> Iterator[bytes]:
    """MCP requests of both eras whose answers do not change between two calls, and refusals."""
    def rpc(method: str, params: dict[str, Any] | None = None) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params or {}}).encode()

    yield rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    yield rpc("tools/list")
    yield rpc("tools/call", {"name": "relay_tool", "arguments": {"action": "list_sessions", "relay": "this"}})
    yield rpc("tools/call", {"name": "relay_tool", "arguments": {"action": "no_such_action"}})
    yield rpc("tools/call", {"name": "no_such_tool", "arguments": {}})
    yield rpc("no/such/method")
    yield json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
              "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
    yield rpc("tools/list", {"_meta": modern})
    yield from (b"", b"not json", b"[]", b'{"jsonrpc": "1.0"}')


def test_mcp_requests_with_their_length_and_chunked_are_answered_alike(app: Flask, desk: Agent) -> None:
    doors = Doors(app)
    for body in mcp_calls():
        by_lane, by_flask = doors.both(body, desk.token, path="/mcp", **MCP_HEADERS)
        assert by_lane == by_flask, body[:80]
    modern = json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "relay_tool", "arguments": {"action": "list_sessions", "relay": "this"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}}).encode()
    by_lane, by_flask = doors.both(modern, desk.token, path="/mcp", **{
        **MCP_HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "relay_tool"})
    assert by_lane == by_flask and by_lane.status == "200 OK" and b'"isError":false' in by_lane.body
    by_lane, by_flask = doors.both(next(mcp_calls()), "not-a-token", path="/mcp", **MCP_HEADERS)
    assert by_lane == by_flask and by_lane.status.startswith("401") and "WWW-Authenticate" in by_lane.headers
    assert set(ROUTES) == {ROUTE, "/mcp"}


def test_what_the_lane_does_not_take_flask_answers(app: Flask, desk: Agent) -> None:
    client = app.test_client()
    auth = {"Authorization": f"Bearer {desk.token}"}
    wrong_method = client.get(ROUTE, headers=auth)
    assert wrong_method.status_code == 405 and wrong_method.get_json()["code"] == "REMOTE_RELAY_INVALID_INPUT"
    too_large = client.post(ROUTE, data=b" " * (app.config["MAX_CONTENT_LENGTH"] + 1), headers=auth)
    assert too_large.status_code == 413 and too_large.get_json()["code"] == "REMOTE_RELAY_INVALID_INPUT"
    assert client.post(ROUTE + "/", data=b"{}", headers=auth).status_code == 404


def test_a_body_shorter_than_its_length_is_refused_in_the_shape(app: Flask, desk: Agent) -> None:
    response = app.test_client().post(
        ROUTE, data=b"{}", headers={"Authorization": f"Bearer {desk.token}"}, environ_overrides={"CONTENT_LENGTH": "10"},
    )
    assert response.status_code == 400
    assert response.get_json()["code"] == "REMOTE_RELAY_INVALID_INPUT"
    assert response.get_json()["error"].endswith("Nothing was done.")


def test_a_rate_limited_call_says_when_to_come_back_in_its_header(relay: Relay, desk: Agent) -> None:
    relay.owner.settings(rate_calls_per_minute=2)
    statuses = [requests.post(relay.url + ROUTE, json={"action": "list_sessions", "relay": "this"},
                              headers={"Authorization": f"Bearer {desk.token}"}, timeout=30) for _ in range(3)]
    limited = statuses[-1]
    assert [answer.status_code for answer in statuses] == [200, 200, 429]
    assert limited.headers["Retry-After"] == retry_after(429, limited.json())
    assert int(limited.headers["Retry-After"]) >= 1


def test_retry_after_is_the_bodys_wait_rounded_up_to_whole_seconds() -> None:
    assert retry_after(429, {"retryAfterSeconds": 0.2}) == "1"
    assert retry_after(503, {"retryAfterSeconds": 2.5}) == "3"
    assert retry_after(200, {"retryAfterSeconds": 2}) is None
    assert retry_after(429, {"retryAfterSeconds": "2"}) is None
    assert retry_after(429, {"retryAfterSeconds": True}) is None
    assert retry_after(429, [1]) is None
    assert retry_after(503, {"retryAfterSeconds": defaults.DATABASE_BUSY_RETRY_SECONDS}) is not None


def test_a_chunked_call_over_http_is_answered_by_the_view(relay: Relay, desk: Agent) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"action": "read_session", "relay": "this", '
        yield json.dumps({"session": desk.session_id}).encode()[1:]

    chunked = requests.post(relay.url + ROUTE, data=chunks(), headers={"Authorization": f"Bearer {desk.token}"}, timeout=30)
    whole = requests.post(relay.url + ROUTE, json={"action": "read_session", "relay": "this", "session": desk.session_id},
                          headers={"Authorization": f"Bearer {desk.token}"}, timeout=30)
    assert chunked.status_code == whole.status_code == 200
    assert chunked.json() == whole.json() and chunked.json()["session"]["id"] == desk.session_id


def test_the_lane_knows_every_hook_the_app_runs_on_a_request(app: Flask) -> None:
    """The lane does for a call what each of the app's request-wide hooks does (a database
    connection, the figures, Retry-After; the owner's log line and the page's security headers are
    for their own paths only). A new hook must be looked at there first (oar/web/call_lane.py),
    and then named here."""
    hooks = {
        "before": {f.__name__ for f in app.before_request_funcs.get(None, [])},
        "after": {f.__name__ for f in app.after_request_funcs.get(None, [])},
        "teardown": {f.__name__ for f in app.teardown_request_funcs.get(None, [])},
        "url values": {f.__name__ for f in app.url_value_preprocessors.get(None, [])},
    }
    figures = {"started"} if app.extensions["oar"].config.metrics_on else set()
    assert hooks == {
        "before": {"connect", "start_clock"} | figures,
        "after": {"add_retry_after", "log_write", "security_headers"} | ({"answered"} if figures else set()),
        "teardown": {"close"},
        "url values": {"storable_ids"},
    }
    assert not page_auth.is_page_path(ROUTE)
