"""Reading a request's JSON body the one way every JSON endpoint does (docs/errors.md), and writing a JSON answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app, jsonify, request


def json_body() -> Any:
    """The body as JSON, or None when it is not JSON. Each endpoint then refuses a non-object in
    its own words."""
    return json_of(request.get_data(cache=True), current_app.json.loads)


def json_of(data: bytes, loads: Callable[[bytes], Any]) -> Any:
    """`data` read by the app's JSON `loads`, or None when it is not JSON: not UTF-8, broken, or
    nested deeper than the parser goes (`[` × 100,000 raises RecursionError, which Flask's
    `get_json(silent=True)` does not catch, so it would be a 500)."""
    try:
        return loads(data)
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class JsonAnswer:
    """A JSON answer not yet written: a Flask view makes it a response (`response`), the call lane
    (oar/web/call_lane.py) writes the same bytes and headers itself, without a response object."""

    body: Any
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> Response:
        response = jsonify(self.body)
        response.status_code = self.status
        response.headers.extend(self.headers)
        return response


# What an endpoint the call lane answers gives: JSON, or a response of its own (an event stream, a 202).
Answer = JsonAnswer | Response


def flask_response(answer: Answer) -> Response:
    return answer.response() if isinstance(answer, JsonAnswer) else answer
