"""The one dispatcher: the check order (docs/calling.md#check-order) and the result envelope (docs/calling.md).

validate arguments → (list_relays answers here) → resolve relay (the `Target`) → the named
checks of `checks.CHECKS` (LOCAL_DISABLED → unlock → level → INBOUND_DISABLED → OWN_SESSION
→ hop limit → rate limit) → a wait slot for a call that may wait (`REMOTE_RELAY_TOO_MANY_WAITS`)
→ `target.run`, whose handler makes the action's own checks (NESTED_SESSION / SESSION_LIMIT →
model/group/folder → approval) before it changes anything. A call refused at any step changes
nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from oar.actions.args import check_arguments
from oar.actions.call_log import CallTrace, log_call, outcome_of
from oar.actions.catalog import load_actions
from oar.actions.checks import Call, run_checks
from oar.actions.context import CallContext
from oar.actions.resolving import resolve_target
from oar.actions.targets import Target, ThisRelay
from oar.core import defaults, tracing
from oar.core.db import short_read
from oar.core.errors import ActionError, invalid, refusals_ending
from oar.core.failures import unexpected
from oar.core.fields import refuse_unstorable
from oar.core.wait_slots import wait_slot
from oar.core.waiting import CallerGone

log = logging.getLogger(__name__)


def dispatch(ctx: CallContext, payload: Any) -> tuple[int, dict[str, Any]]:
    """Run one relay_tool call; returns the HTTP status and the JSON result. Every call, refused
    or not, writes one line to the log and is counted (`call_log`); with traces on it is a span,
    continuing the context the call came with (`ctx.trace_carrier`) or the current one."""
    trace = CallTrace()
    started = time.monotonic()
    if tracing.on():
        with tracing.span(*call_span(ctx)) as span:
            status, body = _answer(ctx, payload, trace)
            note_call_span(span, trace, body)
    else:
        status, body = _answer(ctx, payload, trace)
    log_call(ctx, trace, body, time.monotonic() - started)
    return status, body


def call_span(ctx: CallContext) -> tuple[str, str, dict[str, Any], dict[str, str] | None]:
    """The span of an agent call, after the GenAI and MCP conventions: a call from outside is the
    server's `tools/call relay_tool`, a model's call in a turn `execute_tool relay_tool`."""
    attributes = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "relay_tool",
        "gen_ai.conversation.id": ctx.caller.session_id, "oar.via": ctx.via,
    }
    if ctx.caller.relay:
        attributes["oar.caller.relay"] = ctx.caller.relay
    if ctx.via == "provider":
        return "execute_tool relay_tool", "internal", attributes, ctx.trace_carrier
    if ctx.via == "mcp":
        attributes["mcp.method.name"] = "tools/call"
    return "tools/call relay_tool", "server", attributes, ctx.trace_carrier


def note_call_span(span: Any, trace: CallTrace, body: dict[str, Any]) -> None:
    if span is None:
        return
    tracing.note(span, {"oar.action": trace.action, "oar.target": trace.target, "oar.outcome": outcome_of(body)})
    if not body.get("ok"):
        tracing.failed(span, outcome_of(body))


def _answer(ctx: CallContext, payload: Any, trace: CallTrace) -> tuple[int, dict[str, Any]]:
    try:
        return 200, _run(ctx, payload, trace)
    except ActionError as error:
        return error.status, error.to_dict()
    except CallerGone:  # nobody reads this answer; what the call started goes on
        log.info("relay_tool %s: the caller stopped waiting", _action_name(payload))
        gone = ActionError(
            "REMOTE_RELAY_CALLER_GONE", "The caller stopped waiting; what the call started goes on (call wait to see it)."
        )
        return gone.status, gone.to_dict()
    except Exception as error:  # noqa: BLE001 - `unexpected` logs it with its traceback
        # Here, not left to the web app's handler: providers' tool loops and MCP call `dispatch` too.
        failed = unexpected(error, f"relay_tool {_action_name(payload)}", log, running=_action_name(payload) or "the call")
        return failed.status, failed.to_dict()


def may_wait(call: Call) -> bool:
    """Whether the call holds its caller's thread in a wait, and so takes a wait slot
    (docs/limits.md#waits-at-once): an HTTP or MCP call that asks to wait for a reply. (A call
    that waits on an approval card takes one when it asks for the card, `cards.approve`.)"""
    if not call.ctx.can_wait or "wait_seconds" not in call.spec.params:
        return False
    requested = call.args.get("wait_seconds")
    return bool((defaults.DEFAULT_WAIT_SECONDS if requested is None else requested) > 0)


def check_only(ctx: CallContext, action: str, args: dict[str, Any], *, counted: bool = True) -> None:
    """A call's argument check and the named checks (`checks.CHECKS`), without running it: for a
    tool set that reads the store itself under the same rules (OpenClaw's sessions_list), or that
    makes its own checks before it dispatches the call (`counted=False`: the rate limit is left to
    that call, so it counts once; docs/openclaw.md). Raises `ActionError` as the call would."""
    spec = load_actions()[action]
    checked, _ignored = check_arguments(spec, {"action": action, "relay": "this", **args})
    target = resolve_target(ctx, spec, checked)
    run_checks(
        Call(ctx=ctx, caller=ctx.caller, target=target, spec=spec, args=checked),
        skip=() if counted else ("rate limit",),
    )


def short_read_gate(payload: Any) -> contextlib.AbstractContextManager[Any]:
    """What a call runs under, its caller's token look-up included: `db.short_read` for a
    short-read action (`ActionSpec.short_read`) on this relay, else nothing. Bad input is left
    to `dispatch`; it is refused the same under either."""
    name = _action_name(payload)
    spec = load_actions().get(name) if isinstance(name, str) else None
    if spec is None or not spec.short_read or payload.get("relay", "this") != "this":
        return contextlib.nullcontext()
    return short_read()


def _action_name(payload: Any) -> Any:
    return payload.get("action") if isinstance(payload, dict) else None


def _run(ctx: CallContext, payload: Any, trace: CallTrace) -> dict[str, Any]:
    actions = load_actions()
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object with an action and its arguments. Nothing was done.")
    name = payload.get("action")
    known = actions.get(name.strip()) if isinstance(name, str) else None
    # Its action's own "nothing" when the action is known: what was not done names the action.
    refuse_unstorable(payload, "The call holds", (known.nothing if known else "") or "Nothing was done.")
    if not isinstance(name, str) or not name.strip():
        raise invalid(f"Give action: one of {', '.join(sorted(actions))}. Nothing was done.")
    spec = actions.get(name.strip())
    if spec is None:
        raise ActionError(
            "REMOTE_RELAY_UNKNOWN_ACTION",
            f'There is no action "{name[:80]}". Actions: {", ".join(sorted(actions))}. Nothing was done.',
            actions=sorted(actions),
        )
    trace.action = spec.name
    args, ignored = check_arguments(spec, payload)
    if spec.name == "list_relays":  # it answers here, before any relay is resolved
        target: Target = ThisRelay.of(ctx)
        trace.resolved(target.name, args)
        result = target.run(ctx, spec, args)
    else:
        target = resolve_target(ctx, spec, args)
        trace.resolved(target.name, args)
        call = Call(ctx=ctx, caller=ctx.caller, target=target, spec=spec, args=args)
        run_checks(call)
        holding = wait_slot(ctx.runtime, ctx.caller_session.id, call.nothing) if may_wait(call) else contextlib.nullcontext()
        # The action's refusals end with its sentence ("Nothing was sent."), added here once.
        with holding, refusals_ending(spec.nothing):
            result = target.run(ctx, spec, args)
    envelope = {"ok": True, "relay": target.name, "summary": result.pop("summary"), **result}
    if ignored:
        envelope["ignored"] = ignored
    return envelope
