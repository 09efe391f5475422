"""The one dispatcher: the SPEC §5 check order and the result envelope (SPEC §3).

validate arguments → (list_relays answers here) → resolve relay → LOCAL_DISABLED → unlock
→ level → INBOUND_DISABLED → OWN_SESSION → hop limit → rate limit → the handler, which
makes the action's own checks (NESTED_SESSION / SESSION_LIMIT → model/group/folder →
approval) before it changes anything. A call refused at any step changes nothing.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from oar.actions.args import check_arguments
from oar.actions.catalog import load_actions
from oar.actions.context import CallContext
from oar.actions.registry import ActionSpec
from oar.core.errors import ActionError, invalid
from oar.core.fields import unstorable_text
from oar.core.ratelimit import RateLimiter
from oar.sessions import sessions as session_rules

log = logging.getLogger(__name__)

# Actions that still work on this relay while agent sessions are off (SPEC §4).
WORK_WHILE_DISABLED = {"list_relays", "relay_info", "unsubscribe", "list_subscriptions", "unschedule", "list_schedules"}
# ...and these too, about the calling conversation's own questions.
OWN_QUESTIONS = {"ask", "list_questions", "withdraw"}


def dispatch(ctx: CallContext, payload: Any) -> tuple[int, dict[str, Any]]:
    """Run one relay_tool call; returns the HTTP status and the JSON result."""
    try:
        return 200, _run(ctx, payload)
    except ActionError as error:
        return error.status, error.to_dict()
    except Exception:
        reference = secrets.token_hex(4)
        action_name = payload.get("action") if isinstance(payload, dict) else None
        log.exception("relay_tool %s failed (log reference %s)", action_name, reference)
        error = ActionError(
            "REMOTE_RELAY_INTERNAL",
            f"The relay failed while running {action_name or 'the call'} (log reference {reference}). "
            "Its changes were rolled back.",
        )
        return error.status, error.to_dict()


def _run(ctx: CallContext, payload: Any) -> dict[str, Any]:
    actions = load_actions()
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object with an action and its arguments. Nothing was done.")
    if unstorable_text(payload):
        named = payload.get("action")
        known = actions.get(named.strip()) if isinstance(named, str) else None
        raise invalid(
            "The call holds text the relay cannot store (a NUL character or a lone surrogate such as \\ud800). "
            + ((known.nothing if known else "") or "Nothing was done.")
        )
    name = payload.get("action")
    if not isinstance(name, str) or not name.strip():
        raise invalid(f"Give action: one of {', '.join(sorted(actions))}. Nothing was done.")
    spec = actions.get(name.strip())
    if spec is None:
        raise ActionError(
            "REMOTE_RELAY_UNKNOWN_ACTION",
            f'There is no action "{name[:80]}". Actions: {", ".join(sorted(actions))}. Nothing was done.',
            actions=sorted(actions),
        )
    args, ignored = check_arguments(spec, payload)
    if spec.name != "list_relays":
        relay = _resolve_relay(ctx, spec, args)
        _check_enabled(ctx, spec, args, relay)
        _check_unlocked(ctx, relay)
        _check_level(ctx, spec, relay)
        _check_inbound(ctx, spec)
        _check_own_session(ctx, spec, args)
        _check_hops(ctx, spec, relay)
        _check_rate(ctx, spec, args)
    result = spec.handler(ctx, args)
    envelope = {"ok": True, "relay": ctx.relay_name, "summary": result.pop("summary"), **result}
    if ignored:
        envelope["ignored"] = ignored
    return envelope


def _resolve_relay(ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> str:
    """Which relay the call acts on. Only this relay exists until relays are paired."""
    relay = args.get("relay")
    if relay is None:
        if spec.relay_optional:
            return "this"
        raise invalid(
            f'{spec.name} needs relay: "this" or a relay\'s name from list_relays. {spec.nothing}'.strip()
        )
    wanted = relay.strip()
    if wanted.lower() == "this" or wanted.casefold() == ctx.relay_name.casefold():
        return "this"
    raise ActionError(
        "REMOTE_RELAY_UNKNOWN",
        f'No relay is named "{wanted[:100]}". Relays: "{ctx.relay_name}" (this relay). {spec.nothing}'.strip(),
        relays=[{"name": ctx.relay_name, "self": True}],
    )


def _check_enabled(ctx: CallContext, spec: ActionSpec, args: dict[str, Any], relay: str) -> None:
    if relay != "this" or ctx.settings["agent_sessions_enabled"] or spec.name in WORK_WHILE_DISABLED:
        return
    if spec.name in OWN_QUESTIONS and not _about_another_session(ctx, spec, args):
        return
    raise ActionError(
        "REMOTE_RELAY_LOCAL_DISABLED",
        f'Agents may not start or use sessions on relay "{ctx.relay_name}": the owner\'s setting '
        '"Agents may start and use sessions on this relay" is off. Ask the user to turn it on. '
        f"{spec.nothing or 'Nothing was done.'}",
    )


def _check_unlocked(ctx: CallContext, relay: str) -> None:
    """Paired relays are locked per conversation until mentioned; this relay never is."""
    assert relay == "this"


def _check_level(ctx: CallContext, spec: ActionSpec, relay: str) -> None:
    """The "Agents may" level of a paired relay; this relay always counts as full."""
    assert relay == "this"


def _check_inbound(ctx: CallContext, spec: ActionSpec) -> None:
    """Prompts from other relays' agents; a local caller is never one."""


def _check_own_session(ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> None:
    if spec.not_own_session and session_rules.is_same(args.get(spec.not_own_session), ctx.caller):
        raise ActionError(
            "REMOTE_RELAY_OWN_SESSION",
            f"{spec.name} cannot target this agent's own conversation. {spec.nothing}".strip(),
        )


def _check_hops(ctx: CallContext, spec: ActionSpec, relay: str) -> None:
    """A prompt crosses at most two relays; acting on this relay crosses none."""
    assert relay == "this"


def _about_another_session(ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> bool:
    """Whether an action that is a write only about another session (`ask`) names one."""
    named = args.get(spec.writes_with) if spec.writes_with else None
    return bool(named) and not session_rules.is_same(named, ctx.caller)


def _check_rate(ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> None:
    settings = ctx.settings
    limiter = RateLimiter(ctx.runtime.redis, ctx.runtime.config.namespace, ctx.runtime.time("RATE_WINDOW_SECONDS"))
    wait = limiter.check_and_record(
        ctx.caller.id,
        is_write=spec.writes or _about_another_session(ctx, spec, args),
        calls_per_window=settings["rate_calls_per_minute"],
        writes_per_window=settings["rate_writes_per_minute"],
    )
    if wait is not None:
        raise ActionError(
            "REMOTE_RELAY_RATE_LIMITED",
            f"This conversation made too many relay_tool calls in the last minute "
            f"(limits: {settings['rate_calls_per_minute']} calls, {settings['rate_writes_per_minute']} writes). "
            f"Try again in {wait} s. {spec.nothing or 'Nothing was done.'}",
            retryAfterSeconds=wait,
        )
