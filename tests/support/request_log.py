"""What a relay's in-thread web received under a path: each request's MCP headers, token, body and
answer status, recorded by a WSGI middleware around the app (the app itself is untouched)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import Flask

# The headers of MCP's Streamable HTTP the tests look at, as WSGI names them.
HEADERS = {"HTTP_MCP_PROTOCOL_VERSION": "MCP-Protocol-Version", "HTTP_MCP_METHOD": "Mcp-Method", "HTTP_MCP_NAME": "Mcp-Name"}


@dataclass
class Received:
    """One request: its HTTP method, path, bearer token, MCP headers, JSON body, and the answer's status."""

    verb: str
    path: str
    token: str
    headers: dict[str, str]
    body: Any
    status: int | None = None

    @property
    def method(self) -> str | None:
        """The JSON-RPC method of its body."""
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def meta(self) -> dict[str, Any]:
        params = self.body.get("params") if isinstance(self.body, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        return meta if isinstance(meta, dict) else {}


@contextlib.contextmanager
def recording(app: Flask, prefix: str = "/mcp") -> Iterator[list[Received]]:
    """Record the requests under `prefix` while the block runs."""
    received: list[Received] = []
    inner = app.wsgi_app

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ.get("PATH_INFO", "").startswith(prefix):
            return inner(environ, start_response)
        entry = _entry(environ)
        received.append(entry)

        def started(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            entry.status = int(status.split()[0])
            return start_response(status, headers, exc_info)

        return inner(environ, started)

    app.wsgi_app = wsgi  # type: ignore[method-assign]
    try:
        yield received
    finally:
        app.wsgi_app = inner  # type: ignore[method-assign]


def _entry(environ: dict[str, Any]) -> Received:
    """The request's record; its body is read here and handed on to the app unchanged."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    token = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ")
    headers = {name: environ[key] for key, name in HEADERS.items() if key in environ}
    return Received(environ["REQUEST_METHOD"], environ["PATH_INFO"], token, headers, body)
