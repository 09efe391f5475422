"""Declared fields and how JSON values are checked against them (docs/calling.md).

One `Param` describes an argument of an action or a field of an owner API body: its type,
whether it is required, its range or choices and a description. `check_fields` checks a JSON
object against such a table; the JSON Schemas of the actions are generated from the same table.

Empty values count as absent because some providers send every field: for arguments the
action takes, `null`, `""`, `[]` and `{}` mean "not given" (and `false` too, except for
boolean arguments, where it is a real value); arguments it does not take are ignored
silently when empty, listed in `ignored` otherwise, or rejected by strict actions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oar.core import defaults
from oar.core.errors import invalid


@dataclass(frozen=True)
class Param:
    """One argument: its type, whether it is required, and its allowed values.

    `check_fields` checks the kind, `required`, `choices`, the range and `max_length`. The
    shape fields below it (`items`, `max_items`, `fields`, `alternatives`) only describe, for
    the JSON Schemas, what the handler itself checks inside a list, an object or an `any`.
    """

    kind: str  # str | int | bool | list | object | any
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    max_length: int | None = None
    description: str = ""
    # "X needs Y (description)": False keeps a required argument's refusal without it.
    hint_when_missing: bool = True
    # list: what each item is, and how many there may be.
    items: Param | None = None
    max_items: int | None = None
    # object: its fields.
    fields: Mapping[str, Param] = field(default_factory=dict, hash=False)
    # any: the shapes the value may take.
    alternatives: tuple[Param, ...] = ()
    # str: one line of text (a title), without control characters (`has_control_characters`).
    one_line: bool = False


def is_empty(value: Any) -> bool:
    return value is None or value is False or _blank(value) or value == [] or value == {}


def _blank(value: Any) -> bool:
    """Text with nothing but white space counts as not given, like the empty string."""
    return isinstance(value, str) and not value.strip()


# What no database stores: NUL, and code points in the surrogate range (in a Python string
# always lone: a JSON pair "\ud83d\ude00" decodes to one code point).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


# What a one-line text (a title, a name) may not hold: the C0 and C1 control characters, DEL,
# and the Unicode line and paragraph separators. A line break in a session's title would start a
# line of its own wherever the title is shown inside a line (an event line, a prompt's header).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


def one_line(text: str) -> str:
    """`text` with each control character a space, stripped: for one-line text the relay is given
    and must keep rather than refuse (a title taken from a prompt's first line, another relay's
    session title)."""
    return (_CONTROL.sub(" ", text) if _CONTROL.search(text) else text).strip()


def unstorable_text(value: Any) -> bool:
    """Whether a JSON value holds text no database can store: a NUL character or a lone surrogate."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def refuse_unstorable(value: Any, holder: str, nothing: str = "", *, form: bool = False) -> None:
    """The one refusal of text no database can store (`unstorable_text`), made before anything
    is written by every surface that takes a body, a form or arguments: `{holder} text the relay
    cannot store (…). {nothing}`, `holder` with its verb ("The body holds"). `form`: the text came
    from a form, which the web decodes with replacement, so only a NUL can be in it."""
    if unstorable_text(value):
        what = "a NUL character" if form else "a NUL character or a lone surrogate such as \\ud800"
        raise invalid(f"{holder} text the relay cannot store ({what}). {nothing}".rstrip())


def storable(text: str) -> str:
    """`text` with each character no database can store replaced by U+FFFD, as a decoder
    replaces bytes it cannot read: for what the relay is sent and must keep (a provider's
    reply), where refusing the whole would lose it."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub("\ufffd", text)


def check_fields(
    name: str, params: dict[str, Param], payload: dict[str, Any], *, strict: bool, nothing: str
) -> tuple[dict[str, Any], list[str]]:
    """The same checks for any JSON object with declared fields (actions, owner API bodies)."""
    raw = {key: value for key, value in payload.items() if key != "action"}
    unknown = [key for key, value in raw.items() if key not in params and not is_empty(value)]
    if unknown and strict:
        raise invalid(f"{name} does not take: {', '.join(unknown)}. Its arguments: {', '.join(params)}. {nothing}".strip())
    args: dict[str, Any] = {}
    for field_name, param in params.items():
        value = raw.get(field_name)
        if value is None or (value is False and param.kind != "bool") or _blank(value) or value in ([], {}):
            if param.required:
                raise invalid(f"{name} needs {field_name}{_hint(param)}. {nothing}".strip())
            continue
        args[field_name] = _checked(name, nothing, field_name, param, value)
    return args, unknown[: defaults.IGNORED_ARGUMENTS_LISTED]


def _hint(param: Param) -> str:
    return f" ({param.description})" if param.description and param.hint_when_missing else ""


def _checked(action: str, nothing: str, name: str, param: Param, value: Any) -> Any:
    try:
        return check_value(param, value)
    except TooLong as error:
        raise invalid(
            f"{action}: {name} is {error.length:,} characters; the limit is {error.limit:,}. {nothing}".strip()
        ) from None
    except Mismatch as error:
        shown = repr(value)[:80] if not isinstance(value, str) else f'"{value[:80]}"'
        raise invalid(f"{action}: {name} must be {error.expected}; got {shown}. {nothing}".strip()) from None


class Mismatch(ValueError):
    """A value that does not fit its `Param`; `expected` says what it must be ("true or false")."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


class TooLong(Mismatch):
    """Text longer than its `Param`'s `max_length`."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"at most {limit:,} characters")
        self.length = length
        self.limit = limit


def check_value(param: Param, value: Any) -> Any:
    """The one check of a given value against its `Param` (kind, length, one line, choices, range),
    for `check_fields` and the owner's settings alike: the value as kept (a choice in lower case, a
    whole number as an int), or `Mismatch`, which each caller words as its refusal."""
    if param.kind == "str":
        if not isinstance(value, str):
            raise Mismatch("text")
        if param.max_length is not None and len(value) > param.max_length:
            raise TooLong(len(value), param.max_length)
        if param.one_line and has_control_characters(value):
            raise Mismatch("one line of text without line breaks, tabs or other control characters")
        if param.choices:
            lowered = value.strip().lower()
            if lowered not in param.choices:
                raise Mismatch("one of " + ", ".join(f'"{c}"' for c in param.choices))
            return lowered
        return value
    if param.kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and (not math.isfinite(value) or not value.is_integer())
        ):
            raise Mismatch(_range_text(param))
        number = int(value)
        if (param.minimum is not None and number < param.minimum) or (
            param.maximum is not None and number > param.maximum
        ):
            raise Mismatch(_range_text(param))
        return number
    if param.kind == "bool":
        if not isinstance(value, bool):
            raise Mismatch("true or false")
        return value
    if param.kind == "list":
        if not isinstance(value, list):
            raise Mismatch("a list")
        return value
    if param.kind == "any":
        return value
    if param.kind == "object":
        if not isinstance(value, dict):
            raise Mismatch("an object")
        return value
    raise AssertionError(f"unknown parameter kind {param.kind}")


def _range_text(param: Param) -> str:
    if param.minimum is not None and param.maximum is not None:
        return f"a whole number from {param.minimum:,} to {param.maximum:,}"
    if param.minimum is not None:
        return f"a whole number of at least {param.minimum:,}"
    return "a whole number"
