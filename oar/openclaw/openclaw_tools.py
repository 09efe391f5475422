"""OpenClaw's session tools on this relay's sessions (docs/openclaw.md): sessions_list,
sessions_history, sessions_send and sessions_spawn, mapped onto relay_tool's dispatcher.

sessions_send is the dispatcher's `send`, sessions_spawn its `create_session`, sessions_history
its `read_session`; sessions_list passes the dispatcher's checks (`check_only`) and reads the
sessions itself. So agent sessions on/off, rate limits, loop protection, four at work, approval
cards and the nesting rule apply as they do to relay_tool, and a refusal keeps the relay's
sentence in the reference's result shape: `{status: "forbidden" | "error", error, code}`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from oar.actions.catalog import load_actions
from oar.actions.context import CallContext
from oar.actions.dispatch import check_only, dispatch
from oar.core import defaults
from oar.core.errors import ActionError, invalid
from oar.core.failures import unexpected
from oar.core.fields import check_fields, is_empty, refuse_unstorable
from oar.core.models import Message, Session
from oar.core.shapes import WAIT_SECONDS
from oar.core.statuses import IN_PROGRESS_TURN, TurnStatus
from oar.core.waiting import CallerGone
from oar.openclaw import access, keys, openclaw_runs
from oar.openclaw.params import PARAMS
from oar.sessions import sessions as session_store

log = logging.getLogger(__name__)

Handler = Callable[[CallContext, dict[str, Any], str], dict[str, Any]]
# Refusals whose HTTP status is 403 are `forbidden` in the reference's shape; the others `error`.
FORBIDDEN_STATUS = 403
TOOLS_WITH_RUNS = ("sessions_send", "sessions_spawn")


def call(ctx: CallContext, name: str, arguments: Any) -> tuple[int, dict[str, Any]]:
    """Run one tool call as the calling session; returns the HTTP status and the JSON result."""
    run_id = str(uuid.uuid4())
    try:
        handler = HANDLERS.get(name)
        if handler is None:
            raise invalid(f"There is no tool {name[:80]!r}. Tools: {', '.join(HANDLERS)}.")
        if not isinstance(arguments, dict):
            raise invalid("The arguments must be a JSON object.")
        refuse_unstorable(arguments, "The call holds")
        return 200, {"ok": True, **handler(ctx, arguments, run_id)}
    except ActionError as error:
        return error.status, refused(error, run_id if name in TOOLS_WITH_RUNS else None)
    except CallerGone:
        gone = ActionError("REMOTE_RELAY_CALLER_GONE", "The caller stopped waiting; what the call started goes on.")
        return gone.status, refused(gone, run_id)
    except Exception as error:  # noqa: BLE001 - `unexpected` logs it with its traceback
        failed = unexpected(error, f"openclaw {name}", log, running=name)
        return failed.status, refused(failed, None)


def refused(error: ActionError, run_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"ok": False, **({"runId": run_id} if run_id else {})}
    body.update(status="forbidden" if error.status == FORBIDDEN_STATUS else "error", error=error.message, code=error.code)
    body.update(error.extra)
    return body


def failed(body: dict[str, Any]) -> bool:
    """Whether a result is a refusal or a failure (MCP's `isError`)."""
    return body.get("status") in ("error", "forbidden")


def _from_dispatch(body: dict[str, Any]) -> ActionError:
    extra = {key: value for key, value in body.items() if key not in ("ok", "code", "error")}
    return ActionError(body["code"], body["error"], **extra)


def _dispatched(ctx: CallContext, payload: dict[str, Any]) -> dict[str, Any]:
    _status, body = dispatch(ctx, {"relay": "this", **payload})
    if not body.get("ok"):
        raise _from_dispatch(body)
    return body


def _checked(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    args, _ignored = check_fields(name, PARAMS[name], raw, strict=False, nothing="")
    return args


def _ms(moment: Any) -> int:
    """A naive UTC datetime as milliseconds since the epoch (the reference's times)."""
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000) if moment is not None else 0


def _iso_ms(text: str | None) -> int:
    return _ms(datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)) if text else 0


