"""The owner's pairings (docs/relays.md#pairing): pairing tokens this relay gives out, and the
relays it is paired with. Plain functions the owner API, the page and `oar pair` call."""

from __future__ import annotations

from typing import Any

from oar.core.errors import refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.runtime import Runtime
from oar.federation import pairing, peers
from oar.federation.models import PairingToken, Peer

NEW_PAIRING_TOKEN = {"label": Param("str", max_length=200, one_line=True, description="a note on who the token is for")}
NEW_RELAY = {
    "url": Param("str", required=True, max_length=2000, description="the other relay's address (https://…)"),
    "token": Param("str", required=True, max_length=peers.MAX_TOKEN_CHARS, description="the pairing token its owner created"),
    "name": Param("str", max_length=peers.MAX_NAME_CHARS, description="the name agents use (default: the relay's own)"),
}
RELAY_CHANGES = {
    "permission": Param("str", choices=peers.LEVELS, description='what agents may do there ("Agents may")'),
    "name": Param("str", max_length=peers.MAX_NAME_CHARS, description="the name agents use"),
    "token": Param("str", max_length=peers.MAX_TOKEN_CHARS, description="a new pairing token from its owner"),
}


def create_pairing_token(runtime: Runtime, payload: dict[str, Any]) -> tuple[PairingToken, str]:
    args, _ = check_fields("pairing token", NEW_PAIRING_TOKEN, payload, strict=True, nothing="No token was created.")
    return pairing.create(args.get("label"))


def list_pairing_tokens(runtime: Runtime) -> list[dict[str, Any]]:
    return pairing.listed()


def revoke_pairing_token(runtime: Runtime, token_id: str) -> dict[str, Any]:
    return pairing.view(pairing.revoke(token_id))


@refusals_ending(peers.NOTHING)
def add_relay(runtime: Runtime, payload: dict[str, Any]) -> Peer:
    args, _ = check_fields("pairing", NEW_RELAY, payload, strict=True, nothing=peers.NOTHING)
    return peers.add(runtime, args["url"], args["token"], args.get("name"))


def list_relays(runtime: Runtime) -> list[dict[str, Any]]:
    return peers.listed()


@refusals_ending(peers.CHANGED_NOTHING)
def change_relay(runtime: Runtime, reference: str, payload: dict[str, Any]) -> Peer:
    peer = peers.find(reference)
    args, _ = check_fields("relay change", RELAY_CHANGES, payload, strict=True, nothing=peers.CHANGED_NOTHING)
    return peers.change(runtime, peer, args)


@refusals_ending("Nothing was removed.")
def remove_relay(runtime: Runtime, reference: str) -> Peer:
    peer = peers.find(reference)
    peers.remove(runtime, peer)
    return peer
