"""One log line per relay_tool call (docs/operations.md#logs): who called what, how it ended, how long it took.

Every surface hands its calls to `dispatch` (HTTP, MCP, a model's function call, echo's `!relay`,
another relay's agent, OpenClaw's and the team's tools), so the line is written there, once. It
holds this relay's name, the calling conversation (short id and title), the way the call came
(`via`), the action, its target (the relay it acts on and the id it names), the outcome (`ok` or
the error code) and the duration. Argument values are not logged — prompts, answers and task
commands can hold secrets — except ids, and only when they look like one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import peewee

from oar.actions.context import CallContext
from oar.core import defaults, logs, metrics

# The arguments that name what a call acts on, in the order the target takes the first given.
ID_ARGUMENTS = ("session", "message_id", "task_id", "schedule_id", "subscription_id", "question_id", "watcher", "from")
# Those that name a session, shown by its short id.
SESSION_ARGUMENTS = frozenset({"session", "watcher", "from"})
# What an id looks like; any other value (a mistyped one could be anything) is shown as `?`.
_ID_SHAPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# A conversation's title in the line, at most.
TITLE_CHARS = 80


@dataclass
class CallTrace:
    """What the line says of a call, filled in by the dispatcher as it learns it: the action once
    it is a known one, the target once the relay is resolved and the arguments checked."""

    action: str = "-"
    target: str = "-"

    def resolved(self, relay: str, args: dict[str, Any]) -> None:
        named = next((name for name in ID_ARGUMENTS if isinstance(args.get(name), str) and args[name]), None)
        if named is None:
            self.target = relay
        else:
            self.target = f"{relay}/{shown_id(args[named], short=named in SESSION_ARGUMENTS)}"


def shown_id(value: str, *, short: bool = False) -> str:
    """An id as the log shows it (a session's by its short form when `short`), anything else `?`."""
    value = value.strip()
    if not _ID_SHAPE.fullmatch(value):
        return "?"
    return value[: defaults.SHORT_ID_CHARS] if short else value


def log_call(ctx: CallContext, trace: CallTrace, body: dict[str, Any], seconds: float) -> None:
    """The call's line, and its count and duration for `/metrics` (by action, outcome and way)."""
    outcome = outcome_of(body)
    metrics.call_answered(trace.action, outcome, ctx.via, seconds)
    calling = ctx.caller
    caller = shown_id(calling.session_id, short=True)
    logs.call_line("call", {
        "relay": _relay_name(ctx),
        "caller": f"{calling.relay}/{caller}" if calling.relay else caller,
        "title": calling.session_title[:TITLE_CHARS],
        "via": ctx.via,
        "action": trace.action,
        "target": trace.target,
        "outcome": outcome,
        "duration_ms": round(seconds * 1000),
    })


def outcome_of(body: dict[str, Any]) -> str:
    """`ok`, or the answer's error code."""
    return "ok" if body.get("ok") else str(body.get("code") or "error")


def _relay_name(ctx: CallContext) -> str:
    """The owner's name for this relay; the configured one when the settings cannot be read (a
    call refused because the database is busy is logged too)."""
    try:
        return ctx.relay_name
    except peewee.PeeweeException:
        return ctx.runtime.config.relay_name
