"""The billing switch (docs/sessions.md#send): moving a session between two providers of one family,
e.g. a subscription-backed one and an API-key one, and refusing sends to a capped provider.
"""

from __future__ import annotations

from datetime import datetime

from oar import providers
from oar.core.errors import ActionError, invalid
from oar.providers import usage
from oar.providers.base import Provider
from oar.providers.modelcheck import remote_code

NOTHING_QUEUED = "Nothing was queued."


def family_of(provider: Provider) -> str:
    return str(provider.options.get("family") or provider.name)


def billing_of(provider: Provider) -> str | None:
    return provider.options.get("billing")


def is_capped(provider: Provider, now: datetime) -> bool:
    return usage.token_cap(provider) is not None and usage.meter(provider, now).capped


def switch_target(current: Provider, name: str, relay_name: str, now: datetime) -> Provider:
    """The provider a `send` with `provider` moves the session to; raises when it may not (without
    saying what was not done: the dispatcher adds the action's sentence)."""
    target = providers.get(name)
    if target is None:
        configured = [p.name for p in providers.configured()]
        raise ActionError(
            "REMOTE_RELAY_PROVIDER_UNAVAILABLE",
            f'Provider "{name[:64]}" is not configured on relay "{relay_name}". Configured: {", ".join(configured)}.',
            providers=configured,
        )
    if family_of(target) != family_of(current):
        raise invalid(
            f'Provider "{target.name}" is not of the family of "{current.name}" ({family_of(current)}); '
            f"send can only move a session between providers of one family."
        )
    if is_capped(target, now):
        raise ActionError(
            "REMOTE_RELAY_PROVIDER_UNAVAILABLE",
            f"{target.name} is over its monthly cap; the session stays on {current.name}.",
            providers=[p.name for p in providers.configured()],
            remoteCode=remote_code(target, "API_CAP_REACHED"),
        )
    return target


def check_not_capped(provider: Provider, relay_name: str, now: datetime) -> None:
    """A send without `provider` to a session on a capped provider queues nothing (docs/sessions.md#send);
    create_session on one creates nothing. The caller says which (`NOTHING_QUEUED`, or its action's sentence)."""
    if not is_capped(provider, now):
        return
    subscription = next(
        (
            other
            for other in providers.configured()
            if other.name != provider.name and family_of(other) == family_of(provider)
            and billing_of(other) == "subscription" and not is_capped(other, now)
        ),
        None,
    )
    if subscription is not None:
        advice = (
            f'Send with provider "{subscription.name}" to move the session to the subscription, '
            "or ask the user to raise the cap."
        )
    else:
        advice = "Ask the user to raise the cap."
    raise ActionError(
        "REMOTE_RELAY_PROVIDER_UNAVAILABLE",
        f"{provider.name} is over its monthly cap. {advice}",
        providers=[p.name for p in providers.configured()],
        remoteCode=remote_code(provider, "API_CAP_REACHED"),
    )


def switch_note(target: Provider) -> str:
    """The sentence an approval card for the switch shows (docs/sessions.md#send)."""
    return "Switches billing to subscription" if billing_of(target) == "subscription" else "Switches billing to API key"
