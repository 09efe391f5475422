"""Which relay a call acts on: its `relay` argument as a `Target` (docs/calling.md#check-order:
"resolve relay"): `"this"` or this relay's name, else a paired relay by its name or host."""

from __future__ import annotations

from typing import Any

from oar.actions.context import CallContext
from oar.actions.peer_target import PeerTarget
from oar.actions.registry import ActionSpec
from oar.actions.targets import Target, ThisRelay
from oar.core.errors import ActionError, invalid
from oar.federation import peers
from oar.federation.models import Peer


def resolve_target(ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> Target:
    relay = args.get("relay")
    if relay is None:
        if spec.relay_optional:
            return ThisRelay.of(ctx)
        raise invalid(
            f'{spec.name} needs relay: "this" or a relay\'s name from list_relays. {spec.nothing}'.strip()
        )
    wanted = relay.strip()
    if wanted.lower() == "this" or wanted.casefold() == ctx.relay_name.casefold():
        return ThisRelay.of(ctx)
    # Other relays' agents act on this relay only: a paired relay of this one is not theirs to name,
    # nor to learn of from a refusal (list_relays shows them this relay alone).
    found = peers.matching(wanted) if ctx.caller.is_local else []
    if len(found) == 1:
        return PeerTarget(found[0])
    everyone: list[dict[str, Any]] = [{"name": ctx.relay_name, "self": True}]
    if ctx.caller.is_local:
        everyone += [{"name": peer.name} for peer in Peer.select().order_by(Peer.created_at)]
    if found:
        names = ", ".join(f'"{peer.name}"' for peer in found)
        raise ActionError(
            "REMOTE_RELAY_UNKNOWN",
            f'"{wanted[:100]}" names several paired relays: {names}. Pass one\'s name. {spec.nothing}'.strip(),
            relays=[{"name": peer.name} for peer in found],
        )
    listed = ", ".join(f'"{entry["name"]}"' + (" (this relay)" if entry.get("self") else "") for entry in everyone[:20])
    raise ActionError(
        "REMOTE_RELAY_UNKNOWN",
        f'No relay is named "{wanted[:100]}". Relays: {listed}. {spec.nothing}'.strip(),
        relays=everyone[:20],
    )
