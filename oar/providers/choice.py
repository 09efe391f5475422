"""Choosing what a prompt runs on: the checks of a provider and an effort named by a caller."""

from __future__ import annotations

import difflib

from oar import providers
from oar.core.errors import ActionError, invalid
from oar.providers.base import Provider


def check_effort(effort: str, provider: Provider, relay_name: str, nothing: str) -> str:
    if provider.efforts and effort not in provider.efforts:
        raise invalid(
            f"Unknown effort '{effort[:32]}' for {provider.name} on relay \"{relay_name}\". "
            f"Efforts: {', '.join(provider.efforts)}. {nothing}"
        )
    return effort


def provider_unavailable(name: str, relay_name: str, nothing: str) -> ActionError:
    configured = [p.name for p in providers.configured()]
    close = difflib.get_close_matches(name.lower(), configured, n=3, cutoff=0.6)
    return ActionError(
        "REMOTE_RELAY_PROVIDER_UNAVAILABLE",
        f'Provider "{name[:64]}" is not configured on relay "{relay_name}". '
        f"Configured: {', '.join(configured) or 'none'}. {nothing}",
        providers=configured,
        **({"suggestions": close} if close else {}),
    )
