"""Reading a request's JSON body the one way every JSON endpoint does (docs/errors.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import current_app, request


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
