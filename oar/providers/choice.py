"""Choosing what a prompt runs on: its provider, model, effort and billing, in one step.

`send`, `create_session`, `update_session` and the owner's new conversation all call
`choose`; it raises the refusals in the order the relay has always checked them (provider,
billing switch or cap, model, effort), so a refused choice writes and sends nothing, and the
model is checked before any approval card (docs/sessions.md#send, docs/sessions.md#model-checks).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oar import providers
from oar.core.errors import ActionError, invalid, refusals_ending
from oar.core.models import Session
from oar.core.timeutil import utcnow
from oar.providers import billing
from oar.providers.base import Provider
from oar.providers.modelcheck import check_model

# Named in REMOTE_RELAY_PROVIDER_UNAVAILABLE when the owner asked for no provider and none is configured.
DEFAULT_NAMED = "(default)"


@dataclass(frozen=True)
class Requested:
    """What a caller asked for; None where it left the choice to the relay."""

    provider: str | None = None
    model: str | None = None
    effort: str | None = None

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> Requested:
        """From checked action arguments (blank values were dropped by the checks)."""
        return cls(provider=args.get("provider"), model=args.get("model"), effort=args.get("effort"))


@dataclass(frozen=True)
class ProviderPick:
    """The first half of a choice: the provider, and whether `send` moves the session to it."""

    provider: Provider
    switched: bool = False
    # The configured providers seen while picking for a new session: its model check names
    # the one other provider that lists a requested id (docs/sessions.md#model-checks).
    configured: tuple[Provider, ...] = ()


@dataclass(frozen=True)
class Choice:
    """What a prompt runs on."""

    provider: Provider
    model: str | None
    effort: str | None
    model_note: str | None = None
    # "Switches billing to …" when `send` moves the session to another provider of its family.
    billing_switch: str | None = None

    @property
    def card_lines(self) -> tuple[str, ...]:
        """The lines an approval card adds for the choice (docs/sessions.md#send)."""
        return (self.billing_switch,) if self.billing_switch else ()

    def reported(self) -> dict[str, Any]:
        """The result fields that tell the caller about the choice: `modelNote`, and the new
        `provider` and `billingSwitch` after a switch."""
        fields: dict[str, Any] = {}
        if self.model_note:
            fields["modelNote"] = self.model_note
        if self.billing_switch:
            fields.update(provider=self.provider.name, billingSwitch=self.billing_switch)
        return fields


def choose(
    session: Session | None,
    requested: Requested,
    *,
    relay_name: str,
    like: Session | None = None,
    cap_checked_at: datetime | None = None,
    picked: ProviderPick | None = None,
) -> Choice:
    """The provider, model and effort of a prompt to `session`, or of a new session (None).

    A new session takes what the caller left out from `like` (the calling conversation) where
    its provider offers it, else the provider's defaults. With `cap_checked_at`, a provider over
    its monthly cap at that time refuses the choice (an agent's prompt, docs/sessions.md#send); without it,
    caps are not looked at (update_session, the owner). `picked` is a `pick_provider` already
    made by a caller that checks something of the provider before its model. A refusal leaves
    out what was not done: the dispatcher adds the action's sentence, the owner API its own.
    """
    if picked is None:
        picked = pick_provider(session, requested, relay_name=relay_name, like=like,
                               cap_checked_at=cap_checked_at)
    provider = picked.provider
    model_note = None
    if session is not None:
        model = session.model
        # After a switch the session's model must be one the new provider lists, too.
        to_check = requested.model or (session.model if picked.switched else None)
        if to_check:
            checked = check_model(to_check, provider, relay_name=relay_name)
            model, model_note = checked.model, checked.note
        elif picked.switched:
            model = provider.default_model
        effort = session.effort
    else:
        if requested.model:
            checked = check_model(
                requested.model, provider, relay_name=relay_name, others=picked.configured
            )
            model, model_note = checked.model, checked.note
        elif like is not None and like.model in provider.models:
            model = like.model
        else:
            model = provider.default_model
        effort = like.effort if like is not None and like.effort in provider.efforts else None
    if requested.effort:
        effort = check_effort(requested.effort, provider, relay_name)
    return Choice(
        provider=provider,
        model=model,
        effort=effort,
        model_note=model_note,
        billing_switch=billing.switch_note(provider) if picked.switched else None,
    )


def pick_provider(
    session: Session | None,
    requested: Requested,
    *,
    relay_name: str,
    like: Session | None = None,
    cap_checked_at: datetime | None = None,
) -> ProviderPick:
    """The provider half of `choose` (same arguments): the session's provider, or the one of
    its family that `requested.provider` moves it to (checked in full before anything is
    written); for a new session the requested one, else `like`'s, else the first configured."""
    if session is not None:
        current = providers.get(session.provider)
        if current is None:
            raise provider_unavailable(session.provider, relay_name)
        if requested.provider and requested.provider != session.provider:
            # A switch to a capped provider is always refused: the cap is part of the switch.
            now = cap_checked_at or utcnow()
            return ProviderPick(
                billing.switch_target(current, requested.provider, relay_name, now), switched=True
            )
        if cap_checked_at is not None:
            # A capped session's send queues nothing, and says so in those words (docs/sessions.md#send).
            with refusals_ending(billing.NOTHING_QUEUED):
                billing.check_not_capped(current, relay_name, cap_checked_at)
        return ProviderPick(current)
    configured = tuple(providers.configured())
    if requested.provider:
        named = requested.provider
        provider = providers.get(named)
    else:
        named = like.provider if like is not None else DEFAULT_NAMED
        preferred = providers.get(like.provider) if like is not None else None
        provider = preferred or (configured[0] if configured else None)
    if provider is None:
        raise provider_unavailable(named, relay_name)
    if cap_checked_at is not None:
        billing.check_not_capped(provider, relay_name, cap_checked_at)
    return ProviderPick(provider, configured=configured)


def check_effort(effort: str, provider: Provider, relay_name: str) -> str:
    if provider.efforts and effort not in provider.efforts:
        raise invalid(
            f"Unknown effort '{effort[:32]}' for {provider.name} on relay \"{relay_name}\". "
            f"Efforts: {', '.join(provider.efforts)}."
        )
    return effort


def provider_unavailable(name: str, relay_name: str) -> ActionError:
    configured = [p.name for p in providers.configured()]
    close = difflib.get_close_matches(name.lower(), configured, n=3, cutoff=0.6)
    return ActionError(
        "REMOTE_RELAY_PROVIDER_UNAVAILABLE",
        f'Provider "{name[:64]}" is not configured on relay "{relay_name}". '
        f"Configured: {', '.join(configured) or 'none'}.",
        providers=configured,
        **({"suggestions": close} if close else {}),
    )
