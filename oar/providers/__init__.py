"""Provider kinds, looked up by name and imported only when used."""

from __future__ import annotations

import importlib

from oar.models import Provider as ProviderRow
from oar.providers.base import Provider

# kind → dotted path of its class.
PROVIDER_KINDS: dict[str, str] = {
    "echo": "oar.providers.echo.EchoProvider",
    "chat": "oar.providers.chat.ChatProvider",
    "responses": "oar.providers.responses.ResponsesProvider",
    "anthropic": "oar.providers.anthropic.AnthropicProvider",
    "cli": "oar.providers.cli.CliProvider",
    "external": "oar.providers.external.ExternalProvider",
}


def provider_class(kind: str) -> type[Provider]:
    module_name, _, class_name = PROVIDER_KINDS[kind].rpartition(".")
    return getattr(importlib.import_module(module_name), class_name)


def from_row(row: ProviderRow) -> Provider:
    return provider_class(row.kind)(row.name, row.options or {}, row.api_key)


def configured() -> list[Provider]:
    """Configured providers in the owner's order."""
    rows = ProviderRow.select().order_by(ProviderRow.position, ProviderRow.name)
    return [from_row(row) for row in rows if row.kind in PROVIDER_KINDS]


def get(name: str) -> Provider | None:
    row = ProviderRow.get_or_none(ProviderRow.name == name)
    if row is None or row.kind not in PROVIDER_KINDS:
        return None
    return from_row(row)


def ensure_builtin() -> None:
    """The embedded relay always has the offline `echo` provider (SPEC §11)."""
    ProviderRow.insert(name="echo", kind="echo", options={}, position=0).on_conflict_ignore().execute()
