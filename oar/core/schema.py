"""JSON Schema from declared fields, and the shape of a tool definition.

`Param` tables (oar/core/fields.py) are the one description of an action's arguments and an
owner API body's fields; the JSON Schemas every surface shows are generated here from them,
never written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oar.core.fields import Param

JSON_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array", "object": "object"}


@dataclass(frozen=True)
class ToolDefinition:
    """A function tool as models, MCP clients and OpenAPI readers are given it.

    `parameters` is one JSON Schema of type object (what OpenAI and Anthropic require).
    """

    name: str
    description: str
    parameters: dict[str, Any]


def param_schema(param: Param, *, described: bool = True) -> dict[str, Any]:
    """The JSON Schema of one field: its type, range, length, choices and description."""
    schema: dict[str, Any] = {}
    if param.kind == "any":
        if param.alternatives:
            schema["anyOf"] = [param_schema(shape) for shape in param.alternatives]
    elif param.kind in JSON_TYPES:
        schema["type"] = JSON_TYPES[param.kind]
    else:
        raise ValueError(f"unknown parameter kind {param.kind}")
    if param.choices:
        schema["enum"] = list(param.choices)
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.maximum is not None:
        schema["maximum"] = param.maximum
    if param.max_length is not None:
        schema["maxLength"] = param.max_length
    if param.items is not None:
        schema["items"] = param_schema(param.items)
    if param.max_items is not None:
        schema["maxItems"] = param.max_items
    if param.fields:
        schema.update(object_schema(param.fields))
    if described and param.description:
        schema["description"] = param.description
    return schema


def object_schema(fields: Mapping[str, Param], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of an object with these fields; `required` adds to the fields' own."""
    needed = [name for name, param in fields.items() if param.required or name in required]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: param_schema(param) for name, param in fields.items()},
    }
    if needed:
        schema["required"] = needed
    return schema


def type_text(param: Param) -> str:
    """A field's type in words, for help texts and the reference: `text`, `list of text`…"""
    if param.kind == "any" and param.alternatives:
        return " or ".join(type_text(shape) for shape in param.alternatives)
    words = {"str": "text", "int": "integer", "bool": "boolean", "list": "list", "object": "object", "any": "any"}
    text = words[param.kind]
    if param.items is not None:
        text += f" of {type_text(param.items)}"
    return text


def limits_text(param: Param) -> str:
    """A field's range, length and choices in words (empty when it has none)."""
    parts: list[str] = []
    if param.choices:
        parts.append("one of " + ", ".join(f'"{choice}"' for choice in param.choices))
    if param.minimum is not None and param.maximum is not None:
        parts.append(f"{param.minimum:,} to {param.maximum:,}")
    elif param.minimum is not None:
        parts.append(f"at least {param.minimum:,}")
    elif param.maximum is not None:
        parts.append(f"at most {param.maximum:,}")
    if param.max_length is not None:
        parts.append(f"up to {param.max_length:,} characters")
    if param.one_line:
        parts.append("one line, no control characters")
    if param.max_items is not None:
        parts.append(f"up to {param.max_items:,} items")
    if param.items is not None and limits_text(param.items):
        parts.append(f"each {limits_text(param.items)}")
    if param.fields:
        parts.append("fields " + ", ".join(param.fields))
    for shape in param.alternatives:
        if limits_text(shape):
            parts.append(f"{type_text(shape)} {limits_text(shape)}")
    return "; ".join(parts)
