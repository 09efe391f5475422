"""The actions in words, generated from the registry: `oar call --help` and docs/actions.md.

`python -m oar docs actions --write` regenerates docs/actions.md; a test fails when the
committed file differs from what this module renders.
"""

from __future__ import annotations

from pathlib import Path

from oar.actions.catalog import ordered_actions
from oar.actions.registry import ActionSpec
from oar.actions.schema import RELAY_TOOL_NAME, action_signature, required_arguments
from oar.approvals import cards
from oar.core.fields import Param
from oar.core.schema import limits_text, type_text

# The reference in the project's docs/ folder, beside the package.
DOCS_FILE = Path(__file__).resolve().parents[2] / "docs" / "actions.md"
REGENERATE = "python -m oar docs actions --write"

LEVEL_TEXT = {
    None: "none (works with no relay named)",
    "read": "read",
    "prompt": "prompt (read and prompt)",
    "full": "full",
}


def notes(spec: ActionSpec) -> list[str]:
    """What the spec says beyond its arguments: which arguments are optional or refused, the
    checks it makes, the sentence its refusals end with."""
    lines: list[str] = []
    if "relay" in spec.params and spec.relay_optional:
        lines.append('`relay` may be omitted: it means "this" relay.')
    if spec.not_own_session:
        lines.append(f"`{spec.not_own_session}` must not be the calling conversation's own session.")
    if spec.writes_with:
        lines.append(f"A write only when `{spec.writes_with}` names another session; otherwise a read.")
    if spec.needs_one_of:
        lines.append("Needs at least one of " + ", ".join(f"`{name}`" for name in spec.needs_one_of) + ".")
    if spec.strict:
        lines.append("Refuses arguments it does not take (other actions ignore them and list them in `ignored`).")
    for name, sentence in spec.refused_args:
        lines.append(f"`{name}` is refused: {sentence}")
    for reason in spec.approval:
        lines.append(f"Waits for the owner's approval card: {cards.why(reason)}.")
    if spec.writes or spec.writes_with:
        lines.append("In ask or plan mode every call of it waits for the owner's approval card.")
    if spec.nothing:
        lines.append(f'A refused call changes nothing and its error ends "{spec.nothing}"')
    return lines


def kind_text(spec: ActionSpec) -> str:
    """`read`, `write`, or `read (a write with session)` for an action that writes only about another session."""
    if spec.writes:
        return "write"
    return f"read (a write with {spec.writes_with})" if spec.writes_with else "read"


# `oar call --help` ------------------------------------------------------------------------


def call_help() -> str:
    """Every action with its summary, for `oar call --help`."""
    specs = ordered_actions()
    width = max(len(spec.name) for spec in specs) + 2
    lines = [
        "usage: oar call <action> [key=value ...]",
        "",
        f"Call {RELAY_TOOL_NAME} over HTTP as the session whose agent token is in OAR_TOKEN (the relay: OAR_URL,",
        "else its configured base URL). Values are JSON when they parse as JSON, else text.",
        "",
        "actions:",
    ]
    lines += [f"  {spec.name.ljust(width)}{spec.summary}" for spec in specs]
    lines += ["", "oar call <action> --help shows an action's arguments."]
    return "\n".join(lines) + "\n"


def action_help(spec: ActionSpec) -> str:
    """One action's arguments, for `oar call <action> --help`."""
    required = required_arguments(spec)
    usage = " ".join([f"oar call {spec.name}", *(f"{name}=…" for name in required)])
    if len(required) < len(spec.params):
        usage += " [key=value ...]"
    lines = [
        f"usage: {usage}",
        "",
        spec.summary,
        "",
        f"{kind_text(spec)} · level: {LEVEL_TEXT[spec.level]}",
    ]
    if spec.params:
        width = max(len(name) for name in spec.params) + 2
        lines += ["", "arguments:"]
        for name, param in spec.params.items():
            parts = [type_text(param), "required" if name in required else "", limits_text(param)]
            shape = ", ".join(part for part in parts if part)
            lines.append(f"  {name.ljust(width)}{param.description} ({shape})")
    else:
        lines += ["", "arguments: none"]
    extra = notes(spec)
    if extra:
        lines += [""] + extra
    return "\n".join(lines) + "\n"


# docs/actions.md ----------------------------------------------------------------------------


def markdown() -> str:
    """The actions reference, docs/actions.md."""
    specs = ordered_actions()
    lines = [
        "# Actions",
        "",
        f"<!-- Generated from the action registry by `{REGENERATE}`; do not edit by hand. -->",
        "",
        f"Every action is one `{RELAY_TOOL_NAME}` call: a JSON object with `action` and the action's arguments,",
        'e.g. `{"action": "read_session", "relay": "this", "session": "3f9c2a1e"}`. An empty value (`null`, `""`,',
        "`[]`, `{}`, and `false` except for boolean arguments) counts as not given. **Level** is the least",
        '"Agents may" level a paired relay must grant; **kind** says whether the action writes.',
        "",
        "| Action | Level | Kind | What it does |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| [{spec.name}](#{spec.name}) | {spec.level or '–'} | {kind_text(spec)} | {_cell(spec.summary)} |"
        for spec in specs
    ]
    for spec in specs:
        lines += ["", *_section(spec)]
    return "\n".join(lines) + "\n"


def _section(spec: ActionSpec) -> list[str]:
    required = required_arguments(spec)
    lines = [
        f"## {spec.name}",
        "",
        spec.summary,
        "",
        f"`{action_signature(spec)}`",
        "",
        f"- Level: {LEVEL_TEXT[spec.level]}",
        f"- Kind: {kind_text(spec)}",
        *(f"- {note}" for note in notes(spec)),
        "",
    ]
    if not spec.params:
        return [*lines, "No arguments."]
    lines += ["| Argument | Type | Required | Range, choices | Description |", "|---|---|---|---|---|"]
    for name, param in spec.params.items():
        lines += _argument_rows(name, param, name in required)
    return lines


def _argument_rows(name: str, param: Param, required: bool) -> list[str]:
    rows = [
        f"| `{name}` | {type_text(param)} | {'yes' if required else 'no'} | {_cell(limits_text(param))} "
        f"| {_cell(param.description)} |"
    ]
    for field_name, field in param.fields.items():  # an object's fields, one row each
        rows += _argument_rows(f"{name}.{field_name}", field, field.required)
    return rows


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ") or "–"
