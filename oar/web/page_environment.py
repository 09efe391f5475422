"""A cli provider's environment as the provider form's text (docs/providers.md#the-agents-environment).

One variable a line, `NAME=value`. A secret's value (`oar.owner.providers.is_secret_variable`) is
never written into the page: its line holds the name alone, which the owner API reads as null,
"keep the stored value".
"""

from __future__ import annotations

from oar.core.errors import invalid
from oar.owner import providers


def lines(environment: dict[str, str]) -> str:
    """The stored environment as the form shows it."""
    shown = providers.shown_environment(environment)
    return "\n".join(name if value is None else f"{name}={value}" for name, value in shown.items())


def parsed(text: str) -> dict[str, str | None]:
    """The form's lines as the owner API takes them: a name alone is null (keep the stored value)."""
    environment: dict[str, str | None] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        name = name.strip()
        if name in environment:
            raise invalid(f"provider: environment names {name[:64]!r} twice. Nothing was changed.")
        environment[name] = value if equals else None
    return environment


def without_secret_values(text: str) -> str:
    """The form's text shown again after a refusal: typed secrets are not, as a typed API key is not."""
    return "\n".join(_without_secret_value(line) for line in text.splitlines())


def _without_secret_value(line: str) -> str:
    name, equals, value = line.partition("=")
    return name.strip() if equals and providers.is_secret_variable(name.strip(), value) else line