def _sessions_on(ctx: CallContext) -> None:
    """The dispatcher's checks before the tool's own lookups (agent sessions on, first of all); the
    call it then dispatches runs them again with its own action, and counts toward the rate limit."""
    check_only(ctx, "list_sessions", {}, counted=False)


# sessions_list ---------------------------------------------------------------------------------------


def sessions_list(ctx: CallContext, raw: dict[str, Any], _run_id: str) -> dict[str, Any]:
    args = _checked("sessions_list", raw)
    kinds = args.get("kinds")
    if kinds is not None and not all(isinstance(kind, str) and kind in keys.KINDS for kind in kinds):
        raise invalid(f"sessions_list: kinds must be a list of {', '.join(keys.KINDS)}.")
    check_only(ctx, "list_sessions", {})
    caller = ctx.caller_session
    limit = args.get("limit", defaults.OPENCLAW_LIST_DEFAULT)
    query = Session.select().where(Session.live(archived=False))
    visible = access.view_of(caller, ctx.settings).where()
    if visible is not None:
        query = query.where(visible)
    if args.get("activeMinutes"):
        query = query.where(Session.last_activity_at >= ctx.now - timedelta(minutes=args["activeMinutes"]))
    # Kinds are known once keyed: read enough rows to fill the page after the filter.
    rows = list(query.order_by(Session.last_activity_at.desc(), Session.id.desc()).limit(limit if not kinds else limit * 20))
    keyed = keys.keyed_many(rows, caller)
    listed = [keyed[row.id] for row in rows if not kinds or keyed[row.id].kind in kinds][:limit]
    overrides = access.overrides([entry.session.id for entry in listed])
    aborted = _aborted_last_run([entry.session.id for entry in listed])
    result = []
    for entry in listed:
        session = entry.session
        row: dict[str, Any] = {
            "key": entry.key, "kind": entry.kind, "channel": entry.channel, "displayName": session.title,
            "updatedAt": _ms(session.last_activity_at), "sessionId": session.id, "model": session.model,
            "contextTokens": None, "totalTokens": None, "thinkingLevel": session.effort,
            "abortedLastRun": session.id in aborted, "sendPolicy": overrides.get(session.id),
            "lastChannel": entry.channel, "deliveryContext": {"channel": entry.channel, "to": entry.key, "accountId": None},
        }
        if args.get("messageLimit"):
            row["messages"] = _records(ctx, session, args["messageLimit"], include_tools=False, dispatched=False)
        result.append(row)
    return {"count": len(result), "sessions": result}


def _aborted_last_run(session_ids: list[str]) -> set[str]:
    """Sessions whose last finished turn was stopped or failed."""
    aborted: set[str] = set()
    for session_id in session_ids:
        last = (
            Message.select(Message.status).where(
                (Message.session == session_id) & Message.status.in_((TurnStatus.DONE, TurnStatus.FAILED, TurnStatus.STOPPED))
            ).order_by(Message.seq.desc()).first()
        )
        if last is not None and last.status in (TurnStatus.FAILED, TurnStatus.STOPPED):
            aborted.add(session_id)
    return aborted


# sessions_history ------------------------------------------------------------------------------------


def sessions_history(ctx: CallContext, raw: dict[str, Any], _run_id: str) -> dict[str, Any]:
    args = _checked("sessions_history", raw)
    _sessions_on(ctx)
    target = keys.resolve(args["sessionKey"], ctx.caller_session, ctx.relay_name)
    access.check_visible(ctx.caller_session, target, ctx.settings, "history")
    limit = args.get("limit", defaults.OPENCLAW_HISTORY_DEFAULT)
    records = _records(ctx, target, limit, include_tools=bool(args.get("includeTools")), dispatched=True)
    return {"sessionKey": keys.keyed(target, ctx.caller_session).key, "sessionId": target.id, "messages": records}


