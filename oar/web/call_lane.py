"""Agents' calls answered in front of Flask's request machinery (docs/benchmarks.md#the-agents-call-lane).

`POST /api/v1/relay_tool` and `POST /mcp` are most of what a relay serves, and for a read Flask's
own part of such a request (the request context, routing, the hooks, the request object) cost as
much as the call's queries. `CallLane` is WSGI middleware in front of the Flask app that answers
an ordinary call itself with the function Flask's view for the route calls (`ROUTES`), given a
`PlainRequest` instead of Flask's request, inside the app's context. Around it, it does what the
app's hooks do for such a request: a database connection for the request, `Retry-After` on 429
and 503, the request counted in the figures, and any error in the documented shape
(docs/errors.md), the body that does not arrive in time included.

Everything else goes on to Flask: other paths and methods, and a body that comes without
`Content-Length` (chunked) or is larger than the app takes. A hook added to every request of the
app must be done here too: tests/test_call_lane.py names the hooks the lane was written against,
and fails when the app has another.
"""

from __future__ import annotations

import functools
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
from oar.core.errors import ActionError
from oar.core.failures import unexpected
from oar.web import RelayJSONProvider, WSGIApp, add_retry_after, api, api_refusal, mcp, retry_after
from oar.web.bodies import Answer, JsonAnswer
from oar.web.plain_request import PlainRequest

log = logging.getLogger(__name__)

# The POST routes the lane answers, and the function each one's Flask view calls too.
ROUTES: dict[str, Callable[[PlainRequest], Answer]] = {
    "/api/v1/relay_tool": api.answer_relay_tool,
    "/mcp": functools.partial(mcp.answer_post, mcp.RELAY_TOOLS),
}


class CallLane:
    """The POSTs of `ROUTES` with a `Content-Length` the app accepts, answered here; the rest by `flask_app`."""

    def __init__(self, app: Flask, flask_app: WSGIApp) -> None:
        if not isinstance(app.json, RelayJSONProvider):
            raise TypeError("the lane writes answers as the relay's JSON provider does")
        self.app = app
        self.json = app.json
        self.flask_app = flask_app
        self.max_length: int = app.config["MAX_CONTENT_LENGTH"]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = environ.get("PATH_INFO", "")
        answer = ROUTES.get(route) if environ.get("REQUEST_METHOD") == "POST" else None
        length = self._taken_length(environ) if answer is not None else None
        if answer is None or length is None:
            return self.flask_app(environ, start_response)
        started = time.perf_counter()
        with self.app.app_context():
            answered = self._answer(answer, route, environ, length)
        written: Iterable[bytes]
        if isinstance(answered, JsonAnswer):
            status, written = answered.status, self._written(answered, start_response)
        else:  # a response of its own (an event stream, a 202), sent as it goes
            status, written = answered.status_code, add_retry_after(answered)(environ, start_response)
        if metrics.on():
            metrics.request_answered(route, "POST", status, time.perf_counter() - started)
        return written

    def _written(self, answer: JsonAnswer, start_response: Callable[..., Any]) -> list[bytes]:
        """The bytes and headers `answer.response()` would send, without building the response."""
        data = self.json.answer_bytes(answer.body)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *answer.headers]
        wait = retry_after(answer.status, answer.body)
        if wait is not None:
            headers.append(("Retry-After", wait))
        start_response(f"{answer.status} {HTTP_STATUS_CODES.get(answer.status, 'UNKNOWN').upper()}", headers)
        return [data]

    def _taken_length(self, environ: dict[str, Any]) -> int | None:
        """The body's length when the lane takes the request, else None."""
        sent = environ.get("CONTENT_LENGTH") or ""
        length = int(sent) if sent.isascii() and sent.isdigit() else None
        return length if length is not None and length <= self.max_length else None

    def _answer(self, answer: Callable[[PlainRequest], Answer], route: str, environ: dict[str, Any], length: int) -> Answer:
        """The route's answer, as the app's view and error handlers give it."""
        try:
            data = environ["wsgi.input"].read(length) if length else b""
            if len(data) < length:
                raise ClientDisconnected()
        except HTTPException as error:  # the body did not come (in time: `request_deadlines`)
            return _refused(api_refusal(error))
        database.connect(reuse_if_open=True)
        try:
            return answer(PlainRequest(headers=EnvironHeaders(environ), environ=environ, read_body=lambda: data))
        except Exception as error:  # noqa: BLE001 - as the app's last error handler: logged, answered in the shape
            return _refused(unexpected(error, f"request POST {route}", log))
        finally:
            if not database.is_closed():
                database.close()


def _refused(error: ActionError) -> JsonAnswer:
    return JsonAnswer(error.to_dict(), error.status)
