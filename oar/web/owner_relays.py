"""The owner API of paired relays (docs/owner-api.md#paired-relays): pairing tokens this relay
gives out, and the relays it acts on."""

from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from oar.federation import pairing, peers
from oar.owner import relays
from oar.web import runtime
from oar.web.auth import require_owner
from oar.web.described import OBJECT, OBJECTS, TEXT, described
from oar.web.owner import body, ok, owner

blueprint = Blueprint("owner_relays", __name__, url_prefix="/api/v1/owner")


@blueprint.before_request
def owner_only() -> None:
    require_owner(runtime().config)


@blueprint.post("/pairing-tokens")
@described(owner("A pairing token another relay's owner enters to pair with this relay (shown once)",
                 body=relays.NEW_PAIRING_TOKEN, status=201, answer={"token": TEXT, "pairingToken": OBJECT}))
def create_pairing_token() -> ResponseReturnValue:
    row, token = relays.create_pairing_token(runtime(), body())
    return ok(token=token, pairingToken=pairing.view(row)), 201


@blueprint.get("/pairing-tokens")
@described(owner("The pairing tokens this relay gave out (never the tokens)", answer={"pairingTokens": OBJECTS}))
def list_pairing_tokens() -> ResponseReturnValue:
    return ok(pairingTokens=relays.list_pairing_tokens(runtime()))


@blueprint.delete("/pairing-tokens/<token_id>")
@described(owner("Revoke a pairing token: the relay holding it is refused from then on", answer={"pairingToken": OBJECT}))
def revoke_pairing_token(token_id: str) -> ResponseReturnValue:
    return ok(pairingToken=relays.revoke_pairing_token(runtime(), token_id))


@blueprint.post("/relays")
@described(owner("Pair with another relay: its url and pairing token", body=relays.NEW_RELAY, status=201,
                 answer={"relay": OBJECT}, errors=(401, 502)))
def add_relay() -> ResponseReturnValue:
    return ok(relay=peers.view(relays.add_relay(runtime(), body()))), 201


@blueprint.get("/relays")
@described(owner("The relays this one is paired with (never their tokens)", answer={"relays": OBJECTS}))
def list_relays() -> ResponseReturnValue:
    return ok(relays=relays.list_relays(runtime()))


@blueprint.patch("/relays/<name>")
@described(owner("Change a pairing: what agents may do there, its name, its token", body=relays.RELAY_CHANGES,
                 answer={"relay": OBJECT}))
def change_relay(name: str) -> ResponseReturnValue:
    return ok(relay=peers.view(relays.change_relay(runtime(), name, body())))


@blueprint.delete("/relays/<name>")
@described(owner("Unpair: forget a paired relay and its unlocks", answer={"removed": TEXT}))
def remove_relay(name: str) -> ResponseReturnValue:
    return ok(removed=relays.remove_relay(runtime(), name).name)
