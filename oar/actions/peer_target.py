"""A paired relay as a `Target` (docs/relays.md): the checks of this relay ask it for its lock,
level and hop count, and its `run` sends the call there with the caller's provenance; the peer
runs its own checks again and answers as itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oar.actions import subscriptions
from oar.actions.context import CallContext, Caller
from oar.actions.registry import ActionSpec
from oar.actions.targets import Unlocked
from oar.core.errors import ActionError
from oar.federation import peer_asks, peer_events, peers
from oar.federation.client import Origin, refusal
from oar.federation.models import Peer
from oar.sessions import rules
from oar.watching.subscription_rules import MAX_SUBSCRIPTIONS

# Schedules exist only on the relay the agent runs on (docs/schedules.md).
THIS_RELAY_ONLY = ("schedule", "list_schedules", "unschedule")


@dataclass(frozen=True)
class PeerTarget:
    """A relay this one is paired with: reached by crossing one relay, at the owner's level."""

    peer: Peer
    agent_sessions_enabled: bool = True  # the peer enforces its own setting
    crossings: int = 1

    @property
    def name(self) -> str:
        return self.peer.name

    @property
    def level(self) -> str:
        return self.peer.level

    def unlocked_by(self, caller: Caller) -> Unlocked | None:
        if caller.session is None:  # only this relay's conversations act on its paired relays
            return None
        by = peers.unlocked_by(self.peer.id, caller.session.id)
        return "owner" if by == "owner" else "agent" if by == "agent" else None

    def accepts(self, caller: Caller) -> bool:
        return True  # the peer's own "Accept prompts from other relays' agents" decides there

    def run(self, ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> dict[str, Any]:
        nothing = spec.nothing or "Nothing was done."
        if spec.name in THIS_RELAY_ONLY:
            raise ActionError(
                "REMOTE_RELAY_UNSUPPORTED",
                f'Schedules exist only on the relay the agent runs on; relay "{self.name}" is a paired relay. '
                f'Call {spec.name} with relay "this". {nothing}',
            )
        if spec.name == "create_session":  # one level: the calling conversation's own rule, checked here
            rules.check_may_create(ctx.caller_session)
            if args.get("group") and peers.lacks(self.peer, "groups"):
                raise ActionError(
                    "REMOTE_RELAY_UNSUPPORTED",
                    f"The target relay doesn't support groups on create_session yet: relay \"{self.name}\" "
                    f"(version {self.peer.version or 'unknown'}) cannot list session groups. {nothing}",
                )
        if spec.name == "subscribe" and subscriptions.subscriptions_of(ctx.caller_session.id) >= MAX_SUBSCRIPTIONS:
            raise subscriptions.limit_reached()  # counting those here and on every paired relay
        budget = wait_budget(ctx)
        caller = ctx.caller
        origin = Origin(
            relay=ctx.relay_name, session=caller.session_id, session_title=caller.session_title, model=caller.model,
            mode=ctx.caller_session.mode, hops=caller.hops() + self.crossings, wait_seconds=budget,
        )
        payload = {"action": spec.name, **args, "relay": "this"}
        try:
            answer = peers.link_to(ctx.runtime, self.peer).call(payload, origin, budget)
        except ActionError as error:
            peers.note_failure(self.peer, error.code)
            raise
        peers.note_answer(self.peer)
        if answer.get("ok") is not True:
            raise refusal(answer)
        if spec.name == "ask":  # kept there; this relay checks there for its answer
            peer_asks.record(ctx.runtime, self.peer, ctx.caller_session, answer, args, origin.hops)
        elif spec.name == "subscribe":  # kept there; this relay fetches its events
            peer_events.record_subscription(self.peer, ctx.caller_session, answer)
        elif spec.name == "unsubscribe":
            peer_events.end_subscriptions(self.peer, ctx.caller_session, str(args.get("subscription_id") or ""))
        result = {key: value for key, value in answer.items() if key not in ("ok", "relay")}
        if spec.name == "relay_info" and peers.lacks(self.peer, "groups"):
            result["groups"] = None
            result.pop("groupsTotal", None)
            result["groupsNote"] = (
                f'Relay "{self.name}" (version {self.peer.version or "unknown"}) cannot list session groups, '
                "so create_session cannot take group there."
            )
        result.setdefault("summary", f"{spec.name} → {self.name}")
        return result


def wait_budget(ctx: CallContext) -> int:
    """How long the call may take there, in whole seconds: this relay's longest wait per tool call,
    or less when the caller's own deadline is nearer (the peer's waits and cards end within it)."""
    cap = int(ctx.settings["max_wait_seconds"])
    if ctx.max_wait_seconds is not None:
        cap = min(cap, ctx.max_wait_seconds)
    return max(0, cap)
