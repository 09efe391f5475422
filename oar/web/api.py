"""`POST /api/v1/relay_tool`: the agents' one tool over HTTP (SPEC §3)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from oar.actions.dispatch import CallContext, dispatch
from oar.web import runtime
from oar.web.auth import require_agent

blueprint = Blueprint("api", __name__)


@blueprint.post("/api/v1/relay_tool")
def relay_tool():  # type: ignore[no-untyped-def]
    caller = require_agent()
    try:
        payload = request.get_json(force=True, silent=True)
    except RecursionError:  # nested deeper than the JSON parser goes: not a body any action takes
        payload = None
    status, body = dispatch(CallContext(runtime=runtime(), caller=caller, via="http"), payload)
    return jsonify(body), status
