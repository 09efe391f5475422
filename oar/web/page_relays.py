"""The page's paired relays (docs/relays.md#on-the-page): the forms of the settings page's
"Paired relays" section, on the page's blueprint (so its CSRF check and sign-in apply). Each
calls the owner service the owner API calls."""

from __future__ import annotations

from flask import url_for
from flask.typing import ResponseReturnValue

from oar.core.errors import ActionError
from oar.owner import relays
from oar.web import runtime
from oar.web.page import blueprint, done, form_text, payload_of, refused
from oar.web.page_settings import settings_page


def _here() -> str:
    return url_for("page.settings_view") + "#relays"


@blueprint.post("/settings/pairing-tokens")
def create_pairing_token() -> ResponseReturnValue:
    """A new pairing token, shown on the page this once (never put in a cookie or a redirect)."""
    try:
        row, token = relays.create_pairing_token(runtime(), payload_of({"label": form_text("label").strip()}))
    except ActionError as error:
        return refused(error, _here())
    return settings_page(201, new_pairing_token=token, new_pairing_token_id=row.id)


@blueprint.post("/settings/pairing-tokens/<token_id>/revoke")
def revoke_pairing_token(token_id: str) -> ResponseReturnValue:
    try:
        relays.revoke_pairing_token(runtime(), token_id)
    except ActionError as error:
        return refused(error, _here())
    return done(f"Pairing token {token_id} revoked: the relay holding it is refused from now on.", _here())


@blueprint.post("/settings/relays")
def add_relay() -> ResponseReturnValue:
    fields = {key: form_text(key).strip() for key in ("url", "token", "name")}
    try:
        peer = relays.add_relay(runtime(), payload_of(fields))
    except ActionError as error:
        return refused(error, _here())
    return done(f'Paired with relay "{peer.name}" ({peer.url}). Agents may: {peer.level}.', _here())


@blueprint.post("/settings/relays/<name>/permission")
def change_relay_permission(name: str) -> ResponseReturnValue:
    try:
        peer = relays.change_relay(runtime(), name, payload_of({"permission": form_text("permission")}))
    except ActionError as error:
        return refused(error, _here())
    return done(f'Agents may "{peer.level}" on relay "{peer.name}".', _here())


@blueprint.post("/settings/relays/<name>/delete")
def remove_relay(name: str) -> ResponseReturnValue:
    try:
        peer = relays.remove_relay(runtime(), name)
    except ActionError as error:
        return refused(error, _here())
    return done(f'Unpaired relay "{peer.name}".', _here())

