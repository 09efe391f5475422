"""`GET /healthz`: 200 once web, database and queue answer; 503 saying what is missing.
`GET /readyz`: whether the relay can do its work: the database, Redis, a worker and the clock
(docs/operations.md#health-check); each part `ok` or a word saying what is wrong, never an
error's text."""

from __future__ import annotations

import logging
import time

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from oar import __version__
from oar.core import presence
from oar.core.db import database
from oar.owner.bootstrap import migration_state, pending_for_health
from oar.web import runtime
from oar.web.described import ANYONE, Operation, described

blueprint = Blueprint("health", __name__)
log = logging.getLogger(__name__)
# What an anonymous caller learns of a failing database: that it fails. The error text (a
# host, a port, a user name, a file path) goes to the log (docs/operations.md#health-check).
DATABASE_UNAVAILABLE = "database: unavailable"
# Where an app keeps its last healthy answer: (when, by the monotonic clock; the relay's name).
LAST_HEALTHY = "oar.last_healthy"


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
    # A healthy answer is reused for HEALTH_REUSE_SECONDS: its database query and Redis ping cost
    # twice the bare endpoint's request, and probes may come many times a second.
    last: tuple[float, str] | None = current_app.extensions.get(LAST_HEALTHY)
    if last is not None and time.monotonic() - last[0] < relay.time("HEALTH_REUSE_SECONDS"):
        return jsonify({"ok": True, "version": __version__, "relay": last[1]})
    problems = []
    name = relay.config.relay_name
    try:
        database.connect(reuse_if_open=True)
        name = relay.relay_name()
        pending = pending_for_health()
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
        current_app.extensions.pop(LAST_HEALTHY, None)
        return jsonify({"ok": False, "version": __version__, "relay": name, "problems": problems}), 503
    current_app.extensions[LAST_HEALTHY] = (time.monotonic(), name)
    return jsonify({"ok": True, "version": __version__, "relay": name})


PART = {"type": "string"}
READINESS = {
    "type": "object",
    "required": ["ready", "version", "relay", "parts"],
    "properties": {
        "ready": {"type": "boolean"},
        "version": {"type": "string"},
        "relay": {"type": "string"},
        "parts": {
            "type": "object",
            "required": ["database", "redis", "worker", "clock"],
            "properties": {
                "database": {**PART, "enum": ["ok", "unavailable", "migrations not applied", "newer than this node"]},
                "redis": {**PART, "enum": ["ok", "unavailable"]},
                "worker": {**PART, "enum": ["ok", "none", "unknown"]},
                "clock": {**PART, "enum": ["ok", "none", "unknown"]},
            },
        },
    },
}


@blueprint.get("/readyz")
@described(Operation(
    summary="Whether the relay can do its work: database, Redis, a worker and the clock (503 when a part is not there)",
    caller=ANYONE, tag="health", answer_schema=READINESS, errors=(503,),
))
def readyz() -> ResponseReturnValue:
    relay = runtime()
    name = relay.config.relay_name
    parts = {"database": "ok", "redis": "ok", "worker": "unknown", "clock": "unknown"}
    try:
        database.connect(reuse_if_open=True)
        name = relay.relay_name()
        pending, unknown = migration_state()
        if unknown:
            parts["database"] = "newer than this node"
        elif pending:
            parts["database"] = "migrations not applied"
    except Exception as error:  # noqa: BLE001 - any failure here is what the check reports
        log.warning("readiness check: the database failed: %s: %s", type(error).__name__, error)
        parts["database"] = "unavailable"
    try:
        stale = relay.time("ALIVE_STALE_SECONDS")
        for kind in (presence.WORKER, presence.CLOCK):
            parts[kind] = "ok" if presence.present(relay.redis, relay.config.namespace, kind, stale) else "none"
    except Exception as error:  # noqa: BLE001
        log.warning("readiness check: Redis failed: %s: %s", type(error).__name__, error)
        parts["redis"] = "unavailable"
    ready = all(value == "ok" for value in parts.values())
    body = {"ready": ready, "version": __version__, "relay": name, "parts": parts}
    return jsonify(body), 200 if ready else 503