def _records(ctx: CallContext, session: Session, limit: int, *, include_tools: bool, dispatched: bool) -> list[dict[str, Any]]:
    """The last messages as role/content records, through read_session (`dispatched`: as a call of
    its own, checked and counted; else as part of the sessions_list call that was)."""
    payload = {"action": "read_session", "session": session.id, "last": limit,
               "max_chars": defaults.READ_SESSION_MAX_CHARS_RANGE[1], "include_activity": include_tools}
    if dispatched:
        body = _dispatched(ctx, payload)
    else:
        body = _read_session_entries(ctx, payload)
    messages = body["messages"]
    provenance = openclaw_runs.provenance_of([message["id"] for message in messages])
    records: list[dict[str, Any]] = []
    for message in messages:
        record: dict[str, Any] = {
            "id": message["id"], "role": "assistant" if message["role"] == "assistant" else "user",
            "content": [{"type": "text", "text": message["text"]}], "timestamp": _iso_ms(message["createdAt"]),
        }
        if message["role"] not in ("user", "assistant"):
            record["relayRole"] = message["role"]
        if message["id"] in provenance:
            record["provenance"] = provenance[message["id"]]
        elif message.get("from"):
            record["provenance"] = {"kind": message["from"]["kind"]}
        for field in ("status", "model", "error"):
            if message.get(field):
                record[field] = message[field]
        records.append(record)
        if include_tools:
            records.extend(
                {"role": "toolResult", "content": [{"type": "text", "text": str(line)}], "turnId": message["id"]}
                for line in message.get("activities") or []
            )
    return records


def _read_session_entries(ctx: CallContext, payload: dict[str, Any]) -> dict[str, Any]:
    """read_session's handler as one part of an already checked call (no second rate count)."""
    return load_actions()["read_session"].handler(ctx, {key: value for key, value in payload.items() if key != "action"})


# sessions_send -----------------------------------------------------------------------------------------


def _non_negative_int(value: Any) -> bool:
    return not isinstance(value, bool) and (
        (isinstance(value, int) and value >= 0) or (isinstance(value, float) and value.is_integer() and value >= 0)
    )


def sessions_send(ctx: CallContext, raw: dict[str, Any], run_id: str) -> dict[str, Any]:
    # The reference's own texts for these, before the table's checks.
    if is_empty(raw.get("message")) or not isinstance(raw.get("message"), str):
        raise invalid("message required")
    if raw.get("timeoutSeconds") is not None and not _non_negative_int(raw["timeoutSeconds"]):
        raise invalid("timeoutSeconds must be a non-negative integer")
    args = _checked("sessions_send", raw)
    if not args.get("sessionKey") and not args.get("label"):
        raise invalid("Either sessionKey or label is required")
    caller = ctx.caller_session
    _sessions_on(ctx)
    if args.get("sessionKey"):
        target = keys.resolve(args["sessionKey"], caller, ctx.relay_name)
    else:
        candidates = Session.select().where(Session.live(archived=False) & (Session.id != caller.id))
        visible = access.view_of(caller, ctx.settings).where()
        target = keys.by_label(args["label"], list(candidates if visible is None else candidates.where(visible)))
    if target.id == caller.id:
        raise ActionError("REMOTE_RELAY_OWN_SESSION", "sessions_send cannot target the calling session; use your own reply instead")
    access.check_visible(caller, target, ctx.settings, "send")
    keyed = keys.keyed(target, caller)
    if not access.send_allowed(keyed, ctx.settings["send_policy"], access.overrides([target.id]).get(target.id)):
        raise ActionError("REMOTE_RELAY_FORBIDDEN", access.SEND_DENIED)
    timeout = int(args.get("timeoutSeconds", defaults.OPENCLAW_SEND_TIMEOUT_SECONDS))
    source = keys.source_key(caller)
    body = _dispatched(ctx, {
        "action": "send", "session": target.id, "text": openclaw_runs.inter_session_text(source, openclaw_runs.SEND_TOOL, args["message"]),
        "wait_seconds": min(timeout, WAIT_SECONDS.maximum or timeout),
    })
    openclaw_runs.start(ctx.runtime, {
        "id": run_id, "kind": "send", "requester_session_id": caller.id, "requester_runs": ctx.via == "provider",
        "target_session_id": target.id, "request_text": args["message"], "request_message_id": body["message_id"],
        "max_ping_pong": _ping_pong_turns(ctx, keyed),
    })
    result: dict[str, Any] = {"runId": run_id, "sessionKey": keyed.key}
    status = body["status"]
    if timeout == 0:  # fire and forget: the run is queued, whatever a fast worker did meanwhile
        result.update(status="accepted")
    elif status == TurnStatus.DONE:
        result.update(status="ok", reply=body["reply"]["text"])
    elif status in (TurnStatus.FAILED, TurnStatus.STOPPED, TurnStatus.CANCELLED):
        result.update(status="error", error=body.get("error") or body.get("note") or f"The run ended {status}.")
    else:
        waited = "is waiting for an answer to a question" if status == TurnStatus.WAITING_FOR_ANSWER else "did not reply"
        result.update(status="timeout", error=(
            f"The session {waited} within {timeout} s; the run goes on (read sessions_history later)."
        ))
        if status in IN_PROGRESS_TURN or status == TurnStatus.WAITING_FOR_ANSWER:
            result["messageId"] = body["message_id"]
    if body.get("note") and result["status"] != "error":
        result["note"] = body["note"]
    return result


