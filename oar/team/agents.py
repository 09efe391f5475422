"""Team and pool definitions (docs/team-runs.md#agents): YAML files the owner keeps in the data
folder's `.relay/`, as the seed's users keep them in their project:

- `.relay/agents.pool.yml` — every agent a team may be made of;
- `.relay/session-agents-<run>.yml` — one run's team, whose agents may extend the pool's.

Both files hold `agents` (a mapping of id → fields, or a list of mappings with `id`) and may hold
`shared` (named blocks of fields). An agent's `extends` names one block or agent, or a list of
them, merged in order before its own fields (a later one wins, a list such as `tools` is replaced
as a whole). In a team file, `extends` may name a pool agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oar.core import defaults, safe_files
from oar.team.runs import checked_agent, refuse

FIELDS = ("name", "emoji", "description", "tags", "tools", "systemPrompt")
# The same field as other spellings write it.
ALIASES = {"system_prompt": "systemPrompt", "prompt": "systemPrompt"}
MAX_EXTENDS_DEPTH = 10
NOTHING = "Nothing was read."


RELAY_FOLDER = ".relay"
POOL_FILE = "agents.pool.yml"


def team_file(run_id: str) -> str:
    return f"session-agents-{run_id}.yml"


def read_definitions(data_dir: Path, name: str) -> str | None:
    """The text of `.relay/<name>` in the data folder, or None when there is none. `.relay` and the
    file are opened without following a link (`oar.core.safe_files`): an agent that can write
    there must not make the relay read another file as the owner's definitions."""
    try:
        # `.relay` (and the file, below) is named relative to the data folder in an error.
        with safe_files.opened_dir(data_dir.resolve()) as data, safe_files.opened_dir(RELAY_FOLDER, under=data) as relay:
            try:
                raw = safe_files.read_regular_file(relay, name, defaults.TEAM_AGENT_FILE_MAX_BYTES)
            except safe_files.UnsafeFile as error:
                raise error.under(RELAY_FOLDER) from None
    except FileNotFoundError:
        return None
    except safe_files.UnsafeFile as error:
        raise refuse(f"The relay did not read .relay/{name}: {error.strerror}. {NOTHING}") from None
    except safe_files.TooLarge:
        raise refuse(f".relay/{name} is larger than {defaults.TEAM_AGENT_FILE_MAX_BYTES:,} bytes. {NOTHING}") from None
    except OSError as error:
        raise refuse(f"The relay could not read .relay/{name}: {error.strerror}. {NOTHING}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise refuse(f".relay/{name} is not valid YAML: {str(error)[:300]}. {NOTHING}") from None


def load(data_dir: Path, name: str) -> dict[str, Any] | None:
    """`.relay/<name>`'s YAML mapping, None when there is no file, or a refusal that names the problem."""
    text = read_definitions(data_dir, name)
    if text is None:
        return None
    # Imported here: only a team run's definitions are YAML, and most processes never read one.
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise refuse(f".relay/{name} is not valid YAML: {str(error)[:300]}. {NOTHING}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise refuse(f".relay/{name} must hold a mapping with `agents` (and `shared`). {NOTHING}")
    return document


def raw_agents(document: dict[str, Any], file: str) -> dict[str, dict[str, Any]]:
    given = document.get("agents") or {}
    if isinstance(given, list):
        entries: dict[str, dict[str, Any]] = {}
        for entry in given:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise refuse(f"{file}: each entry of `agents` needs an `id`. {NOTHING}")
            entries[entry["id"]] = entry
        given = entries
    if not isinstance(given, dict) or not all(isinstance(value, dict) for value in given.values()):
        raise refuse(f"{file}: `agents` must map agent ids to their fields (or list them with `id`). {NOTHING}")
    for agent_id in given:
        checked_agent(f"{file}: agent id", str(agent_id))
    return {str(key): value for key, value in given.items()}


def definitions(document: dict[str, Any], file: str, base: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every agent of the file, `extends` resolved against its `shared` blocks, its own agents and `base`."""
    shared = document.get("shared") or {}
    if not isinstance(shared, dict) or not all(isinstance(value, dict) for value in shared.values()):
        raise refuse(f"{file}: `shared` must map block names to fields. {NOTHING}")
    agents = raw_agents(document, file)

    def merged_fields(own: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        if len(path) > MAX_EXTENDS_DEPTH:
            raise refuse(f"{file}: `extends` nests deeper than {MAX_EXTENDS_DEPTH}. {NOTHING}")
        merged: dict[str, Any] = {}
        parents = own.get("extends") or []
        for parent in [parents] if isinstance(parents, str) else parents:
            merged.update(resolve(str(parent), path))
        merged.update({ALIASES.get(key, key): value for key, value in own.items() if key not in ("extends", "id")})
        return merged

    def resolve(name: str, path: tuple[str, ...]) -> dict[str, Any]:
        # A name already being resolved reaches past this file: a team's `fe` may extend the pool's `fe`.
        if name in agents and name not in path:
            return merged_fields(agents[name], (*path, name))
        if name in shared and name not in path:
            return merged_fields(shared[name], (*path, name))
        if base is not None and name in base:
            return dict(base[name])
        if name in path:
            raise refuse(f"{file}: `extends` goes round in a circle: {' → '.join((*path, name))}. {NOTHING}")
        raise refuse(f"{file}: `extends: {name}` names no shared block or agent. {NOTHING}")

    return [shaped(agent_id, merged_fields(agents[agent_id], (agent_id,)), file) for agent_id in agents]


def shaped(agent_id: str, fields: dict[str, Any], file: str) -> dict[str, Any]:
    def text(name: str, default: str) -> str:
        value = fields.get(name, default)
        if value is None:
            return default
        if not isinstance(value, (str, int, float)):
            raise refuse(f"{file}: agent {agent_id}: `{name}` must be text. {NOTHING}")
        return str(value)

    def texts(name: str) -> list[str] | None:
        value = fields.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise refuse(f"{file}: agent {agent_id}: `{name}` must be a list of text. {NOTHING}")
        return value

    return {
        "id": agent_id,
        "name": text("name", agent_id),
        "emoji": text("emoji", ""),
        "description": text("description", ""),
        "tags": texts("tags"),
        "tools": texts("tools") or [],
        "systemPrompt": text("systemPrompt", ""),
    }


def pool(data_dir: Path) -> list[dict[str, Any]] | None:
    """The pool's agents (system prompts included), or None when there is no pool file."""
    document = load(data_dir, POOL_FILE)
    return None if document is None else definitions(document, f"{RELAY_FOLDER}/{POOL_FILE}")


def team(data_dir: Path, run_id: str) -> list[dict[str, Any]] | None:
    """A run's team, its `extends` reaching the pool's agents; None when the run has no team file."""
    name = team_file(run_id)
    document = load(data_dir, name)
    if document is None:
        return None
    base = {agent["id"]: {k: v for k, v in agent.items() if k != "id"} for agent in pool(data_dir) or []}
    return definitions(document, f"{RELAY_FOLDER}/{name}", base)


def pool_metadata(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pool as list_pool_agents shows it: no system prompts."""
    return [{key: value for key, value in agent.items() if key != "systemPrompt"} for agent in agents]
