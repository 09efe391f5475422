"""A provider's key does not follow a redirect to another host (docs/providers.md#api-keys).

requests drops only `Authorization` on such a redirect; Anthropic's `x-api-key` would reach the
other host. Two real HTTP servers on loopback: one redirects, the other records what it got.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from oar.providers.discovery import discover_models
from oar.providers.sse import StreamRequest, request_json

KEY = "sk-ant-redirect-test-key-4Hq8Zt"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def _answer(self) -> None:
        self.seen.append(dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "stolen"}]}')

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def _serve(host: str, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[tuple[str, list[dict[str, str]]]]:
    _Recorder.seen = []
    other = _serve("127.0.0.2", _Recorder)
    target = f"http://127.0.0.2:{other.server_port}"

    class Redirector(BaseHTTPRequestHandler):
        def _redirect(self) -> None:
            self.send_response(307)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _redirect

        def log_message(self, *args: object) -> None:
            pass

    first = _serve("127.0.0.1", Redirector)
    try:
        yield f"http://127.0.0.1:{first.server_port}/v1", _Recorder.seen
    finally:
        first.shutdown()
        other.shutdown()


def test_model_discovery_does_not_follow_a_redirect_with_the_key(servers: tuple[str, list[dict[str, str]]]) -> None:
    base_url, seen = servers
    found = discover_models("anthropic", base_url, KEY)
    assert found.models == [] and "HTTP 307" in (found.note or "")
    assert seen == []


class _Control:
    def note_reachable(self, reachable: bool) -> None:
        pass

    def cancelled(self) -> bool:
        return False


def test_a_turn_request_does_not_follow_a_redirect_with_the_key(servers: tuple[str, list[dict[str, str]]]) -> None:
    base_url, seen = servers
    request = StreamRequest(
        name="lab", url=base_url + "/messages", headers={"x-api-key": KEY}, body={}, budget=100, api_key=KEY,
        connect_timeout=5, read_timeout=5,
    )
    with pytest.raises(Exception) as refused:
        request_json(requests.Session(), request, _Control())  # type: ignore[arg-type]
    assert KEY not in str(refused.value)
    assert seen == []
