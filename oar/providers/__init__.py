"""Provider kinds, looked up by name and imported only when used."""

from __future__ import annotations

import importlib

from oar.core import settings
from oar.core.models import Provider as ProviderRow
from oar.core.timeutil import iso, utcnow
from oar.providers.base import Provider

# Internal values kept in the settings table (not owner settings: never listed or patched).
REACHABILITY_KEY = "provider_reachability"
DEFAULT_PROVIDER_KEY = "default_provider"

# kind → dotted path of its class.
PROVIDER_KINDS: dict[str, str] = {
    "echo": "oar.providers.echo.EchoProvider",
    "chat": "oar.providers.chat.ChatProvider",
    "responses": "oar.providers.responses.ResponsesProvider",
    "anthropic": "oar.providers.anthropic.AnthropicProvider",
    "runs": "oar.providers.runs.RunsProvider",
    "cli": "oar.providers.cli.CliProvider",
    "external": "oar.providers.external.ExternalProvider",
}


def provider_class(kind: str) -> type[Provider]:
    module_name, _, class_name = PROVIDER_KINDS[kind].rpartition(".")
    return getattr(importlib.import_module(module_name), class_name)


def from_row(row: ProviderRow) -> Provider:
    return provider_class(row.kind)(row.name, row.options or {}, row.api_key)


def configured() -> list[Provider]:
    """Configured providers as pickers list them (docs/providers.md#configuring-providers): the owner's order, except that
    providers whose last contact failed at the transport level come last (a stable sort)."""
    rows = ProviderRow.select().order_by(ProviderRow.position, ProviderRow.name)
    listed = [from_row(row) for row in rows if row.kind in PROVIDER_KINDS]
    down = unreachable()
    return sorted(listed, key=lambda provider: provider.name in down)


def unreachable() -> set[str]:
    """Providers whose server did not answer the last time the relay called it (a cached
    probe: the last turn's request or the model discovery; no call is made here)."""
    noted = settings.get_value(REACHABILITY_KEY)
    if not isinstance(noted, dict):
        return set()
    return {name for name, entry in noted.items() if isinstance(entry, dict) and entry.get("reachable") is False}


def note_reachable(name: str, reachable: bool | None) -> None:
    """Remember whether the provider's server answered (None: forget, e.g. it was reconfigured);
    written only when that changes."""
    noted = settings.get_value(REACHABILITY_KEY)
    noted = dict(noted) if isinstance(noted, dict) else {}
    if (noted.get(name) or {}).get("reachable") is reachable:
        return
    if reachable is None:
        noted.pop(name, None)
    else:
        noted[name] = {"reachable": reachable, "at": iso(utcnow())}
    settings.set_value(REACHABILITY_KEY, noted)


def default_provider() -> Provider | None:
    """The saved default provider; one that is no longer configured is repaired to the first
    configured one, and the repair is saved (a state repair, not a settings change)."""
    listed = configured()
    saved = settings.get_value(DEFAULT_PROVIDER_KEY)
    chosen = next((provider for provider in listed if provider.name == saved), None)
    if chosen is None and listed:
        chosen = listed[0]
        settings.set_value(DEFAULT_PROVIDER_KEY, chosen.name)
    return chosen


def get(name: str) -> Provider | None:
    row = ProviderRow.get_or_none(ProviderRow.name == name)
    if row is None or row.kind not in PROVIDER_KINDS:
        return None
    return from_row(row)


def ensure_builtin() -> None:
    """The embedded relay always has the offline `echo` provider (docs/providers.md#echo)."""
    ProviderRow.insert(name="echo", kind="echo", options={}, position=0).on_conflict_ignore().execute()
