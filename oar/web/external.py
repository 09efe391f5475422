"""The API of an attached `external` agent process (docs/providers.md#external), with the session's agent token:

- `GET /api/v1/external/next?wait_seconds=N` — long-poll for the turn to work on:
  `{turn: {id, text, model, effort, mode, cwd}}`, or `{turn: null}` when none came in time;
- `POST /api/v1/external/turns/<id>` `{text?, activity?, usage?, done?, error?}` — stream the
  reply; the answer says `stop: true` once the turn is no longer running (stopped, timed out).
"""

from __future__ import annotations

import contextlib
import logging

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from oar import providers
from oar.core.errors import ActionError, invalid, not_found
from oar.core.fields import Param, check_fields
from oar.core.numbers import whole_or_refuse
from oar.core.ratelimit import refuse_over_limit
from oar.core.statuses import LIVE_TURN
from oar.core.wait_slots import wait_slot
from oar.core.waiting import CallerGone, watched_by
from oar.sessions.sessions import Session
from oar.turns import external, turns
from oar.web import runtime
from oar.web.auth import require_agent
from oar.web.bodies import json_body
from oar.web.connection import connection_watch
from oar.web.described import MAYBE_OBJECT, SESSION, TEXT, Operation, described

log = logging.getLogger(__name__)

blueprint = Blueprint("external", __name__, url_prefix="/api/v1/external")

# The longest long poll, and the one a poll without wait_seconds makes.
MAX_POLL_SECONDS = 60
DEFAULT_POLL_SECONDS = 30
NEXT_QUERY = {"wait_seconds": Param("int", minimum=0, maximum=MAX_POLL_SECONDS,
                                    description=f"whole seconds to wait (default {DEFAULT_POLL_SECONDS})")}
POST_FIELDS = {
    "text": Param("str", max_length=100_000),
    "activity": Param("str", max_length=500),
    "usage": Param("object"),
    "done": Param("bool"),
    "error": Param("str", max_length=2000),
}


def _external_session() -> Session:
    session = require_agent()
    provider = providers.get(session.provider)
    if provider is None or provider.kind != "external":
        raise invalid(f"Session {session.id[:8]} runs on {session.provider}, not on an external provider. Nothing was done.")
    return session


@blueprint.get("/next")
@described(Operation(
    summary="Long-poll for the next turn of an external agent's session", caller=SESSION, tag="external",
    query=NEXT_QUERY, answer={"turn": MAYBE_OBJECT}, errors=(400, 429, 499),
))
def next_turn() -> ResponseReturnValue:
    session = _external_session()
    # Whole seconds in ASCII digits, 0–60, as the OpenAPI document says: no `nan` or `inf`, whose
    # deadline never passes (docs/providers.md#external).
    wait = whole_or_refuse("wait_seconds", request.args.get("wait_seconds", str(DEFAULT_POLL_SECONDS)),
                           maximum=MAX_POLL_SECONDS, nothing="Nothing was done.")
    # A poll is a call of the session's conversation, and a long one holds a web thread as a
    # waiting relay_tool call does (docs/limits.md#waits-at-once).
    refuse_over_limit(runtime(), session.id, is_write=False, nothing="Nothing was done.")
    try:
        # The caller's watch first: the slot's lease is renewed on its pulse (oar/core/wait_slots.py).
        with (
            watched_by(connection_watch(request.environ)),
            wait_slot(runtime(), session.id, "Nothing was done.") if wait > 0 else contextlib.nullcontext(),
        ):
            turn = external.next_turn(runtime(), session.id, wait)
    except CallerGone:  # the agent process closed its connection: nobody reads this answer
        log.info("external/next of session %s: the caller stopped waiting", session.id[:8])
        gone = ActionError("REMOTE_RELAY_CALLER_GONE", "The caller stopped waiting. Nothing was done.")
        return jsonify(gone.to_dict()), gone.status
    if turn is None:
        return jsonify({"ok": True, "turn": None})
    return jsonify({"ok": True, "turn": {
        "id": turn.id, "text": turn.text, "model": turn.model, "effort": turn.effort,
        "mode": turn.mode or session.mode, "cwd": session.cwd,
    }})


@blueprint.post("/turns/<turn_id>")
@described(Operation(
    summary="Stream an external agent's reply into its turn", caller=SESSION, tag="external", body=POST_FIELDS,
    answer={"stop": {"type": "boolean"}, "status": TEXT}, errors=(400, 404),
))
def post_to_turn(turn_id: str) -> ResponseReturnValue:
    session = _external_session()
    body = json_body()
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object: {text?, activity?, usage?, done?, error?}. Nothing was posted.")
    args, _ = check_fields("external post", POST_FIELDS, body, strict=True, nothing="Nothing was posted.")
    turn = turns.find_message(turn_id, session.id)
    if turn is None:
        raise not_found(f"Session {session.id[:8]} has no turn {turn_id[:64]}. Nothing was posted.")
    if turn.status not in LIVE_TURN or turn.stop_requested:
        return jsonify({"ok": True, "stop": True, "status": turn.status})
    external.post(runtime(), turn.id, args)
    return jsonify({"ok": True, "stop": False, "status": turn.status})
