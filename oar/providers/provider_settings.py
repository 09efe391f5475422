"""Provider configuration from the owner (docs/owner-api.md#providers): checking it, discovering models, saving it.

`api_key` is write-only: it is stored, never returned, logged or quoted in an error. A PUT
without `api_key` keeps the stored key, since no client can send back what it never sees.
A cli provider's `environment` holds the variables its agent gets (docs/providers.md#the-agents-environment);
the views hide the values that look like secrets, so a variable given as null keeps its stored value.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

from oar.core.db import write_transaction
from oar.core.errors import invalid
from oar.core.fields import Param, check_fields
from oar.core.models import Provider as ProviderRow
from oar.providers import PROVIDER_KINDS, note_reachable
from oar.providers.cli import TMPDIR_VARIABLES
from oar.providers.discovery import DISCOVERABLE_KINDS, discover_models

NOTHING = "Nothing was changed."


class HiddenText(str):
    """A key on its way into the database: the same text, but its repr hides it, so the SQL
    log (peewee logs every query's parameters at DEBUG) never shows it."""

    def __repr__(self) -> str:
        return "'[key hidden]'"

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Every kind docs/owner-api.md#providers names; those not in PROVIDER_KINDS are refused as not available yet.
SPEC_KINDS = ("echo", "chat", "responses", "anthropic", "runs", "cli", "external")
NEEDS_BASE_URL = ("chat", "responses", "anthropic", "runs")
MAX_MODELS = 500
# A cli provider's environment: how many variables, a name's shape, a value's length.
MAX_ENVIRONMENT = 50
ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_ENVIRONMENT_VALUE = 10_000

FIELDS = {
    "kind": Param("str", required=True, choices=SPEC_KINDS),
    "base_url": Param("str", max_length=2000, description="the API's URL including its version path, e.g. http://127.0.0.1:11434/v1"),
    "api_key": Param("str", max_length=4000),
    "models": Param("list"),
    "default_model": Param("str", max_length=200),
    "efforts": Param("list"),
    "monthly_token_cap": Param("int", minimum=1, maximum=10**13),
    "family": Param("str", max_length=64),
    "billing": Param("str", choices=("subscription", "api_key")),
    "workspace": Param("str", choices=("folder", "repo")),
    "dotted_model_ids": Param("bool"),
    "position": Param("int", minimum=0, maximum=1_000_000),
    "command": Param("list", description='cli: the argument list, e.g. ["agent", "-p", "{prompt}"]'),
    "resume_args": Param("list", description='cli: arguments added when resuming, e.g. ["--resume", "{agent_session}"]'),
    "output_format": Param(
        "str", choices=("stream-json", "text"),
        description="cli: how its output is read (default stream-json when the command names it, else text)",
    ),
    "end_of_options": Param(
        "bool", description="cli: put the prompt last, after --, so it never reads as an option (default true)",
    ),
    "environment": Param(
        "object", description="cli: variables the agent's process gets, {NAME: value}; null keeps a stored value "
        "the views hide (the agent gets nothing else of the relay's environment but PATH, HOME, the locale and a few more)",
    ),
}
# Fields only a cli provider takes (docs/providers.md#cli).
CLI_FIELDS = ("command", "resume_args", "output_format", "end_of_options", "environment")


def check(name: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """(kind, options, api_key or None) of a PUT body; raises INVALID_INPUT naming the problem."""
    if not NAME.match(name):
        raise invalid(
            f'Provider name "{name[:64]}" must be 1–64 letters, digits, ".", "_" or "-", starting with a letter or digit. {NOTHING}'
        )
    args, _ = check_fields("provider", FIELDS, payload, strict=True, nothing=NOTHING)
    kind = args["kind"]
    if kind not in PROVIDER_KINDS:
        raise invalid(
            f'Provider kind "{kind}" is not available on this relay yet. Available: {", ".join(PROVIDER_KINDS)}. {NOTHING}'
        )
    options: dict[str, Any] = {key: value for key, value in args.items() if key not in ("kind", "api_key", "position")}
    if "base_url" in options:
        options["base_url"] = _checked_url(options["base_url"].strip())
    elif kind in NEEDS_BASE_URL:
        raise invalid(f"A {kind} provider needs base_url (the API's URL including its version path, e.g. https://api.example.com/v1). {NOTHING}")
    for key in CLI_FIELDS:
        if key in options and kind != "cli":
            raise invalid(f"provider: {key} is for cli providers only. {NOTHING}")
    for key in ("command", "resume_args"):
        if key in options:
            options[key] = _checked_arguments(key, options[key])
    if "environment" in options:
        options["environment"] = _checked_environment(options["environment"])
    if kind == "cli" and "command" not in options:
        raise invalid(f'A cli provider needs command, an argument list such as ["agent", "-p", "{{prompt}}"]. {NOTHING}')
    for key in ("models", "efforts"):
        if key in options:
            options[key] = _checked_ids(key, options[key])
    if "default_model" in options and options.get("models") and options["default_model"] not in options["models"]:
        raise invalid(
            f"provider: default_model '{options['default_model'][:100]}' is not in models ({', '.join(options['models'][:20])}). {NOTHING}"
        )
    api_key = args.get("api_key")
    if api_key is not None and not _HEADER_SAFE.fullmatch(api_key):
        # It goes into an HTTP header, which carries only visible ASCII here.
        raise invalid(f"provider: api_key must be visible ASCII characters (no spaces or other letters). {NOTHING}")
    return kind, options, api_key


_HEADER_SAFE = re.compile(r"[!-~]{0,4000}")


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a checked base_url: where a stored key would be sent."""
    parsed = urlparse(url)
    return parsed.scheme, (parsed.hostname or "").lower(), parsed.port or (443 if parsed.scheme == "https" else 80)


def _checked_url(url: str) -> str:
    refused = invalid(f'provider: base_url must be an http:// or https:// URL; got "{url[:200]}". {NOTHING}')
    try:
        # urlparse raises on a broken IPv6 host (`http://[::1`), `.port` on a port that is no number.
        parsed = urlparse(url)
        parsed.port  # noqa: B018
    except ValueError:
        raise refused from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname or any(c.isspace() for c in url):
        raise refused
    if parsed.username or parsed.password or parsed.query or parsed.fragment:
        raise invalid(f"provider: base_url must not hold credentials, a query or a fragment (the API key goes in api_key). {NOTHING}")
    return url.rstrip("/")


def _checked_arguments(key: str, values: list[Any]) -> list[str]:
    if len(values) > 100 or not all(isinstance(value, str) and len(value) <= 10_000 for value in values):
        raise invalid(f"provider: {key} must be a list of at most 100 arguments (text). {NOTHING}")
    if key == "command" and not values[0].strip():
        raise invalid(f"provider: command must start with the program to run. {NOTHING}")
    return list(values)


def _checked_environment(values: dict[str, Any]) -> dict[str, str | None]:
    """{NAME: value}: names as a shell writes them, values text without NUL (an environment
    cannot hold one); None for a stored value to keep (resolved by `save`)."""
    if len(values) > MAX_ENVIRONMENT:
        raise invalid(f"provider: environment holds {len(values)} variables; the limit is {MAX_ENVIRONMENT}. {NOTHING}")
    for name, value in values.items():
        if not ENVIRONMENT_NAME.fullmatch(name):
            raise invalid(
                f"provider: environment variable names are 1–128 letters, digits or _, not starting with a digit; "
                f"got {name[:64]!r}. {NOTHING}"
            )
        if name in TMPDIR_VARIABLES:
            raise invalid(
                f"provider: environment cannot set {name}: the relay sets it to the session's own temporary folder "
                f"(docs/tasks.md#agent-output-files). {NOTHING}"
            )
        if value is not None and (not isinstance(value, str) or len(value) > MAX_ENVIRONMENT_VALUE or "\0" in value):
            raise invalid(
                f"provider: environment {name} must be text of at most {MAX_ENVIRONMENT_VALUE:,} characters without NUL, "
                f"or null to keep its stored value. {NOTHING}"
            )
    return dict(values)


def _kept_environment(name: str, given: dict[str, str | None], existing: ProviderRow | None) -> dict[str, str]:
    """The environment to store: a variable given as null keeps the value stored under its name."""
    stored: dict[str, str] = {}
    if existing is not None and existing.kind == "cli":
        stored = (existing.options or {}).get("environment") or {}
    environment: dict[str, str] = {}
    for variable, value in given.items():
        if value is None:
            if variable not in stored:
                raise invalid(
                    f'provider: environment {variable} is null, but "{name}" has no stored value for it to keep; '
                    f"give its value. {NOTHING}"
                )
            value = stored[variable]
        environment[variable] = value
    return environment


def _checked_ids(key: str, values: list[Any]) -> list[str]:
    if len(values) > MAX_MODELS:
        raise invalid(f"provider: {key} lists {len(values)} entries; the limit is {MAX_MODELS}. {NOTHING}")
    ids: list[str] = []
    for value in values:
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            raise invalid(f"provider: {key} must be a list of ids (text of 1–200 characters); got {repr(value)[:80]}. {NOTHING}")
        if value.strip() not in ids:
            ids.append(value.strip())
    return ids


def save(name: str, payload: dict[str, Any]) -> tuple[ProviderRow, str | None]:
    """Create or replace a provider; returns the row and a note when models were not discovered."""
    kind, options, api_key = check(name, payload)
    existing = ProviderRow.get_or_none(ProviderRow.name == name)
    if "environment" in options:
        options["environment"] = _kept_environment(name, options["environment"], existing)
    if api_key is None and existing is not None and existing.api_key:
        # The key is write-only; sending it to a new host would let whoever may change the URL
        # read it there (docs/providers.md#api-keys).
        old_url = (existing.options or {}).get("base_url")
        new_url = options.get("base_url")
        if old_url and new_url and origin(old_url) != origin(new_url):
            raise invalid(
                f'provider: base_url moves "{name}" to another host ({urlparse(new_url).netloc[:200]}); give api_key '
                f"again, the stored key is not sent to a new host. {NOTHING}"
            )
    key = api_key if api_key is not None else (existing.api_key if existing else None)
    key = HiddenText(key) if key else None
    note = None
    reachable: bool | None = None  # a new configuration: not known until it is called
    if kind in DISCOVERABLE_KINDS and not options.get("models"):
        # Outside any transaction: an HTTP call never holds the database.
        found = discover_models(kind, options["base_url"], key)
        options["models"], note, reachable = found.models, found.note, found.reachable
        if options.get("default_model") and found.models and options["default_model"] not in found.models:
            raise invalid(
                f"provider: default_model '{options['default_model'][:100]}' is not among the models the server lists "
                f"({', '.join(found.models[:20])}). {NOTHING}"
            )
    position = payload.get("position")
    with write_transaction():
        if existing is None:
            if not isinstance(position, int):
                position = (ProviderRow.select().count() or 0)
            ProviderRow.create(name=name, kind=kind, options=options, api_key=key, position=position)
        else:
            values: dict[str, Any] = {"kind": kind, "options": options, "api_key": key}
            if isinstance(position, int):
                values["position"] = position
            ProviderRow.update(**values).where(ProviderRow.name == name).execute()
    note_reachable(name, reachable)
    return ProviderRow.get_by_id(name), note


def delete(name: str) -> bool:
    with write_transaction():
        deleted = bool(ProviderRow.delete().where(ProviderRow.name == name).execute())
    note_reachable(name, None)
    return deleted
