"""The relay-to-relay API (`/api/peer/v1/…`, docs/relays.md#the-link): what a paired relay's agents
call here. Every call carries a pairing token this relay gave out and the caller's provenance
(origin relay, conversation, session title, model, mode, hop count, how long it can wait) as
headers; the action then goes through the same dispatcher as this relay's own agents' calls, with
this relay's own checks and rules, as the calling conversation's stand-in here. The headers are
the calling relay's own word: what they may unlock comes from the pairing token
(`oar.federation.provenance`, docs/relays.md#provenance)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from oar import __version__
from oar.actions.context import CallContext, Caller
from oar.actions.dispatch import dispatch
from oar.actions.peer_target import THIS_RELAY_ONLY
from oar.core import tracing
from oar.core.errors import ActionError, invalid
from oar.core.fields import Param
from oar.core.numbers import whole_or_refuse
from oar.core.timeutil import utcnow
from oar.core.waiting import watched_by
from oar.federation import callers, pairing, provenance, stand_ins
from oar.federation.client import API, Origin
from oar.federation.pairing import PairingToken
from oar.web import runtime
from oar.web.auth import bearer_token, unauthorized
from oar.web.bodies import json_body
from oar.web.connection import connection_watch
from oar.web.described import FLAG, OBJECTS, PEER, TEXT, TEXTS, Operation, described

COUNT = {"type": "integer"}
HOLDS_QUERY = {"sha256": Param("str", required=True, max_length=64, description="a pairing token's SHA-256, in hex")}

blueprint = Blueprint("peer", __name__, url_prefix=API)

# The version of this API; a peer that lacks a feature names it in REMOTE_RELAY_UNSUPPORTED.
API_VERSION = 1
FEATURES = ("actions", "waits", "groups", "asks", "events")
# Asks one status request may name; deliveries one fetch of events answers.
MAX_ASKS_LOOKED_UP = 100
EVENTS_PER_FETCH = 200
# Actions whose results would come back to the calling relay later (events, answers to asks):
# not across relays in this version.
NOT_ACROSS_RELAYS = {
    "transfer_subscriptions": "moving subscriptions to a conversation on another relay",
}


def require_pairing() -> PairingToken:
    token = bearer_token()
    if token is None:
        raise unauthorized("Send a pairing token of this relay as Authorization: Bearer <token>. Nothing was done.")
    row = pairing.verify(token)
    if row is None:
        raise unauthorized("That pairing token is not valid on this relay (unknown or revoked). Nothing was done.")
    return row


@blueprint.get("/hello")
@described(Operation(summary="Who this relay is (checks the pairing token)", caller=PEER, tag="peers",
                     answer={"name": TEXT, "version": TEXT}, errors=(401,)))
def hello() -> ResponseReturnValue:
    """Who this relay is, for the relay pairing with it (and a check of its token)."""
    require_pairing()
    return jsonify({"ok": True, "name": runtime().relay_name(), "version": __version__, "api": API_VERSION,
                    "features": list(FEATURES)})


@blueprint.post("/call")
@described(Operation(summary="One relay_tool call of an agent on the calling relay", caller=PEER, tag="peers",
                     strict=False, errors=(400, 401, 403, 404, 409, 429, 502)))
def call() -> ResponseReturnValue:
    """One relay_tool call of an agent on the calling relay."""
    token = require_pairing()
    origin = Origin.from_headers(request.headers)
    if origin is None:
        raise invalid(
            "A call from another relay carries its provenance: X-OAR-Origin-Relay, X-OAR-Origin-Session, "
            "X-OAR-Origin-Title and X-OAR-Hops (digits). Nothing was done."
        )
    payload = json_body()
    action = payload.get("action") if isinstance(payload, dict) else None
    refused = not_across_relays(action.strip()) if isinstance(action, str) else None
    if refused is not None:
        return jsonify(refused.to_dict()), refused.status
    pairing.note_use(token, origin.relay)
    stand_in = callers.stand_in(token, origin)
    remote = Caller(
        session_id=origin.session, session_title=origin.session_title, model=origin.model, relay=origin.relay,
        remote_hops=provenance.arriving_hops(origin.hops), pairing=token,
    )
    # The calling relay's trace goes on here (its client sends `traceparent`; docs/operations.md#tracing).
    ctx = CallContext(runtime=runtime(), caller_session=stand_in, via="peer", remote=remote,
                      trace_carrier=tracing.read_carrier(request.headers))
    if origin.wait_seconds is not None:
        ctx.cap_waits(origin.wait_seconds, f'Relay "{origin.relay}" waits {origin.wait_seconds} s at most for this call, so it')
    with watched_by(connection_watch(request.environ)):
        status, answer = dispatch(ctx, payload)
    return jsonify(answer), status


def not_across_relays(action: str) -> ActionError | None:
    """The refusal of an action another relay's agent may not call here, or None.

    The calling relay refuses these itself (oar/actions/peer_target.py), but a pairing token's
    holder need not be that relay: schedules are checked here too, or a holder could schedule
    prompts into this relay's conversations with no prompt from it ever refused (docs/relays.md#schedules)."""
    if action in THIS_RELAY_ONLY:
        return ActionError(
            "REMOTE_RELAY_UNSUPPORTED",
            f'Schedules exist only on the relay the agent runs on: relay "{runtime().relay_name()}" takes no '
            f"{action} from another relay's agent. Nothing was done.",
        )
    if action in NOT_ACROSS_RELAYS:
        return ActionError(
            "REMOTE_RELAY_UNSUPPORTED",
            f'Relay "{runtime().relay_name()}" (version {__version__}) does not take '
            f"{NOT_ACROSS_RELAYS[action]} yet. Nothing was done.",
        )
    return None