def _ping_pong_turns(ctx: CallContext, target: keys.Keyed) -> int:
    """The owner's maxPingPongTurns; 0 for a schedule's conversation (either side)."""
    if target.kind == "cron" or (ctx.turn is not None and ctx.turn.from_kind == "schedule"):
        return 0
    return int(ctx.settings["max_ping_pong_turns"])


# sessions_spawn --------------------------------------------------------------------------------------


def sessions_spawn(ctx: CallContext, raw: dict[str, Any], run_id: str) -> dict[str, Any]:
    args = _checked("sessions_spawn", raw)
    caller = ctx.caller_session
    _sessions_on(ctx)
    agent_id = (args.get("agentId") or caller.provider).strip()
    allowed = ctx.settings["spawn_allow_agents"]
    if agent_id != caller.provider and "*" not in allowed and agent_id not in allowed:
        shown = ", ".join(dict.fromkeys([caller.provider, *allowed]))
        raise ActionError("REMOTE_RELAY_FORBIDDEN", f"agentId is not allowed for sessions_spawn (allowed: {shown})")
    if args.get("sandbox") == "require" and ctx.settings["tasks_without_sandbox"]:
        raise ActionError(
            "REMOTE_RELAY_FORBIDDEN",
            'sessions_spawn sandbox="require" needs a sandboxed target: this relay runs tasks outside its sandbox.',
        )
    child_key = keys.spawned_key(agent_id, str(uuid.uuid4()))
    label = (args.get("label") or "").strip()
    source = keys.source_key(caller)
    payload: dict[str, Any] = {
        "action": "create_session", "provider": agent_id, "wait_seconds": 0,
        "text": openclaw_runs.inter_session_text(source, openclaw_runs.SPAWN_TOOL, args["task"]),
        "title": label or session_store.title_from(args["task"]),
    }
    if args.get("model"):
        payload["model"] = args["model"]
    if args.get("thinking"):
        payload["effort"] = args["thinking"]
    body = _dispatched(ctx, payload)
    timeout = args.get("runTimeoutSeconds") or 0
    openclaw_runs.start(ctx.runtime, {
        "id": run_id, "kind": "spawn", "requester_session_id": caller.id, "requester_runs": ctx.via == "provider",
        "target_session_id": body["session"], "child_key": child_key, "agent_id": agent_id, "label": label or None,
        "mode": args.get("mode", "run"), "cleanup": args.get("cleanup", "keep"), "request_text": args["task"],
        "request_message_id": body["message_id"],
        "deadline_at": ctx.now + timedelta(seconds=timeout) if timeout else None,
    })
    return {"status": "accepted", "runId": run_id, "childSessionKey": child_key}


HANDLERS: dict[str, Handler] = {
    "sessions_list": sessions_list,
    "sessions_history": sessions_history,
    "sessions_send": sessions_send,
    "sessions_spawn": sessions_spawn,
}
