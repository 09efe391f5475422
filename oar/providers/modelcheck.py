"""Checking a requested model against its provider's list (docs/sessions.md#model-checks). Pure functions."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from oar.core.errors import ActionError
from oar.providers.base import Provider

VERSION_DASH = re.compile(r"(?<=\d)-(?=\d)")


@dataclass(frozen=True)
class ModelChoice:
    model: str
    note: str | None = None


def suggestions_for(requested: str, models: Sequence[str], limit: int = 3) -> list[str]:
    """Close ids, trying the dotted spelling of version numbers first (`gpt-5-4` → `gpt-5.4`)."""
    dotted = VERSION_DASH.sub(".", requested)
    found = [dotted] if dotted != requested and dotted in models else []
    lowered = {model.lower(): model for model in models}
    for match in difflib.get_close_matches(requested.lower(), list(lowered), n=limit, cutoff=0.5):
        if lowered[match] not in found:
            found.append(lowered[match])
    return found[:limit]


def remote_code(provider: Provider, suffix: str) -> str:
    family = provider.options.get("family") or provider.name
    return re.sub(r"[^A-Za-z0-9]+", "_", family).upper() + "_" + suffix


def check_model(
    requested: str,
    provider: Provider,
    *,
    relay_name: str,
    others: Sequence[Provider] = (),
) -> ModelChoice:
    """The model to use, or REMOTE_RELAY_UNKNOWN_MODEL with suggestions (without what was not
    done: the dispatcher adds the action's sentence, the owner API its own).

    `others` (other configured providers) lets create_session name the one provider that
    does list the id (`<OTHER>_PROVIDER_REQUIRED`).
    """
    models = provider.models
    if requested in models:
        return ModelChoice(requested)
    extra: dict[str, object] = {}
    if provider.dotted_model_ids:
        listing_it = [other for other in others if other.name != provider.name and requested in other.models]
        suffix = "PROVIDER_REQUIRED" if len(listing_it) == 1 else "MODEL_UNAVAILABLE"
        extra["remoteCode"] = remote_code(listing_it[0] if len(listing_it) == 1 else provider, suffix)
    if not models:
        dotted = VERSION_DASH.sub(".", requested)
        if provider.dotted_model_ids and dotted != requested:
            raise _unknown(requested, provider, relay_name, [dotted], models, extra)
        return ModelChoice(requested, f"{provider.name} has no model list yet; '{requested}' was passed unchecked.")
    raise _unknown(requested, provider, relay_name, suggestions_for(requested, models), models, extra)


def _unknown(
    requested: str,
    provider: Provider,
    relay_name: str,
    suggestions: list[str],
    models: Sequence[str],
    extra: dict[str, object],
) -> ActionError:
    guess = f"; did you mean '{suggestions[0]}'?" if suggestions else "."
    valid = f" Valid ids: {', '.join(models)}." if models else ""
    return ActionError(
        "REMOTE_RELAY_UNKNOWN_MODEL",
        f"Unknown model '{requested[:100]}' for {provider.name} on relay \"{relay_name}\"{guess}{valid}",
        suggestions=suggestions,
        models=list(models),
        **extra,
    )
