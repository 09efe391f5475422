"""Reading a request's JSON body the one way every JSON endpoint does (docs/errors.md)."""

from __future__ import annotations

from typing import Any

from flask import request


def json_body() -> Any:
    """The body as JSON, or None when it is not JSON: not UTF-8, broken, or nested deeper than the
    parser goes (`[` × 100,000 raises RecursionError, which Flask's `silent` does not catch, so it
    would be a 500). Each endpoint then refuses a non-object in its own words."""
    try:
        return request.get_json(force=True, silent=True)
    except RecursionError:
        return None
