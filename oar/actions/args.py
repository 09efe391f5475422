"""Checking an action's arguments before anything changes (docs/calling.md)."""

from __future__ import annotations

from typing import Any

from oar.actions.registry import ActionSpec
from oar.core.errors import invalid
from oar.core.fields import check_fields, is_empty


def check_arguments(spec: ActionSpec, payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Validated arguments and the ignored argument names; raises INVALID_INPUT."""
    for name, sentence in spec.refused_args:
        if not is_empty(payload.get(name)):
            raise invalid(f"{sentence} {spec.nothing}".strip())
    args, ignored = check_fields(spec.name, spec.params, payload, strict=spec.strict, nothing=spec.nothing)
    if spec.needs_one_of and not any(name in args for name in spec.needs_one_of):
        raise invalid(
            f"{spec.name} needs at least one setting: {', '.join(spec.needs_one_of)}. {spec.nothing}".strip()
        )
    return args, ignored
