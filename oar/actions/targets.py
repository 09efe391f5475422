"""Where an action runs: the `Target` a call's `relay` argument names.

This relay is `ThisRelay`; a paired relay is a `PeerTarget` (`oar.actions.peer_target`) that
answers the same questions for itself (is it unlocked in this conversation, what may agents do
there, does it take prompts from other relays' agents) and whose `run` sends the call there. The
dispatcher's checks ask the target instead of assuming this relay; `oar.actions.resolving` picks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from oar.actions.context import CallContext, Caller
from oar.actions.registry import ActionSpec

# Who opened a relay for a conversation (docs/relays.md): the owner by mention, an agent there by
# writing into it; this relay is open to its own conversations from the start.
Unlocked = Literal["always", "owner", "agent"]


class Target(Protocol):
    """A relay an action can run on, as the dispatcher's checks see it."""

    @property
    def name(self) -> str:
        """The relay's name, as results show it."""
        ...

    @property
    def agent_sessions_enabled(self) -> bool:
        """The owner's "Agents may start and use sessions on this relay"; a paired relay
        enforces its own, so it counts as on here."""
        ...

    @property
    def level(self) -> str:
        """The "Agents may" level there: "full", "prompt", "read" or "off"."""
        ...

    @property
    def crossings(self) -> int:
        """Relay crossings a prompt makes to get there (0 for this relay)."""
        ...

    def unlocked_by(self, caller: Caller) -> Unlocked | None:
        """Who unlocked the relay in the caller's conversation; None: it is locked."""
        ...

    def accepts(self, caller: Caller) -> bool:
        """Whether it takes prompts (and watches) from this caller (docs/relays.md "Accept prompts
        from other relays' agents")."""
        ...

    def run(self, ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> dict[str, Any]:
        """Run the action there; returns the handler's result (with its `summary`)."""
        ...


@dataclass(frozen=True)
class ThisRelay:
    """This relay: always unlocked, at the full level, reached without crossing a relay."""

    name: str
    agent_sessions_enabled: bool
    level: str = "full"
    crossings: int = 0
    accepts_agent_prompts: bool = False

    @classmethod
    def of(cls, ctx: CallContext) -> ThisRelay:
        return cls(
            name=ctx.relay_name, agent_sessions_enabled=bool(ctx.settings["agent_sessions_enabled"]),
            accepts_agent_prompts=bool(ctx.settings["accept_agent_prompts"]),
        )

    def unlocked_by(self, caller: Caller) -> Unlocked | None:
        return "always"

    def accepts(self, caller: Caller) -> bool:
        # Its own conversations always; other relays' agents as the owner's "Accept prompts from
        # other relays' agents" says.
        return caller.is_local or self.accepts_agent_prompts

    def run(self, ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> dict[str, Any]:
        return spec.handler(ctx.with_approval(spec.approval), args)
