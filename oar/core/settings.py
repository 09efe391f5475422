"""Owner settings: defaults, validation, and storage in the `setting` table (docs/owner-api.md)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import peewee as pw
from peewee import EXCLUDED

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, write_transaction
from oar.core.errors import invalid
from oar.core.fields import Mismatch, Param, check_value
from oar.core.models import Setting
from oar.core.prepared import Prepared

OWNER_TOKEN_HASH_KEY = "owner_token_hash"


def _plain(param: Param) -> Callable[[str, Any], Any]:
    """A setting of a plain kind (true or false, a whole number in range, a choice, a name):
    checked as every declared field is (`check_value`), refused in the settings' own words. Text
    is kept stripped, and blank text is refused: a setting is never unset by a PATCH."""

    def check(name: str, value: Any) -> Any:
        try:
            if param.kind == "int" and isinstance(value, float):
                # Unlike an action's argument, a setting is never given as 2.0: kept as the owner wrote it.
                raise Mismatch("a whole number")
            if isinstance(value, str) and not value.strip():
                raise Mismatch("text")
            checked = check_value(param, value)
        except Mismatch:
            raise invalid(f"{name} must be {_expected(param)}. Nothing was changed.") from None
        return checked.strip() if isinstance(checked, str) else checked

    return check


def _expected(param: Param) -> str:
    if param.kind == "bool":
        return "true or false"
    if param.choices:
        return f"one of {', '.join(param.choices)}"
    if param.kind == "str":
        return f"a name of 1 to {param.max_length} characters on one line"
    return f"a whole number from {param.minimum} to {param.maximum}"


def _roots(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise invalid(f"{name} must be a list of absolute folder paths. Nothing was changed.")
    roots = []
    for entry in value:
        try:
            path = Path(entry).expanduser()
        except RuntimeError:  # `~name` of a user this machine does not know
            raise invalid(f'{name}: "{entry}" names no home folder on this machine. Nothing was changed.') from None
        if not path.is_absolute():
            raise invalid(f'{name}: "{entry}" is not an absolute path. Nothing was changed.')
        roots.append(str(path))
    return roots


# The settings as declared fields: the owner API's PATCH body in the OpenAPI document, and the
# ranges the checks below enforce (docs/owner-api.md#settings).
FIELDS: dict[str, Param] = {
    "agent_sessions_enabled": Param("bool", description="agents may start and use sessions on this relay"),
    "max_wait_seconds": Param(
        "int", minimum=defaults.MAX_WAIT_SECONDS_RANGE[0], maximum=defaults.MAX_WAIT_SECONDS_RANGE[1],
        description="the longest wait per tool call",
    ),
    "max_turn_seconds": Param("int", minimum=60, maximum=86_400, description="a turn's own time limit"),
    "quiet_after_minutes": Param("int", minimum=1, maximum=1440, description="task health's quiet threshold"),
    "max_running_tasks_per_session": Param(
        "int", minimum=defaults.MAX_RUNNING_TASKS_PER_SESSION_RANGE[0], maximum=defaults.MAX_RUNNING_TASKS_PER_SESSION_RANGE[1],
        description="background tasks one session runs at once (docs/tasks.md#how-many-and-how-long)",
    ),
    "max_running_tasks": Param(
        "int", minimum=defaults.MAX_RUNNING_TASKS_RANGE[0], maximum=defaults.MAX_RUNNING_TASKS_RANGE[1],
        description="background tasks the relay runs at once",
    ),
    "max_task_minutes": Param(
        "int", minimum=defaults.MAX_TASK_MINUTES_RANGE[0], maximum=defaults.MAX_TASK_MINUTES_RANGE[1],
        description="a background task running longer is ended and failed",
    ),
    "accept_agent_prompts": Param("bool", description="accept prompts from other relays' agents"),
    "allow_shell_tasks": Param("bool", description="sessions may run background commands"),
    "shell_tasks_via_shell": Param("bool", description="run task commands with /bin/sh -c"),
    "tasks_without_sandbox": Param(
        "bool", description="run tasks outside the sandbox: gives agents the owner's power (docs/tasks.md#the-sandbox)",
    ),
    "tasks_use_network": Param(
        "bool", description="tasks share the relay's network, loopback services included (docs/tasks.md#the-sandbox)",
    ),
    "allowed_roots": Param("list", items=Param("str"), description="absolute folder paths sessions may work in"),
    # One line: the relay's name goes into other relays' prompt headers (docs/relays.md#provenance).
    "relay_name": Param("str", max_length=100, one_line=True, description="the relay's name, 1 to 100 characters"),
    "rate_calls_per_minute": Param("int", minimum=0, maximum=100_000, description="0: no limit"),
    "rate_writes_per_minute": Param("int", minimum=0, maximum=100_000, description="0: no limit"),
    # Every agent surface (docs/rules.md#visibility).
    "sessions_visibility": Param(
        "str", choices=defaults.SESSIONS_VISIBILITIES,
        description="which sessions agents see and reach, through relay_tool and OpenClaw's session tools alike",
    ),
    # OpenClaw's session tools (docs/openclaw.md#settings).
    "max_ping_pong_turns": Param(
        "int", minimum=defaults.OPENCLAW_MAX_PING_PONG_RANGE[0], maximum=defaults.OPENCLAW_MAX_PING_PONG_RANGE[1],
        description="sessions_send's reply ping-pong turns",
    ),
    "send_policy": Param(
        "object", description="sessions_send's policy: {rules: [{match: {channel, chatType, keyPrefix}, action}], default}",
    ),
    "spawn_allow_agents": Param(
        "list", items=Param("str"), description='agentIds sessions_spawn may name besides the caller\'s own ("*": any)',
    ),
    "spawn_archive_after_minutes": Param(
        "int", minimum=1, maximum=43_200, description="a kept sessions_spawn child is archived this long after its run",
    ),
    "notify_quiet_hours": Param(
        "object", description='the owner\'s quiet hours for notifications, {"from": "HH:MM", "to": "HH:MM", "tz": '
        '"Area/City"}, or null (docs/notifications.md#quiet-hours)',
    ),
    "notify_quiet_hours_hold_all": Param(
        "bool", description="quiet hours hold cards and questions too (by default they go out at once)",
    ),
    "notify_decide_kinds": Param(
        "list", items=Param("str", choices=defaults.NOTIFY_DECIDE_KINDS),
        description="what may be decided from a notification's link or buttons: questions, and approval cards by "
        "their reasons (docs/notifications.md#deciding-from-a-notification)",
    ),
    # The team tools (docs/team-runs.md#runs-and-teams, docs/team-runs.md#limits).
    "team_runs_shared": Param(
        "bool", description="every conversation may see and join every team run and memory file, not only its team's",
    ),
    "team_calls_per_minute": Param("int", minimum=0, maximum=100_000, description="team tool calls; 0: no limit"),
    "team_writes_per_minute": Param("int", minimum=0, maximum=100_000, description="team tool writes; 0: no limit"),
}


def _names(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and len(v) <= 64 for v in value):
        raise invalid(f"{name} must be a list of names (1 to 64 characters each). Nothing was changed.")
    return [v.strip() for v in value]


SEND_POLICY_ACTIONS = ("allow", "deny")
SEND_POLICY_MATCH = ("channel", "chatType", "keyPrefix")


def _send_policy(name: str, value: Any) -> dict[str, Any]:
    """OpenClaw's send policy (docs/openclaw.md#send-policy): `{rules: [{match: {channel?, chatType?,
    keyPrefix?}, action: allow|deny}], default: allow|deny}`."""
    shape = (
        f"{name} must be {{rules: [{{match: {{channel?, chatType?, keyPrefix?}}, action: allow|deny}}], "
        "default: allow|deny}. Nothing was changed."
    )
    if not isinstance(value, dict) or set(value) - {"rules", "default"}:
        raise invalid(shape)
    default = value.get("default", "allow")
    rules = value.get("rules", [])
    if default not in SEND_POLICY_ACTIONS or not isinstance(rules, list) or len(rules) > 100:
        raise invalid(shape)
    checked = []
    for rule in rules:
        if not isinstance(rule, dict) or set(rule) - {"match", "action"} or rule.get("action") not in SEND_POLICY_ACTIONS:
            raise invalid(shape)
        match = rule.get("match", {})
        if not isinstance(match, dict) or set(match) - set(SEND_POLICY_MATCH) or not all(
            isinstance(v, str) and 0 < len(v) <= 300 for v in match.values()
        ):
            raise invalid(shape)
        checked.append({"match": dict(match), "action": rule["action"]})
    return {"rules": checked, "default": default}


def _kinds_among(choices: tuple[str, ...]) -> Callable[[str, Any], list[str]]:
    def check(name: str, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid(f"{name} must be a list among {', '.join(choices)}. Nothing was changed.")
        unknown = [v[:40] for v in value if v not in choices]
        if unknown:
            raise invalid(f"{name}: unknown {', '.join(unknown[:5])}; choose among {', '.join(choices)}. Nothing was changed.")
        return [choice for choice in choices if choice in value]  # in the documented order, once each

    return check


def _quiet_hours_shape(name: str, value: Any) -> dict[str, str]:
    """The shape only: the owner service (oar.owner.settings) checks the times and the zone with
    the quiet-hours rules, which live above this layer."""
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - {"from", "to", "tz"} or not all(isinstance(v, str) for v in value.values()):
        raise invalid(f'{name} must be {{"from": "HH:MM", "to": "HH:MM", "tz": "Area/City"}} or null. Nothing was changed.')
    # Stored as {} when there are none (a setting's value is never null); read back as None.
    return {key: value[key] for key in ("from", "to", "tz") if key in value}


def _validator(name: str, param: Param) -> Callable[[str, Any], Any]:
    if name == "notify_quiet_hours":
        return _quiet_hours_shape
    if name == "allowed_roots":
        return _roots
    if name == "send_policy":
        return _send_policy
    if name == "spawn_allow_agents":
        return _names
    if name == "notify_decide_kinds":
        return _kinds_among(defaults.NOTIFY_DECIDE_KINDS)
    if (param.kind == "str" and (param.choices or param.max_length is not None)) or param.kind == "bool" or (
        param.kind == "int" and param.minimum is not None and param.maximum is not None
    ):
        return _plain(param)
    raise ValueError(f"setting {name} has no check")


VALIDATORS: dict[str, Callable[[str, Any], Any]] = {name: _validator(name, param) for name, param in FIELDS.items()}


def default_settings(config: Config) -> dict[str, Any]:
    return {
        "agent_sessions_enabled": False,
        "max_wait_seconds": defaults.MAX_WAIT_SECONDS,
        "max_turn_seconds": defaults.MAX_TURN_SECONDS,
        "quiet_after_minutes": defaults.QUIET_AFTER_MINUTES,
        "max_running_tasks_per_session": defaults.MAX_RUNNING_TASKS_PER_SESSION,
        "max_running_tasks": defaults.MAX_RUNNING_TASKS,
        "max_task_minutes": defaults.MAX_TASK_MINUTES,
        "accept_agent_prompts": False,
        "allow_shell_tasks": False,
        # Tasks run as argument lists (shlex.split); True runs `/bin/sh -c <command>`.
        "shell_tasks_via_shell": False,
        # Tasks run in a sandbox (docs/tasks.md#the-sandbox); True runs them as the relay's own
        # user with its access to everything; a relay without a sandbox runs no task otherwise.
        "tasks_without_sandbox": False,
        # The sandbox has no network: the relay's Redis and PostgreSQL listen on loopback.
        "tasks_use_network": False,
        # Only the relay's own work folder: the home folder holds the owner's keys and dotfiles
        # (docs/decisions.md#folders-and-provider-urls); the owner adds roots in the settings.
        "allowed_roots": [str(default_cwd(config).resolve())],
        "relay_name": config.relay_name,
        "rate_calls_per_minute": defaults.RATE_CALLS_PER_MINUTE,
        "rate_writes_per_minute": defaults.RATE_WRITES_PER_MINUTE,
        "max_ping_pong_turns": defaults.OPENCLAW_MAX_PING_PONG_TURNS,
        "sessions_visibility": defaults.SESSIONS_VISIBILITY,
        "send_policy": {"rules": [], "default": "allow"},
        "spawn_allow_agents": [],
        "spawn_archive_after_minutes": defaults.OPENCLAW_ARCHIVE_AFTER_MINUTES,
        # None: no quiet hours for notifications; cards and questions go out even inside them.
        "notify_quiet_hours": None,
        "notify_quiet_hours_hold_all": False,
        # Everything but moving subscriptions may be decided from a notification's link or buttons.
        "notify_decide_kinds": list(defaults.NOTIFY_DECIDE_KINDS_DEFAULT),
        # A team's runs and memory are its own; True shares them with every conversation of the relay.
        "team_runs_shared": False,
        "team_calls_per_minute": defaults.TEAM_CALLS_PER_MINUTE,
        "team_writes_per_minute": defaults.TEAM_WRITES_PER_MINUTE,
    }


def default_cwd(config: Config) -> Path:
    """The folder sessions start in when nobody names one: `<data dir>/work`."""
    return config.data_dir / "work"


def load(config: Config) -> dict[str, Any]:
    values = default_settings(config)
    for row in Setting.select().where(Setting.key.in_(list(VALIDATORS))):
        values[row.key] = row.value
    values["notify_quiet_hours"] = values["notify_quiet_hours"] or None  # none stored as {}
    return values


# A new random value on every change of the owner settings, written in the same transaction
# (`_upsert`): a process keeps the settings it read until the stored version differs
# (docs/decisions.md#reads-at-scale).
VERSION_KEY = "settings_version"
_VERSION = Prepared(lambda key: Setting.select(Setting.value).where(Setting.key == key).tuples())
# No version given: `Cached.get` reads it.
UNREAD = object()


def version_column() -> Any:
    """The settings version as a column `settings_version` of another query: every relay_tool
    call reads it with its token's session, one query instead of two (`Cached.get`). An
    `Alias` node (a subquery's own `.alias` names the subquery, which `Prepared` would not
    take for a column)."""
    return pw.Alias(Setting.select(Setting.value).where(Setting.key == VERSION_KEY), "settings_version")


class Cached:
    """One process's copy of the owner settings, read again when their version changed.

    Each `get` asks the database for the version only (one indexed row), so a change made by
    any process is seen by the next call of every other.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        # (database, version, settings) of the last load; the database too, since a process
        # (a test) may open another one.
        self._last: tuple[object, Any, dict[str, Any]] | None = None

    def get(self, stored_version: Any = UNREAD) -> dict[str, Any]:
        """The settings; `stored_version`: the version row's stored text as a query that read
        it along with other things gave it (`version_column`), else it is read here."""
        if stored_version is UNREAD:
            found = _VERSION.rows(VERSION_KEY)
            version = found[0][0] if found else None
        else:
            version = Setting.value.python_value(stored_version)
        last = self._last
        if last is None or last[0] is not database.obj or last[1] != version:
            last = (database.obj, version, load(self.config))
            with self._lock:
                self._last = last
        # A copy: a caller may change what it got without changing the next caller's.
        return {key: list(value) if isinstance(value, list) else value for key, value in last[2].items()}


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
    """Insert or update one setting (works on SQLite and PostgreSQL alike), and its version."""
    for name, stored in ((key, value), (VERSION_KEY, secrets.token_hex(8))):
        Setting.insert(key=name, value=stored).on_conflict(
            conflict_target=[Setting.key], update={Setting.value: EXCLUDED.value}
        ).execute()
