"""One log line per write of the owner (docs/operations.md#logs): the owner API's POST, PUT, PATCH
and DELETE, and the page's forms, as `oar.actions.call_log` writes one per agent call.

The line holds this relay's name, the way the write came (`api` or `page`), the route (`PATCH
/api/v1/owner/sessions/<session_id>`), the ids in its path, the outcome (`ok`, the error code, or
the HTTP status of a page) and the duration. Bodies are never logged: they carry API keys,
notification URLs and tokens.
"""

from __future__ import annotations

import time

import peewee
from flask import Flask, Response, g, request

from oar.actions.call_log import shown_id
from oar.core import logs, settings
from oar.web import runtime

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The blueprints whose writes are the owner's, and how the line names the way they came.
OWNER_SURFACES = {"owner": "api", "owner_relays": "api", "page": "page"}


def install(app: Flask) -> None:
    @app.before_request
    def start_clock() -> None:
        if request.method in WRITES and request.blueprint in OWNER_SURFACES:
            g.owner_write_started = time.monotonic()

    @app.after_request
    def log_write(response: Response) -> Response:
        started = g.pop("owner_write_started", None)
        if started is not None:
            logs.call_line("owner", {
                "relay": _relay_name(),
                "via": OWNER_SURFACES[request.blueprint or ""],
                "action": f"{request.method} {request.url_rule.rule if request.url_rule else request.path[:200]}",
                "target": "/".join(shown_id(str(value)) for value in (request.view_args or {}).values()) or "-",
                "outcome": _outcome(response),
                "duration_ms": round((time.monotonic() - started) * 1000),
            })
        return response


def _outcome(response: Response) -> str:
    if response.status_code < 400:
        return "ok"
    code = (response.get_json(silent=True) or {}).get("code") if response.is_json else None
    return str(code) if code else f"HTTP {response.status_code}"


def _relay_name() -> str:
    """The owner's name for this relay; the configured one when the settings cannot be read (a
    write refused because the database is busy is logged too)."""
    try:
        return str(runtime().settings(settings.UNREAD)["relay_name"])
    except peewee.PeeweeException:
        return runtime().config.relay_name
