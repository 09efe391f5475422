"""Owner settings: defaults, validation, and storage in the `setting` table (docs/owner-api.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from peewee import EXCLUDED

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import write_transaction
from oar.core.errors import invalid
from oar.core.models import Setting

OWNER_TOKEN_HASH_KEY = "owner_token_hash"


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false. Nothing was changed.")
    return value


def _int_in(low: int, high: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise invalid(f"{name} must be a whole number from {low} to {high}. Nothing was changed.")
        return value

    return check


def _name(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 100:
        raise invalid(f"{name} must be a name of 1 to 100 characters. Nothing was changed.")
    return value.strip()


def _roots(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise invalid(f"{name} must be a list of absolute folder paths. Nothing was changed.")
    roots = []
    for entry in value:
        path = Path(entry).expanduser()
        if not path.is_absolute():
            raise invalid(f'{name}: "{entry}" is not an absolute path. Nothing was changed.')
        roots.append(str(path))
    return roots


VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "agent_sessions_enabled": _bool,
    "max_wait_seconds": _int_in(*defaults.MAX_WAIT_SECONDS_RANGE),
    "max_turn_seconds": _int_in(60, 86_400),
    "quiet_after_minutes": _int_in(1, 1440),
    "accept_agent_prompts": _bool,
    "allow_shell_tasks": _bool,
    "shell_tasks_via_shell": _bool,
    "allowed_roots": _roots,
    "relay_name": _name,
    "rate_calls_per_minute": _int_in(0, 100_000),
    "rate_writes_per_minute": _int_in(0, 100_000),
}


def default_settings(config: Config) -> dict[str, Any]:
    return {
        "agent_sessions_enabled": False,
        "max_wait_seconds": defaults.MAX_WAIT_SECONDS,
        "max_turn_seconds": defaults.MAX_TURN_SECONDS,
        "quiet_after_minutes": defaults.QUIET_AFTER_MINUTES,
        "accept_agent_prompts": False,
        "allow_shell_tasks": False,
        # Tasks run as argument lists (shlex.split); True runs `/bin/sh -c <command>`.
        "shell_tasks_via_shell": False,
        "allowed_roots": [str(default_cwd(config).resolve()), str(Path.home())],
        "relay_name": config.relay_name,
        "rate_calls_per_minute": defaults.RATE_CALLS_PER_MINUTE,
        "rate_writes_per_minute": defaults.RATE_WRITES_PER_MINUTE,
    }


def default_cwd(config: Config) -> Path:
    """The folder sessions start in when nobody names one: `<data dir>/work`."""
    return config.data_dir / "work"


def load(config: Config) -> dict[str, Any]:
    values = default_settings(config)
    for row in Setting.select().where(Setting.key.in_(list(VALIDATORS))):
        values[row.key] = row.value
    return values


def update(config: Config, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validate every change first, then write them all in one transaction."""
    if not isinstance(changes, Mapping) or not changes:
        raise invalid(f"Give one or more settings: {', '.join(VALIDATORS)}. Nothing was changed.")
    unknown = [key for key in changes if key not in VALIDATORS]
    if unknown:
        raise invalid(
            f"Unknown settings: {', '.join(unknown)}. Settings: {', '.join(VALIDATORS)}. "
            "Nothing was changed."
        )
    checked = {key: VALIDATORS[key](key, value) for key, value in changes.items()}
    with write_transaction():
        for key, value in checked.items():
            _upsert(key, value)
    return load(config)


def get_value(key: str) -> Any:
    row = Setting.get_or_none(Setting.key == key)
    return None if row is None else row.value


def set_value(key: str, value: Any) -> None:
    with write_transaction():
        _upsert(key, value)


def _upsert(key: str, value: Any) -> None:
    """Insert or update one setting (works on SQLite and PostgreSQL alike)."""
    Setting.insert(key=key, value=value).on_conflict(
        conflict_target=[Setting.key], update={Setting.value: EXCLUDED.value}
    ).execute()
