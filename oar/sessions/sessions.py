"""Sessions: finding them, their state, and how they are shown to agents (docs/concepts.md#session-state, docs/sessions.md#list_sessions)."""

from __future__ import annotations

from typing import Any

from oar.core import defaults, ids, settings
from oar.core.errors import not_found
from oar.core.fields import one_line
from oar.core.models import AgentToken, Session
from oar.core.prepared import Prepared
from oar.core.timeutil import iso, utcnow
from oar.sessions import groups
from oar.sessions.session_state import background_session_ids, busy_session_ids, state_of

# Every relay_tool call starts here: one indexed look-up, its SQL built once (oar/core/prepared.py);
# the session comes with the owner settings' version (`settings_version`, read by `CallContext`).
_BY_TOKEN = Prepared(
    lambda token_hash: Session.select(*Session._meta.sorted_fields, settings.version_column())
    .join(AgentToken)
    .where((AgentToken.token_hash == token_hash) & Session.live())
    .limit(1)
)
_BY_ID = Prepared(
    lambda session_id: Session.select()
    .where((Session.id == session_id) & Session.live_local())
    .limit(1)
)


def resolve(reference: str, relay_name: str) -> Session:
    """A non-deleted session by full id or by a unique prefix of at least 8 characters; else
    NOT_FOUND, leaving what was not done to the caller (the dispatcher adds the action's sentence)."""
    reference = (reference or "").strip()
    session = _BY_ID.first(reference)
    if session is None and len(reference) >= defaults.SHORT_ID_CHARS:
        matches = list(
            Session.select()
            .where(Session.id.startswith(reference) & Session.live_local())
            .limit(2)
        )
        if len(matches) == 1:
            session = matches[0]
    if session is None:
        raise not_found(f'Relay "{relay_name}" has no session "{reference}".')
    return session


def is_same(reference: str | None, session: Session) -> bool:
    """Whether `reference` names `session` (full id or a prefix of 8+ characters)."""
    if not reference:
        return False
    reference = reference.strip()
    return reference == session.id or (
        len(reference) >= defaults.SHORT_ID_CHARS and session.id.startswith(reference)
    )


def create(
    *,
    title: str,
    provider: str,
    model: str | None,
    effort: str | None,
    mode: str,
    cwd: str | None,
    repo: str | None = None,
    branch: str | None = None,
    created_by: Session | None = None,
    session_id: str | None = None,
) -> Session:
    """Insert a session row (inside the caller's write transaction); `session_id` when the
    caller picked the id already (its own folder is named after it)."""
    now = utcnow()
    return Session.create(
        id=session_id or ids.session_id(),
        title=title,
        provider=provider,
        model=model,
        effort=effort,
        mode=mode,
        cwd=cwd,
        repo=repo,
        branch=branch,
        created_at=now,
        last_activity_at=now,
        created_by_session=created_by.id if created_by else None,
        created_by_title=created_by.title if created_by else None,
        # Started by an agent on another relay: its stand-in here names that relay.
        created_by_relay=created_by.remote_relay if created_by else None,
    )


def issue_token(session: Session) -> str:
    token = ids.new_token("s")
    AgentToken.create(token_hash=ids.hash_token(token), session=session)
    return token


def revoke_token(token: str) -> Session | None:
    """Forget one agent token (its next call is refused); the session it belonged to, or None
    when no such token exists."""
    row = AgentToken.get_or_none(AgentToken.token_hash == ids.hash_token(token))
    if row is None:
        return None
    AgentToken.delete().where(AgentToken.token_hash == row.token_hash).execute()
    return Session.get_by_id(row.session_id)


def revoke_tokens(session: Session) -> int:
    """Forget every agent token of a session; how many there were."""
    return AgentToken.delete().where(AgentToken.session == session.id).execute()


def session_by_token(token: str) -> Session | None:
    """The session a (not revoked) agent token belongs to; asked of the database on every call,
    so that a revoked token's next call is refused in every process (docs/decisions.md#reads-at-scale)."""
    return _BY_TOKEN.first(ids.hash_token(token))


