"""Every schema of the actions, generated from the registry (docs/actions.md).

One JSON Schema per action from its `Param`s and its spec; from the same registry the one
`relay_tool` tool definition that every surface shows (the function tool given to models
today; the MCP tool list and the OpenAPI document build on it), and the system prompt's list
of actions. Nothing here is written by hand per action, so nothing can drift from what the
dispatcher checks.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from oar.actions.catalog import ordered_actions
from oar.actions.registry import ActionSpec
from oar.core.fields import Param
from oar.core.schema import ToolDefinition, object_schema, param_schema

RELAY_TOOL_NAME = "relay_tool"
RELAY_TOOL_DESCRIPTION = (
    "Act on OAR relays as this session: list, read, create and prompt sessions, wait for replies, "
    "subscribe, schedule, ask. Pass `action` and the action's arguments in one object; each "
    "argument says which actions take it."
)
PROMPT_INTRODUCTION = (
    "You are an agent session on an OAR relay. Besides answering, you can act on relays with the "
    "relay_tool function: pass an object with `action` and that action's arguments, e.g. "
    '{"action": "list_sessions", "relay": "this"} or {"action": "create_session", "relay": "this", '
    '"text": "…"}. Results are JSON objects with ok, and code and error when refused.'
)
PROMPT_LEGEND = "Actions, as action(required arguments[, optional arguments]), and what each does:"


def required_arguments(spec: ActionSpec) -> list[str]:
    """The arguments a call must give: the required `Param`s, and `relay` unless it may be omitted."""
    return [
        name for name, param in spec.params.items()
        if param.required or (name == "relay" and not spec.relay_optional)
    ]


def optional_arguments(spec: ActionSpec) -> list[str]:
    required = required_arguments(spec)
    return [name for name in spec.params if name not in required]


def arguments_schema(spec: ActionSpec) -> dict[str, Any]:
    """The JSON Schema of one action's arguments (an object without `action`)."""
    schema = object_schema(spec.params, required=tuple(required_arguments(spec)))
    if spec.needs_one_of:
        schema["anyOf"] = [{"required": [name]} for name in spec.needs_one_of]
    if spec.strict:
        schema["additionalProperties"] = False
    return schema


def call_schema(spec: ActionSpec) -> dict[str, Any]:
    """The JSON Schema of one whole call of an action: `action` as a constant, then its arguments."""
    arguments = arguments_schema(spec)
    schema: dict[str, Any] = {
        "type": "object",
        "title": spec.name,
        "description": spec.summary,
        "properties": {"action": {"const": spec.name}, **arguments["properties"]},
        "required": ["action", *arguments.get("required", [])],
    }
    for key in ("anyOf", "additionalProperties"):
        if key in arguments:
            schema[key] = arguments[key]
    return schema


def call_schemas() -> dict[str, dict[str, Any]]:
    """Every action's call schema, in reading order (the OpenAPI document's request bodies)."""
    return {spec.name: call_schema(spec) for spec in ordered_actions()}


@cache
def relay_tool() -> ToolDefinition:
    """The one `relay_tool` function: `action` (an enum of every action) and every argument of
    every action as one property, each saying which actions take it."""
    specs = ordered_actions()
    properties: dict[str, Any] = {
        "action": {
            "type": "string",
            "enum": [spec.name for spec in specs],
            "description": "the action to run; the other properties are its arguments",
        },
    }
    every = [spec.name for spec in specs]
    for name, uses in _arguments_by_name(specs).items():
        properties[name] = _merged_property(name, uses, every)
    parameters = {
        "type": "object",
        "properties": properties,
        "required": ["action"],
        # Arguments an action does not take are ignored and listed in `ignored` (or refused by
        # the strict actions): the relay says so itself, the schema does not refuse them.
        "additionalProperties": True,
    }
    return ToolDefinition(name=RELAY_TOOL_NAME, description=RELAY_TOOL_DESCRIPTION, parameters=parameters)


@cache
def system_prompt() -> str:
    """The system prompt of LLM turns: byte-stable from turn to turn so that prompt caches hit
    from position 0 (docs/providers.md); its action list comes from the registry."""
    lines = [PROMPT_INTRODUCTION, "", PROMPT_LEGEND]
    lines += [f"- {action_signature(spec)}: {spec.summary}" for spec in ordered_actions()]
    return "\n".join(lines)


def action_signature(spec: ActionSpec) -> str:
    """`send(relay, session, text[, wait_seconds, mode, …])`."""
    required = ", ".join(required_arguments(spec))
    optional = optional_arguments(spec)
    if spec.needs_one_of:
        rest = [name for name in optional if name not in spec.needs_one_of]
        optional_text = "at least one of " + ", ".join(spec.needs_one_of) + "".join(f", {name}" for name in rest)
    else:
        optional_text = ", ".join(optional)
    bracket = f"[{', ' if required else ''}{optional_text}]" if optional_text else ""
    return f"{spec.name}({required}{bracket})"


# The merged properties of relay_tool ---------------------------------------------------


def _arguments_by_name(specs: list[ActionSpec]) -> dict[str, list[tuple[ActionSpec, Param]]]:
    """Each argument name, in order of first appearance, with the actions that take it."""
    uses: dict[str, list[tuple[ActionSpec, Param]]] = {}
    for spec in specs:
        for name, param in spec.params.items():
            uses.setdefault(name, []).append((spec, param))
    return uses


def _merged_property(name: str, uses: list[tuple[ActionSpec, Param]], every: list[str]) -> dict[str, Any]:
    """One property for an argument several actions take: its shape when they agree on it, its
    type when only that is shared, and one description naming the actions."""
    shapes = [param_schema(param, described=False) for _, param in uses]
    distinct = [json.loads(text) for text in dict.fromkeys(json.dumps(shape, sort_keys=True) for shape in shapes)]
    if len(distinct) == 1:
        merged = dict(shapes[0])
    else:
        types = list(dict.fromkeys(shape.get("type") for shape in shapes))
        merged = {"type": types[0]} if len(types) == 1 and types[0] else {"anyOf": distinct}
    merged["description"] = _merged_description(name, uses, every)
    return merged


def _merged_description(name: str, uses: list[tuple[ActionSpec, Param]], every: list[str]) -> str:
    """`read_session, send, … (required): a session id from list_sessions · ask: …`, one part
    per distinct description."""
    by_description: dict[str, list[ActionSpec]] = {}
    for spec, param in uses:
        by_description.setdefault(param.description, []).append(spec)
    parts = []
    for description, specs in by_description.items():
        names = [spec.name for spec in specs]
        required = [spec.name for spec in specs if name in required_arguments(spec)]
        optional = [spec.name for spec in specs if spec.name not in required]
        usage = _listed(names, every)
        if required and not optional:
            usage += " (required)"
        elif required:
            usage += f" (required by {', '.join(required)})" if len(required) <= len(optional) else (
                f" (optional for {', '.join(optional)})"
            )
        parts.append(f"{usage}: {description}")
    return " · ".join(parts)


def _listed(names: list[str], every: list[str]) -> str:
    """The actions by name, or `every action but …` when that is shorter."""
    left_out = [name for name in every if name not in names]
    if len(left_out) < len(names) / 2:
        return "every action" + (f" but {', '.join(left_out)}" if left_out else "")
    return ", ".join(names)