@blueprint.get("/holds")
@described(Operation(summary="Whether a pairing of this relay holds the pairing token with that SHA-256 (proves a call's origin)",
                     caller=PEER, tag="peers", query=HOLDS_QUERY, answer={"holds": FLAG}, errors=(400, 401)))
def holds() -> ResponseReturnValue:
    """Whether this relay holds the pairing token whose SHA-256 is `sha256` for one of its pairings:
    the relay that gave it out asks, to know that a call with it came from here (docs/relays.md#provenance)."""
    require_pairing()
    wanted = request.args.get("sha256", "")
    if provenance.TOKEN_HASH.fullmatch(wanted) is None:
        raise invalid("Give sha256: a pairing token's SHA-256, 64 characters 0-9 and a-f. Nothing was done.")
    return jsonify({"ok": True, "holds": provenance.held_here(wanted)})


@blueprint.get("/asks")
@described(Operation(summary="Where the calling relay's asks kept here stand (answered, dismissed, …)", caller=PEER,
                     tag="peers", answer={"asks": OBJECTS}, errors=(400, 401)))
def asks() -> ResponseReturnValue:
    """The asks named in `ids` that conversations of the calling relay made here (others: left out)."""
    token = require_pairing()
    wanted = [part for part in (request.args.get("ids") or "").split(",") if part][:MAX_ASKS_LOOKED_UP + 1]
    if not wanted or len(wanted) > MAX_ASKS_LOOKED_UP or any(len(part) > 32 for part in wanted):
        raise invalid(f"Give ids: 1 to {MAX_ASKS_LOOKED_UP} ask ids, comma-separated. Nothing was done.")
    return jsonify({"ok": True, "asks": stand_ins.asks(token, wanted)})


@blueprint.get("/events")
@described(Operation(summary="Relay events for the calling relay's conversations' subscriptions here, after a cursor",
                     caller=PEER, tag="peers", answer={"events": OBJECTS, "held": COUNT, "subscriptions": TEXTS},
                     errors=(400, 401)))
def events() -> ResponseReturnValue:
    """What was delivered to the calling relay's conversations after `after` (the last id it kept;
    what it kept is removed here), the events still held for them, and their active subscriptions."""
    token = require_pairing()
    after = whole_or_refuse("after", request.args.get("after", "0"),
                            nothing="Give the id of the last delivery kept (0 for none). Nothing was done.")
    fetched = stand_ins.deliveries(token, after, EVENTS_PER_FETCH)
    return jsonify({"ok": True, "events": fetched.events, "held": fetched.held, "subscriptions": fetched.subscriptions})


@blueprint.post("/unpair")
@described(Operation(summary="The calling relay removed its pairing: its subscriptions and asks here end",
                     caller=PEER, tag="peers", answer={"subscriptions": COUNT, "asks": COUNT}, errors=(401,)))
def unpair() -> ResponseReturnValue:
    """End the subscriptions (`endReason: unpaired`) and pending asks of the calling relay's
    conversations here, telling no one (docs/relays.md#removing-a-pairing)."""
    token = require_pairing()
    ended, asks_ended = stand_ins.end_pairing(token, utcnow())
    return jsonify({"ok": True, "subscriptions": ended, "asks": asks_ended})
