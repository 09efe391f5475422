"""The action registry: `@action(...)` next to each handler, one table for the dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oar.actions.context import CallContext
from oar.approvals.cards import DECLARED_REASONS
from oar.core.fields import Param

Handler = Callable[[CallContext, dict[str, Any]], dict[str, Any]]

LEVELS = ("read", "prompt", "full")


@dataclass(frozen=True)
class ActionSpec:
    name: str
    handler: Handler
    params: dict[str, Param]
    # Minimum "Agents may" level on a paired relay; None: needs none (list_relays).
    level: str | None
    writes: bool
    # create_session and update_session reject unknown arguments instead of ignoring them.
    strict: bool = False
    # The sentence that ends every refusal: "Nothing was sent." (empty for reads).
    nothing: str = ""
    # `relay` may be omitted (= "this").
    relay_optional: bool = False
    # The argument naming a session that must not be the caller's own conversation.
    not_own_session: str | None = None
    summary: str = ""
    # Arguments refused with their own sentence instead of the unknown-argument one
    # (update_session's `may_create_sessions`, docs/rules.md#one-level).
    refused_args: tuple[tuple[str, str], ...] = ()
    # A write only when this argument names another session (`ask` with `session`, docs/calling.md#levels-and-write-actions).
    writes_with: str | None = None
    # At least one of these arguments is required (update_session's settings, docs/sessions.md#update_session).
    needs_one_of: tuple[str, ...] = ()
    # Why a call of this action asks the owner, besides ask/plan mode and loop protection
    # (docs/rules.md#approval-cards): reasons from `cards.DECLARED_REASONS`, each asked when it applies.
    approval: tuple[str, ...] = ()
    # Answered on this relay from a few indexed queries and nothing else (no wait, peer, file
    # or write): its calls on this relay run under `db.short_read`, one at a time per process.
    short_read: bool = False


ACTIONS: dict[str, ActionSpec] = {}


def action(
    name: str,
    *,
    params: dict[str, Param],
    level: str | None,
    writes: bool = False,
    **options: Any,
) -> Callable[[Handler], Handler]:
    if level is not None and level not in LEVELS:
        raise ValueError(f"unknown level {level}")
    unknown_reasons = set(options.get("approval", ())) - set(DECLARED_REASONS)
    if unknown_reasons:
        raise ValueError(f"action {name} declares unknown approval reasons {sorted(unknown_reasons)}")

    def register(handler: Handler) -> Handler:
        if name in ACTIONS:
            raise ValueError(f"action {name} registered twice")
        ACTIONS[name] = ActionSpec(
            name=name, handler=handler, params=params, level=level, writes=writes,
            summary=(handler.__doc__ or "").strip().splitlines()[0] if handler.__doc__ else "",
            **options,
        )
        return handler

    return register
