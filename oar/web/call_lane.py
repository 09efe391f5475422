"""Agents' calls answered in front of Flask's request machinery (docs/benchmarks.md#the-agents-call-lane).

`POST /api/v1/relay_tool` is most of what a relay serves, and for a read Flask's own part of it
(the request context, routing, the hooks, the request and response objects) cost as much as the
call's queries. `CallLane` is WSGI middleware in front of the Flask app that answers an ordinary
call itself, the way the app would: the body read by the app's JSON rules, the caller and the
call by `api.answer_call` (the function the Flask view calls), the same JSON bytes, status line
and headers (`Retry-After` on 429 and 503), a database connection for the request, the request
counted in the figures, and any error in the documented shape (docs/errors.md).

Everything else goes on to Flask: other paths and methods, and a body that comes without
`Content-Length` (chunked) or is larger than the app takes (Flask answers 413). A hook added to
every request of the app must be done here too: tests/test_call_lane.py names the hooks the lane
was written against, and fails when the app has another.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import ClientDisconnected, HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from oar.core import metrics
from oar.core.db import database
from oar.core.errors import http_error
from oar.core.failures import unexpected
from oar.web import RelayJSONProvider, WSGIApp, retry_after
from oar.web.api import answer_call
from oar.web.bodies import json_of

log = logging.getLogger(__name__)

ROUTE = "/api/v1/relay_tool"


class CallLane:
    """`POST /api/v1/relay_tool` with a `Content-Length` the app accepts, answered here; the rest by `flask_app`."""

    def __init__(self, app: Flask, flask_app: WSGIApp) -> None:
        if not isinstance(app.json, RelayJSONProvider):
            raise TypeError("the lane writes answers with the relay's JSON provider")
        self.json = app.json
        self.flask_app = flask_app
        self.runtime = app.extensions["oar"]
        self.max_length: int = app.config["MAX_CONTENT_LENGTH"]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = self._taken_length(environ)
        if length is None:
            return self.flask_app(environ, start_response)
        started = time.perf_counter()
        status, body = self._answer(environ, length)
        data = self.json.answer_bytes(body)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        wait = retry_after(status, body)
        if wait is not None:
            headers.append(("Retry-After", wait))
        start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN').upper()}", headers)
        if metrics.on():
            metrics.request_answered(ROUTE, "POST", status, time.perf_counter() - started)
        return [data]

    def _taken_length(self, environ: dict[str, Any]) -> int | None:
        """The body's length when this request is one the lane answers, else None."""
        if environ.get("PATH_INFO") != ROUTE or environ.get("REQUEST_METHOD") != "POST":
            return None
        length = environ.get("CONTENT_LENGTH") or ""
        if not (length.isascii() and length.isdigit()) or int(length) > self.max_length:
            return None
        return int(length)

    def _answer(self, environ: dict[str, Any], length: int) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer of the call, as the app's view and error handlers give them."""
        try:
            data = environ["wsgi.input"].read(length) if length else b""
            if len(data) < length:
                raise ClientDisconnected()
        except HTTPException as error:  # the body did not come (in time: `request_deadlines`)
            refused = http_error(error.code or 400, f"{error.name}: {error.description} Nothing was done.")
            return refused.status, refused.to_dict()
        database.connect(reuse_if_open=True)
        try:
            return answer_call(self.runtime, json_of(data, self.json.loads), EnvironHeaders(environ), environ)
        except Exception as error:  # noqa: BLE001 - as the app's last error handler: logged, answered in the shape
            failed = unexpected(error, f"request POST {ROUTE}", log)
            return failed.status, failed.to_dict()
        finally:
            if not database.is_closed():
                database.close()
