"""`GET /api/v1/openapi.json`: the relay's HTTP API as an OpenAPI 3.1 document (docs/calling.md#openapi).

Generated, never written by hand: the routes come from the Flask app's own URL map, what each
takes and answers from the `Operation` its view declares (oar/web/described.py), the bodies'
schemas from the same `Param` tables the handlers check (oar/core/schema.py), relay_tool's
request bodies from the action registry (one schema per action, `action` a constant) and the
error codes from oar/core/errors.py. Built once per process, on the first request.

It is served without a token: it holds no data of the relay's, only the shape of its API,
which is public in the source (and `/healthz` and `/readyz` are unauthenticated too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from werkzeug.routing import Rule

from oar import __version__
from oar.core.errors import STATUS_BY_CODE
from oar.core.fields import Param
from oar.core.schema import object_schema, param_schema
from oar.web.described import ANYONE, OWNER, SESSION, Operation, described, operation_of

blueprint = Blueprint("openapi", __name__)

OPENAPI_VERSION = "3.1.0"
DOCUMENT_PATH = "/api/v1/openapi.json"
# The routes the document covers: the JSON API and the health check (not the owner's page).
DOCUMENTED_PREFIXES = ("/api/v1/", "/healthz", "/readyz")
FLASK_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
EXTENSION_KEY = "oar.openapi"

SECURITY_SCHEMES = {
    "sessionToken": {
        "type": "http", "scheme": "bearer",
        "description": "A session's agent token (`oar token --session <id>`, or the owner API's "
        "POST /api/v1/owner/sessions/{id}/tokens): the caller is that conversation's agent.",
    },
    "ownerToken": {
        "type": "http", "scheme": "bearer",
        "description": "The relay's owner token (OAR_OWNER_TOKEN, or printed once at the first start; `oar token --owner`).",
    },
}
SECURITY_BY_CALLER: dict[str, list[dict[str, list[str]]]] = {
    SESSION: [{"sessionToken": []}], OWNER: [{"ownerToken": []}], ANYONE: [],
}

ERROR_SCHEMA = {
    "type": "object",
    "description": "A refused or failed request (docs/errors.md); `error` says what was wrong and what was not done.",
    "required": ["ok", "code", "error"],
    "properties": {
        "ok": {"const": False},
        "code": {"type": "string", "enum": list(STATUS_BY_CODE)},
        "error": {"type": "string"},
    },
}
STATUS_TEXT = {
    400: "Bad input: the body, an argument or a choice was refused",
    401: "No token, or not a valid one for this route",
    403: "Refused by a rule, a setting or the owner",
    404: "No such session, card, question, group, provider, schedule, subscription, task or turn",
    409: "A limit or a busy session",
    413: "The body is larger than the relay takes",
    429: "Rate limited",
    499: "The caller stopped waiting (nobody reads this answer; what the call started goes on)",
    502: "A relay that could not be reached",
    503: "The relay is not ready (what is missing is listed)",
}


def documented_rules(app: Flask) -> list[Rule]:
    """The app's routes the document must cover, in path order."""
    rules = [rule for rule in app.url_map.iter_rules() if rule.rule.startswith(DOCUMENTED_PREFIXES)]
    return sorted(rules, key=lambda rule: rule.rule)


def openapi_path(rule: Rule) -> str:
    """`/api/v1/owner/sessions/<session_id>` → `/api/v1/owner/sessions/{session_id}`."""
    return FLASK_PARAMETER.sub(r"{\1}", rule.rule)


def methods_of(rule: Rule) -> list[str]:
    return sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})


def build(app: Flask) -> dict[str, Any]:
    """The document for `app`'s routes; a route without an `Operation` is left out (a test
    fails on it)."""
    schemas: dict[str, Any] = {"Error": ERROR_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for rule in documented_rules(app):
        operation = operation_of(app.view_functions[rule.endpoint])
        if operation is None:
            continue
        for method in methods_of(rule):
            paths.setdefault(openapi_path(rule), {})[method.lower()] = _operation(rule, method, operation, schemas)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "OAR Relay",
            "version": __version__,
            "description": "The relay's JSON API: relay_tool for agents, their tasks and external agents' turns, "
            "the owner API and the health check. Generated from the relay's own routes and argument tables.",
        },
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }


def document(app: Flask) -> dict[str, Any]:
    """The document, built once per app (one per process)."""
    built = app.extensions.get(EXTENSION_KEY)
    if built is None:
        built = app.extensions[EXTENSION_KEY] = build(app)
    return built


@blueprint.get(DOCUMENT_PATH)
@described(Operation(
    summary="This document: the relay's HTTP API as OpenAPI 3.1", caller=ANYONE, tag="meta",
    answer_schema={"type": "object", "required": ["openapi", "paths"]},
))
def openapi_document() -> ResponseReturnValue:
    return jsonify(document(current_app))


# One operation ----------------------------------------------------------------------------


def _operation(rule: Rule, method: str, operation: Operation, schemas: dict[str, Any]) -> dict[str, Any]:
    path_names = list(rule.arguments)
    described_op: dict[str, Any] = {
        "operationId": f"{rule.endpoint}.{method.lower()}" if len(methods_of(rule)) > 1 else rule.endpoint,
        "summary": operation.summary,
        "security": SECURITY_BY_CALLER[operation.caller],
    }
    if operation.tag:
        described_op["tags"] = [operation.tag]
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
        for name in sorted(path_names, key=rule.rule.index)
    ]
    parameters += [_query_parameter(name, param) for name, param in operation.query.items()]
    if parameters:
        described_op["parameters"] = parameters
    body = _request_body(operation, schemas)
    if body is not None:
        described_op["requestBody"] = body
    described_op["responses"] = _responses(operation, has_path=bool(path_names), has_body=body is not None)
    return described_op


def _query_parameter(name: str, param: Param) -> dict[str, Any]:
    parameter: dict[str, Any] = {"name": name, "in": "query", "required": param.required, "schema": param_schema(param)}
    if param.description:
        parameter["description"] = param.description
    return parameter


def _request_body(operation: Operation, schemas: dict[str, Any]) -> dict[str, Any] | None:
    if operation.body_choices is not None:
        choices = operation.body_choices()
        schemas.update(choices)
        schema: dict[str, Any] = {
            "oneOf": [{"$ref": f"#/components/schemas/{name}"} for name in choices],
            "discriminator": {
                "propertyName": operation.choose_by,
                "mapping": {name: f"#/components/schemas/{name}" for name in choices},
            },
        }
        return {"required": True, "content": {"application/json": {"schema": schema}}}
    if operation.body is None:
        return None
    schema = object_schema(operation.body)
    if operation.strict:
        schema["additionalProperties"] = False
    required = bool(schema.get("required"))
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _responses(operation: Operation, *, has_path: bool, has_body: bool) -> dict[str, Any]:
    success = operation.answer_schema or _answer_schema(operation.answer)
    responses: dict[str, Any] = {
        str(operation.status): {"description": operation.summary, "content": {"application/json": {"schema": success}}},
    }
    errors = set(operation.errors)
    if operation.caller != ANYONE:
        errors.add(401)
    if has_body:
        errors |= {400, 413}
    if has_path:
        errors.add(404)
    for status in sorted(errors):
        schema = {"$ref": "#/components/schemas/Error"}
        if status == 503 and operation.answer_schema is not None:
            schema = operation.answer_schema  # the health checks answer 503 in their own shape
        responses[str(status)] = {"description": STATUS_TEXT[status], "content": {"application/json": {"schema": schema}}}
    return responses


def _answer_schema(fields: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    return {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}, **fields}}