def title_from(text: str) -> str:
    """A title from a prompt's first line: one line, its control characters spaces (docs/sessions.md)."""
    lines = (one_line(line) for line in text.splitlines() if not line.startswith("!"))
    first = next((line for line in lines if line), "")
    first = first or "New session"
    return first if len(first) <= 60 else first[:59] + "…"


def listed_many(
    rows: list[Session], busy: set[str] | None = None, background: set[str] | None = None
) -> list[dict[str, Any]]:
    """Sessions as `list_sessions` shows them. `busy` and `background`: which of them are,
    when the caller read it with the rows (`session_state.busy_exists`, `session_state.background_exists`)."""
    if busy is None:
        busy = busy_session_ids(row.id for row in rows)
    if background is None:
        background = background_session_ids(row.id for row in rows)
    group_fields = groups.fields_for(rows)
    return [listed(row, row.id in busy, group_fields.get(row.id), row.id in background) for row in rows]


def listed(session: Session, busy: bool, group: dict[str, Any] | None, background: bool | None = None) -> dict[str, Any]:
    """A session as `list_sessions` shows it."""
    entry: dict[str, Any] = {
        "id": session.id,
        "title": session.title,
        "provider": session.provider,
        "model": session.model,
        "state": state_of(session, busy, background),
        "cwd": session.cwd,
        "lastActivityAt": iso(session.last_activity_at),
        "messageCount": session.message_count,
        "watched": False,
        "tasks": [],
    }
    if group:
        entry["group"] = group
    if session.created_by_session:
        entry["viaAgent"] = session.created_by_title
    if session.may_create_sessions:
        entry["mayCreateSessions"] = True
    if session.agent_outside:
        entry["agentOutside"] = True
    if session.archived:
        entry["archived"] = True
    return entry


def settings_of(session: Session) -> dict[str, Any]:
    """The settings `update_session` reads and writes."""
    return {
        "provider": session.provider,
        "model": session.model,
        "effort": session.effort,
        "mode": session.mode,
        "title": session.title,
        "cwd": session.cwd,
        "group": groups.field_for(session),
        "thinking_enabled": session.thinking_enabled,
        "thinking_display": session.thinking_display,
        # Stored as text: "auto", or a token count shown as the number it is.
        "auto_compact_window": (
            int(session.auto_compact_window)
            if session.auto_compact_window and session.auto_compact_window.isdigit()
            else session.auto_compact_window
        ),
    }


def described(session: Session, state: str) -> dict[str, Any]:
    """A session as `read_session` shows it, in the `state` the caller worked out."""
    entry = {
        "id": session.id,
        "title": session.title,
        "state": state,
        "archived": session.archived,
        "createdAt": iso(session.created_at),
        "lastActivityAt": iso(session.last_activity_at),
        "messageCount": session.message_count,
        "settings": settings_of(session),
    }
    if session.created_by_session:
        entry["viaAgent"] = session.created_by_title
    if session.may_create_sessions:
        entry["mayCreateSessions"] = True
    if session.agent_outside:
        entry["agentOutside"] = True
    return entry


def recently_active(archived: bool, limit: int) -> list[Session]:
    """The sessions a list shows (open or archived; stand-ins left out), most recently active first."""
    return list(
        Session.select()
        .where(Session.live_local(archived=archived))
        .order_by(Session.last_activity_at.desc(), Session.id.desc())
        .limit(limit)
    )


def titles(session_ids: set[str]) -> dict[str, str]:
    """Each named session's title, by id (deleted ones too: a name once shown stays readable)."""
    if not session_ids:
        return {}
    return {row.id: row.title for row in Session.select(Session.id, Session.title).where(Session.id.in_(list(session_ids)))}


def token_count(session_id: str) -> int:
    """How many agent tokens of a conversation work."""
    return AgentToken.select().where(AgentToken.session == session_id).count()
