"""The owner's providers: listing, reading, saving and deleting their configuration (docs/owner-api.md).

A provider's API key is write-only: the views say whether one is set, never what it is. So is
a cli provider's environment variable whose name says secret or whose value looks like a
credential: the views show its name with null (docs/providers.md#the-agents-environment).
"""

from __future__ import annotations

import re
from typing import Any

from oar import providers
from oar.background import masking
from oar.core.errors import not_found
from oar.core.models import Provider as ProviderRow
from oar.core.runtime import Runtime
from oar.providers import provider_settings

# Names of environment variables whose values are write-only: keys, tokens, passwords and the like
# (`AUTH` but not `AUTHOR`: GIT_AUTHOR_NAME is no secret).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|PRIVATE|COOKIE|SESSION|SIGNATURE", re.I)


def is_secret_variable(name: str, value: str) -> bool:
    """Whether an environment value is write-only: its name says secret, or masking finds a
    credential in it (a password in a URL, a provider key under any name)."""
    return bool(SECRET_NAME.search(name)) or masking.mask(value) != value


def shown_environment(environment: dict[str, str]) -> dict[str, str | None]:
    """A cli provider's environment as the views show it: a secret's value is null."""
    return {name: None if is_secret_variable(name, value) else value for name, value in environment.items()}


def provider_view(provider: providers.Provider) -> dict[str, Any]:
    """Never the API key: only whether one is set."""
    options = provider.options
    return {
        "name": provider.name,
        "kind": provider.kind,
        "baseUrl": options.get("base_url"),
        "models": provider.models,
        "defaultModel": provider.default_model,
        "efforts": provider.efforts,
        "workspace": provider.workspace,
        "monthlyTokenCap": options.get("monthly_token_cap"),
        "family": options.get("family"),
        "billing": options.get("billing"),
        "dottedModelIds": provider.dotted_model_ids,
        "apiKeySet": provider.has_api_key,
        "environment": shown_environment(options.get("environment") or {}),
    }


def list_providers(runtime: Runtime) -> list[dict[str, Any]]:
    """Every configured provider, in the order a new conversation picks its default."""
    return [provider_view(p) for p in providers.configured()]


def read_provider(runtime: Runtime, name: str) -> dict[str, Any]:
    provider = providers.get(name)
    if provider is None:
        raise not_found(f'No provider "{name[:64]}" is configured.')
    return provider_view(provider)


def stored_view(row: ProviderRow) -> dict[str, Any]:
    """A stored provider row as `provider_view` shows it."""
    return provider_view(providers.from_row(row))


def stored_configuration(runtime: Runtime, name: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, options) of the provider stored as `name`, for a form that edits it, or None; never its API key."""
    row = ProviderRow.get_or_none(ProviderRow.name == name)
    return None if row is None else (row.kind, dict(row.options or {}))


def save_provider(runtime: Runtime, name: str, payload: dict[str, Any]) -> tuple[ProviderRow, str | None]:
    """Create or replace a provider's configuration (the owner API's PUT); models are discovered
    when not listed. The options given replace the stored ones, except that a missing `api_key`
    and an `environment` variable given as null keep their stored values
    (docs/owner-api.md#providers). Returns the stored row and a note on the model discovery (or None)."""
    return provider_settings.save(name, payload)


# Provider options the page's form does not show (docs/decisions.md#the-owners-page).
OPTIONS_THE_FORM_DOES_NOT_SHOW = (
    "family", "billing", "workspace", "dotted_model_ids", "resume_args", "output_format", "end_of_options",
)


def save_provider_from_form(runtime: Runtime, name: str, payload: dict[str, Any]) -> tuple[ProviderRow, str | None]:
    """`save_provider` for the page's form, which edits only the options it shows: those it does
    not show keep their stored values while the kind stays the same (an owner who set `billing`
    through the API and renames a model on the page keeps it); a PUT replaces them all."""
    row = ProviderRow.get_or_none(ProviderRow.name == name)
    if row is not None and row.kind == payload.get("kind"):
        stored = row.options or {}
        payload = {**{key: stored[key] for key in OPTIONS_THE_FORM_DOES_NOT_SHOW if key in stored}, **payload}
    return save_provider(runtime, name, payload)


def delete_provider(runtime: Runtime, name: str) -> None:
    if not provider_settings.delete(name):
        raise not_found(f'No provider "{name[:64]}" is configured. Nothing was changed.')
