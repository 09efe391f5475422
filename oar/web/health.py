"""`GET /healthz`: 200 once web, database and queue answer; 503 saying what is missing."""

from __future__ import annotations

import logging

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from oar import __version__
from oar.core.db import database
from oar.owner.bootstrap import pending_migrations
from oar.web import runtime
from oar.web.described import ANYONE, Operation, described

blueprint = Blueprint("health", __name__)
log = logging.getLogger(__name__)
# What an anonymous caller learns of a failing database: that it fails. The error text (a
# host, a port, a user name, a file path) goes to the log (docs/operations.md#health-check).
DATABASE_UNAVAILABLE = "database: unavailable"


HEALTH = {
    "type": "object",
    "required": ["ok", "version", "relay"],
    "properties": {
        "ok": {"type": "boolean"},
        "version": {"type": "string"},
        "relay": {"type": "string"},
        "problems": {"type": "array", "items": {"type": "string"}},
    },
}


@blueprint.get("/healthz")
@described(Operation(
    summary="Whether web, database and queue answer (503 saying what is missing)", caller=ANYONE, tag="health",
    answer_schema=HEALTH, errors=(503,),
))
def healthz() -> ResponseReturnValue:
    relay = runtime()
    problems = []
    name = relay.config.relay_name
    try:
        database.connect(reuse_if_open=True)
        name = relay.relay_name()
        pending = pending_migrations()
        if pending:
            problems.append(f"database: migrations not applied ({', '.join(pending)}); run `python -m oar migrate`")
    except Exception as error:  # noqa: BLE001 - any failure here is what the check reports
        log.warning("health check: the database failed: %s: %s", type(error).__name__, error)
        problems.append(DATABASE_UNAVAILABLE)
    try:
        relay.redis.ping()
    except Exception as error:  # noqa: BLE001
        problems.append(f"queue: Redis does not answer ({type(error).__name__})")
    if problems:
        return jsonify({"ok": False, "version": __version__, "relay": name, "problems": problems}), 503
    return jsonify({"ok": True, "version": __version__, "relay": name})
