"""The checks every call passes before its action runs (docs/calling.md#check-order), in their order.

Each check is a named function of the `Call` that raises `ActionError` to refuse it and
changes nothing. What depends on where the action runs (is the relay unlocked, the "Agents
may" level there, does it take prompts from this caller, how many relays a prompt crosses to
reach it) is asked of the `Target`: for this relay every one of those passes because
`ThisRelay` says so, and a paired relay answers them for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oar.actions.context import CallContext, Caller
from oar.actions.registry import LEVELS, ActionSpec
from oar.actions.targets import Target
from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.ratelimit import refuse_over_limit
from oar.sessions import sessions as session_rules

# Actions that still work on this relay while agent sessions are off (docs/rules.md#agent-sessions-on-or-off).
WORK_WHILE_DISABLED = {"list_relays", "relay_info", "unsubscribe", "list_subscriptions", "unschedule", "list_schedules"}
# ...and these too, about the calling conversation's own questions.
OWN_QUESTIONS = {"ask", "list_questions", "withdraw"}
# What other relays' agents could change or watch on a relay that does not accept their
# prompts (docs/relays.md); `ask` too when it names a session.
REFUSED_WHEN_INBOUND_DISABLED = {
    "send", "create_session", "update_session", "answer_question", "stop", "archive", "subscribe",
    "transfer_subscriptions",
}
# The "Agents may" levels from lowest to highest; "off" allows nothing.
LEVEL_RANKS = ("off", *LEVELS)


@dataclass(frozen=True)
class Call:
    """One call on its way to its action: who calls, where it runs, what, with which arguments."""

    ctx: CallContext  # this relay: its runtime, settings and clock
    caller: Caller
    target: Target
    spec: ActionSpec
    args: dict[str, Any]

    @property
    def nothing(self) -> str:
        return self.spec.nothing or "Nothing was done."


@dataclass(frozen=True)
class Check:
    name: str  # the step as docs/calling.md#check-order names it
    refuse: Callable[[Call], None]  # raises ActionError when the call may not go on


def local_disabled(call: Call) -> None:
    """The owner's "Agents may start and use sessions on this relay" (docs/rules.md#one-level)."""
    if call.target.agent_sessions_enabled or call.spec.name in WORK_WHILE_DISABLED:
        return
    if call.spec.name in OWN_QUESTIONS and not _about_another_session(call):
        return
    raise ActionError(
        "REMOTE_RELAY_LOCAL_DISABLED",
        f'Agents may not start or use sessions on relay "{call.target.name}": the owner\'s setting '
        '"Agents may start and use sessions on this relay" is off. Ask the user to turn it on. '
        f"{call.nothing}",
    )


def unlock(call: Call) -> None:
    """A paired relay is locked in each conversation until the owner mentions it (docs/relays.md)."""
    if call.target.unlocked_by(call.caller) is None:
        name = call.target.name
        raise ActionError(
            "REMOTE_RELAY_LOCKED",
            f'Relay "{name}" is locked in this conversation: ask the user to mention @{name} in a message. '
            f"{call.nothing}",
        )


def level(call: Call) -> None:
    """The "Agents may" level of the relay the action runs on (docs/relays.md)."""
    needed = call.spec.level
    allowed = call.target.level
    if needed is None or LEVEL_RANKS.index(allowed) >= LEVEL_RANKS.index(needed):
        return
    raise ActionError(
        "REMOTE_RELAY_FORBIDDEN",
        f'Agents may "{allowed}" on relay "{call.target.name}"; {call.spec.name} needs "{needed}". {call.nothing}',
    )


def inbound_disabled(call: Call) -> None:
    """Prompts from other relays' agents, where the relay does not take them (docs/relays.md)."""
    if call.target.accepts(call.caller):
        return
    if call.spec.name in REFUSED_WHEN_INBOUND_DISABLED or (call.spec.writes_with and _about_another_session(call)):
        raise ActionError(
            "REMOTE_INBOUND_DISABLED",
            f'Relay "{call.target.name}" does not accept prompts from other relays\' agents (reads still work). '
            f"{call.nothing}",
        )


def own_session(call: Call) -> None:
    """An action that must not target the calling conversation itself."""
    own = call.caller.session
    if call.spec.not_own_session and own is not None and session_rules.is_same(call.args.get(call.spec.not_own_session), own):
        raise ActionError(
            "REMOTE_RELAY_OWN_SESSION",
            f"{call.spec.name} cannot target this agent's own conversation. {call.spec.nothing}".strip(),
        )


def hop_limit(call: Call) -> None:
    """A prompt crosses at most two relays unless the owner unlocked the next one by mention
    (docs/relays.md); reads and waits are never limited, and acting on this relay crosses none."""
    crossings = call.target.crossings
    if crossings == 0 or not _is_write(call):
        return
    hops = call.caller.hops()
    if hops + crossings > defaults.MAX_HOPS and call.target.unlocked_by(call.caller) != "owner":
        name = call.target.name
        raise ActionError(
            "REMOTE_RELAY_HOP_LIMIT",
            f'This prompt has already crossed {hops} relays and is not passed on to relay "{name}" '
            f"unless the user mentions @{name}. {call.nothing}",
        )


def rate_limit(call: Call) -> None:
    """Calls and writes per sliding minute per conversation (owner settings)."""
    refuse_over_limit(
        call.ctx.runtime, call.caller.session_id, is_write=_is_write(call), nothing=call.nothing, settings=call.ctx.settings
    )


# The order of docs/calling.md#check-order, after the arguments are valid and the relay is resolved; the
# action's own checks (NESTED_SESSION / SESSION_LIMIT → model/group/folder → approval) follow
# in its handler, before it changes anything.
CHECKS: tuple[Check, ...] = (
    Check("LOCAL_DISABLED", local_disabled),
    Check("unlock", unlock),
    Check("level", level),
    Check("INBOUND_DISABLED", inbound_disabled),
    Check("OWN_SESSION", own_session),
    Check("hop limit", hop_limit),
    Check("rate limit", rate_limit),
)


def run_checks(call: Call, skip: tuple[str, ...] = ()) -> None:
    """Raise the first refusal of the call, in the order of CHECKS (but the ones named in `skip`)."""
    for check in CHECKS:
        if check.name not in skip:
            check.refuse(call)


def _is_write(call: Call) -> bool:
    return call.spec.writes or _about_another_session(call)


def _about_another_session(call: Call) -> bool:
    """Whether an action that is a write only about another session (`ask`) names one."""
    named = call.args.get(call.spec.writes_with) if call.spec.writes_with else None
    own = call.caller.session
    return bool(named) and (own is None or not session_rules.is_same(named, own))
