"""list_sessions and read_session (docs/sessions.md#list_sessions)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import questions
from oar.background import task_views
from oar.core import defaults
from oar.core.errors import invalid, not_found
from oar.core.fields import Param
from oar.core.models import Message, Session
from oar.core.prepared import Prepared, as_stored
from oar.core.shapes import RELAY, SESSION
from oar.core.statuses import OPEN_TURN, TaskStatus, TurnStatus
from oar.core.timeutil import iso
from oar.core.words import plural
from oar.sessions import groups, session_state, sessions
from oar.turns.turns import MESSAGE_COLUMNS, badge, clip_reply

SCOPES = ("active", "recent", "all", "archived")


def encode_cursor(session: Any) -> str:
    moment = session.last_activity_at  # a datetime, or its stored text (`_LISTED_COLUMNS`)
    moment = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    raw = json.dumps([moment.isoformat(), session.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        moment, session_id = json.loads(raw)
        return datetime.fromisoformat(moment), str(session_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise invalid("list_sessions: cursor is not one this relay gave out; call without cursor to start over.") from None


# The columns list_sessions shows (`sessions.listed`, the cursor, the group field); the time is
# only shown, so it comes as stored (`as_stored`, after the fields).
_LISTED_COLUMNS = (
    Session.id, Session.title, Session.provider, Session.model, Session.cwd,
    Session.message_count, Session.created_by_session, Session.created_by_title, Session.may_create_sessions,
    Session.archived, Session.group, Session.agent_outside, as_stored(Session.last_activity_at),
)
# Prepared list_sessions queries by (scope, with a cursor); their SQL built once (oar/core/prepared.py).
_LISTED: dict[tuple[str, bool], Prepared] = {}


def _sessions_query(scope: str, text: str | None, *, cursor: bool, visible: Any = None) -> Callable[..., Any]:
    """list_sessions' query: `build(keep_since, [since,] [moment, moment, after_id,] limit)`
    (`since` for "recent"); each session comes with whether it is busy, has a background
    task running and has tasks to show (`keep_since`, `task_views.shown_exists`), so that
    the tasks are read only for the sessions that have some. `visible`: the caller's view's
    condition (docs/rules.md#visibility), None when it sees every session."""

    def build(keep_since: Any, *values: Any) -> Any:
        rest = list(values)
        query = Session.select(
            *_LISTED_COLUMNS,
            session_state.busy_exists().alias("busy_now"),
            session_state.background_exists().alias("background_now"),
            task_views.shown_exists(keep_since).alias("has_shown_tasks"),
        ).where(Session.live_local())
        if visible is not None:
            query = query.where(visible)
        if scope == "archived":
            query = query.where(Session.archived == True)  # noqa: E712
        elif scope != "all":
            query = query.where(Session.archived == False)  # noqa: E712
        if scope == "active":
            query = query.where(Session.id.in_(Message.select(Message.session).where(Message.status.in_(OPEN_TURN))))
        elif scope == "recent":
            query = query.where(Session.last_activity_at >= rest.pop(0))
        if text:
            query = query.where(Session.title.contains(text) | Session.id.startswith(text.lower()))
        if cursor:
            moment, same_moment, after_id = rest[:3]
            query = query.where(
                (Session.last_activity_at < moment) | ((Session.last_activity_at == same_moment) & (Session.id < after_id))
            )
        query = query.order_by(Session.last_activity_at.desc(), Session.id.desc()).limit(rest[-1])
        # Prepared, rows come as named tuples (oar/core/prepared.py); built each time, as models.
        return query if text or visible is not None else query.namedtuples()

    return build


@action("list_sessions",
    params={
        "relay": RELAY,
        "scope": Param(
            "str", choices=SCOPES,
            description=f"which sessions: active (a turn open), recent (active within {defaults.RECENT_SESSION_DAYS} days; "
            "the default), all (archived ones too) or archived",
        ),
        "query": Param("str", max_length=200, description="text in the title, or the start of a session id"),
        "limit": Param(
            "int", minimum=1, maximum=defaults.LIST_SESSIONS_MAX,
            description=f"how many sessions (default {defaults.LIST_SESSIONS_DEFAULT})",
        ),
        "cursor": Param("str", max_length=500, description="nextCursor of the previous page"),
    },
    level="read",
    short_read=True,
)
def list_sessions(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Sessions on the relay, most recently active first."""
    scope = args.get("scope", "recent")
    limit = args.get("limit", defaults.LIST_SESSIONS_DEFAULT)
    since = ctx.now - timedelta(days=defaults.RECENT_SESSION_DAYS)
    text = args["query"].strip() if args.get("query") else None
    moment, after_id = decode_cursor(args["cursor"]) if args.get("cursor") else (None, None)
    values = (
        task_views.keep_since(ctx.runtime, ctx.now),
        *((since,) if scope == "recent" else ()), *((moment, moment, after_id) if moment is not None else ()), limit + 1,
    )
    visible = ctx.view.where()
    if text or visible is not None:  # `contains` rewrites its value, and a view's sessions are its own: built each time
        rows = list(_sessions_query(scope, text, cursor=moment is not None, visible=visible)(*values))
    else:
        key = (scope, moment is not None)
        prepared = _LISTED.get(key)
        if prepared is None:
            prepared = _LISTED[key] = Prepared(_sessions_query(scope, None, cursor=moment is not None))
        rows = prepared.rows(*values)
    more = len(rows) > limit
    rows = rows[:limit]
    result: dict[str, Any] = {
        "summary": f"list_sessions → {ctx.relay_name}: {plural(len(rows), 'session')} ({scope}){', more' if more else ''}",
        "sessions": sessions.listed_many(
            rows, busy={row.id for row in rows if row.busy_now}, background={row.id for row in rows if row.background_now}
        ),
        "nextCursor": encode_cursor(rows[-1]) if more else None,
    }
    shown = task_views.shown_for(ctx.runtime, [row.id for row in rows if row.has_shown_tasks], ctx.now)
    for entry in result["sessions"]:
        entry["tasks"] = shown.get(entry["id"], [])
    return result


@action("read_session",
    params={
        "relay": RELAY,
        "session": SESSION,
        "last": Param(
            "int", minimum=1, maximum=defaults.READ_SESSION_LAST_MAX,
            description=f"how many of the last messages (default {defaults.READ_SESSION_LAST_DEFAULT})",
        ),
        "before": Param("str", max_length=64, description="a message id: read the messages before it"),
        "include_activity": Param("bool", description="include each message's tool activity"),
        "max_chars": Param(
            "int", minimum=defaults.READ_SESSION_MAX_CHARS_RANGE[0], maximum=defaults.READ_SESSION_MAX_CHARS_RANGE[1],
            description=f"the most text to return, in characters (default {defaults.READ_SESSION_MAX_CHARS_DEFAULT:,})",
        ),
    },
    level="read",
    short_read=True,
)
def read_session(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """A session's settings, its last messages and the reply being written."""
    since = task_views.keep_since(ctx.runtime, ctx.now)
    found = _READ.first((args["session"] or "").strip(), since)
    if found is not None:
        session, busy = found, bool(found.busy_now)
        has_tasks, has_questions = bool(found.has_shown_tasks), bool(found.has_pending_questions)
    else:  # not a full id: a prefix, or nothing
        session = sessions.resolve(args["session"], ctx.relay_name)
        busy, has_tasks, has_questions = session_state.is_busy(session), True, True
    ctx.view.check(session)
    last = args.get("last", defaults.READ_SESSION_LAST_DEFAULT)
    budget = args.get("max_chars", defaults.READ_SESSION_MAX_CHARS_DEFAULT)
    include_activity = args.get("include_activity", False)
    if args.get("before"):
        anchor = Message.get_or_none((Message.id == args["before"]) & (Message.session == session.id))
        if anchor is None:
            raise not_found(f'Session {session.id[:8]} has no message "{args["before"][:64]}".')
        newest_first = (_OLDER_WITH_ACTIVITY if include_activity else _OLDER).rows(session.id, anchor.seq, last + 1)
    else:
        newest_first = (_LAST_WITH_ACTIVITY if include_activity else _LAST).rows(session.id, last + 1)
    has_more = len(newest_first) > last
    messages: list[dict[str, Any]] = []
    clipped = False
    for message in newest_first[:last]:
        if budget <= 0:
            has_more, clipped = True, True
            break
        text = message.text
        if len(text) > budget:
            text, clipped = text[: budget - 1] + "…", True
        budget -= len(text)
        messages.append(_message_entry(message, text, include_activity))
    messages.reverse()
    shown_tasks = (
        task_views.shown_for(ctx.runtime, [session.id], ctx.now).get(session.id, []) if has_tasks else []
    )
    background = any(task["status"] == TaskStatus.RUNNING for task in shown_tasks)
    state = session_state.state_of(session, busy, background)
    result: dict[str, Any] = {
        "summary": f"read_session → {ctx.relay_name} session {session.id[:8]}: {plural(len(messages), 'message')}, {state}",
        "session": sessions.described(session, state),
        "messages": messages,
        "state": state,
        "inFlight": _in_flight(session),
        "pendingQuestions": questions.pending_in_session(session.id) if has_questions else [],
        "group": groups.with_members(session, visible=ctx.view.where()),
        "tasks": shown_tasks,
    }
    if has_more and messages:
        result["olderBefore"] = messages[0]["id"]
    if clipped:
        result["note"] = "Some text was left out to stay within max_chars; raise max_chars or read with before."
    return result


# The session read_session shows, with whether it is busy, has tasks to show and pending
# questions, in one query (the tasks and questions are read only when there are some).
_READ = Prepared(
    lambda session_id, keep_since: Session.select(
        *Session._meta.sorted_fields,
        session_state.busy_exists().alias("busy_now"),
        task_views.shown_exists(keep_since).alias("has_shown_tasks"),
        questions.pending_exists().alias("has_pending_questions"),
    )
    .where((Session.id == session_id) & Session.live())
    .limit(1)
)


# The columns a message entry shows (`_message_entry`, `badge`); `activities` only when asked
# for; the time, only shown, as stored (`as_stored`, after the fields). The SQL of these reads is
# built once (oar/core/prepared.py).
_SHOWN = (
    Message.seq, Message.id, Message.role, Message.text, Message.status, Message.error,
    Message.model, *(getattr(Message, column) for column in MESSAGE_COLUMNS.values()),
)


def _newest(*columns: Any, before: bool) -> Prepared:
    """Rows as named tuples with the columns' names (read like messages, built faster)."""

    def build(session_id: Any, *rest: Any) -> Any:
        query = Message.select(*columns, as_stored(Message.created_at)).where(Message.session == session_id)
        if before:
            query = query.where(Message.seq < rest[0])
        return query.order_by(Message.seq.desc()).limit(rest[-1]).namedtuples()

    return Prepared(build)


_LAST = _newest(*_SHOWN, before=False)
_LAST_WITH_ACTIVITY = _newest(*_SHOWN, Message.activities, before=False)
_OLDER = _newest(*_SHOWN, before=True)
_OLDER_WITH_ACTIVITY = _newest(*_SHOWN, Message.activities, before=True)


def _message_entry(message: Any, text: str, include_activity: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "text": text,
        "from": badge(message),
        "createdAt": iso(message.created_at),
    }
    if message.status:
        entry["status"] = message.status
        if message.status == TurnStatus.FAILED:
            entry["error"] = message.error
    if message.model and message.role == "assistant":
        entry["model"] = message.model
    if include_activity and message.activities:
        entry["activities"] = message.activities
    return entry


def _in_flight(session: Session) -> dict[str, Any] | None:
    if not session.active_turn:
        return None
    turn = Message.get_or_none(Message.id == session.active_turn)
    if turn is None or turn.status != TurnStatus.RUNNING:
        return None
    text, truncated = clip_reply(turn.partial_text or "")
    entry: dict[str, Any] = {"messageId": turn.id, "text": text, "startedAt": iso(turn.started_at), "model": turn.model}
    if truncated:
        entry["truncated"] = True
    return entry
