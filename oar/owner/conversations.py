"""The owner's conversations: starting one, writing as the user, its settings, tokens, archive
and delete (docs/owner-api.md)."""

from __future__ import annotations

from typing import Any

from oar import lifecycle
from oar.approvals import cards, loop
from oar.core import defaults, ids
from oar.core.db import write_transaction
from oar.core.errors import invalid, not_found, refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.shapes import CWD, EFFORT, MODE, MODEL, PROVIDER, TEXT, TITLE
from oar.core.timeutil import utcnow
from oar.core.work_folders import RelayPlaces, ensure_own_folder
from oar.federation import peers
from oar.providers.choice import Requested, choose
from oar.schedules import schedules
from oar.sessions import groups, session_state, sessions
from oar.sessions.folders import check_folder
from oar.turns import outside, turns

CHANGED_NOTHING = "Nothing was changed."
# Sessions listed at most, newest activity first, and messages shown when reading one.
SESSIONS_LISTED = 500
MESSAGES_READ = 200

NEW_SESSION = {
    "title": TITLE,
    "provider": PROVIDER,
    "model": MODEL,
    "effort": EFFORT,
    "mode": MODE,
    "cwd": CWD,
    "text": Param("str", max_length=defaults.MAX_PROMPT_CHARS),
    "agent_outside": Param("bool", description="its agent works outside the relay (docs/sessions.md#agents-outside-the-relay)"),
}

NEW_MESSAGE = {"text": TEXT}
# The owner revokes one agent token by giving it (only its hash is stored, so nothing else names it).
TOKEN_TO_REVOKE = {"token": Param("str", required=True, max_length=200, description="the agent token to revoke")}

SESSION_CHANGES = {
    "may_create_sessions": Param("bool"),
    "title": TITLE,
    "mode": MODE,
    "group_id": Param("str", max_length=64, description='a group id, or "none"'),
    # The Allows remembered for this conversation's agent (docs/rules.md#when-a-card-is-asked), granted ahead or revoked.
    "approvals": Param("list", description="create_sessions, watch_sessions, change_other_sessions, end_other_sessions"),
    "agent_outside": Param("bool", description="its agent works outside the relay (docs/sessions.md#agents-outside-the-relay)"),
}


def owner_session(runtime: Runtime, session_id: str) -> Session:
    """A non-deleted session by id or unique prefix; refused with "Nothing was changed."."""
    with refusals_ending(CHANGED_NOTHING):
        return sessions.resolve(session_id, runtime.relay_name())


def session_view(session: Session) -> dict[str, Any]:
    """A session as the owner sees it: its settings, state, group and remembered Allows."""
    view = sessions.described(session, session_state.state_of(session, session_state.is_busy(session)))
    view["group"] = groups.field_for(session)
    view["approvals"] = sorted(cards.approved(session.id, "this"))
    view["agentOutside"] = bool(session.agent_outside)
    if session.agent_outside:
        view["outside"] = outside.waiting_view(session)
    return view


def start_conversation(runtime: Runtime, payload: dict[str, Any]) -> tuple[Session, str, Message | None]:
    """The owner starts a conversation: the session, its agent token (shown once) and the
    first prompt when `text` was given."""
    nothing = "Nothing was created."
    name = runtime.relay_name()
    args, _ = check_fields("create session", NEW_SESSION, payload, strict=True, nothing=nothing)
    with refusals_ending(nothing):
        chosen = choose(None, Requested.of(args), relay_name=name)
    provider, model, effort = chosen.provider, chosen.model, chosen.effort
    places = RelayPlaces.of(runtime.config)
    session_id = ids.session_id()
    if args.get("cwd"):
        with refusals_ending(nothing):
            cwd = check_folder(args["cwd"], runtime.settings()["allowed_roots"], places=places)
    else:
        ensure_own_folder(places, session_id)
        cwd = places.own_folder(session_id)
    title = args.get("title") or (sessions.title_from(args["text"]) if args.get("text") else "New session")
    with write_transaction():
        session = sessions.create(
            title=title, provider=provider.name, model=model, effort=effort,
            mode=args.get("mode", "agent"), cwd=cwd, session_id=session_id,
        )
        if "agent_outside" in args:
            Session.update(agent_outside=args["agent_outside"]).where(Session.id == session.id).execute()
        token = sessions.issue_token(session)
        message = turns.insert_prompt(session, args["text"], turns.Provenance()) if args.get("text") else None
        if args.get("text"):
            peers.note_owner_message(session.id, args["text"])
    if message is not None:
        turns.start_turns(runtime, session.id)
    return Session.get_by_id(session.id), token, message


def list_sessions(runtime: Runtime) -> list[dict[str, Any]]:
    """Every session not deleted, most recently active first, as the owner API lists them."""
    rows = list(
        Session.select()
        .where(Session.live_local())
        .order_by(Session.last_activity_at.desc())
        .limit(SESSIONS_LISTED)
    )
    return sessions.listed_many(rows)


def read_session(runtime: Runtime, session_id: str) -> tuple[Session, list[dict[str, Any]]]:
    """A session and its newest messages, oldest first."""
    session = owner_session(runtime, session_id)
    newest = list(
        Message.select().where(Message.session == session.id).order_by(Message.seq.desc()).limit(MESSAGES_READ)
    )
    messages = [
        {"id": m.id, "role": m.role, "text": m.text, "status": m.status, "error": m.error, "from": turns.badge(m)}
        for m in reversed(newest)
    ]
    return session, messages


def write_as_user(runtime: Runtime, session_id: str, payload: dict[str, Any]) -> Message:
    """The user writes in the conversation: a turn, and the loop count starts over."""
    args, _ = check_fields("write", NEW_MESSAGE, payload, strict=True, nothing="Nothing was sent.")
    session = owner_session(runtime, session_id)
    if session.archived:
        raise not_found(f"Session {session.id[:8]} is archived. Nothing was sent.")
    with write_transaction():
        message = turns.insert_prompt(session, args["text"], turns.Provenance())
        loop.start_over(session.id)
        # The paired relays the owner names here are unlocked in this conversation (docs/relays.md#locks).
        peers.note_owner_message(session.id, args["text"])
    turns.start_turns(runtime, session.id)
    # The loop count starts over, so firings held by loop protection go out now (docs/schedules.md#schedules-into-other-sessions).
    schedules.release_held(runtime, session.id, utcnow())
    return message


def issue_token(runtime: Runtime, session_id: str) -> tuple[Session, str]:
    """A new agent token for a session (shown once); its other tokens stay valid. An archived
    session's tokens do not work (docs/sessions.md#archive): it gets none."""
    session = owner_session(runtime, session_id)
    if session.archived:
        raise not_found(f"Session {session.id[:8]} is archived: an agent token of it would not work. Nothing was created.")
    with write_transaction():
        token = sessions.issue_token(session)
    return session, token


def revoke_tokens(runtime: Runtime, session_id: str) -> tuple[Session, int]:
    """Revoke every agent token of a session: each one's next call is refused (401). The
    session itself is untouched; a new token comes from `issue_token`."""
    session = owner_session(runtime, session_id)
    with write_transaction():
        revoked = sessions.revoke_tokens(session)
    return session, revoked


def revoke_token(runtime: Runtime, token: str) -> Session:
    """Revoke one agent token, given as the token itself."""
    with write_transaction():
        session = sessions.revoke_token(token.strip())
    if session is None:
        raise not_found("That is not an agent token on this relay (or it was revoked already). Nothing was changed.")
    return session


def revoke_given_token(runtime: Runtime, payload: dict[str, Any]) -> Session:
    """The owner API's and the page's `{token}`: revoke that one agent token (its next call is 401)."""
    args, _ = check_fields("revoke token", TOKEN_TO_REVOKE, payload, strict=True, nothing=CHANGED_NOTHING)
    return revoke_token(runtime, args["token"])


def change_session_settings(runtime: Runtime, session_id: str, payload: dict[str, Any]) -> Session:
    """The owner changes a session: its title, mode, group, the may_create_sessions switch and
    the Allows remembered for its agent."""
    args, _ = check_fields("change session", SESSION_CHANGES, payload, strict=True, nothing=CHANGED_NOTHING)
    session = owner_session(runtime, session_id)
    group = None
    if args.get("group_id") and args["group_id"].lower() != "none":
        with refusals_ending(CHANGED_NOTHING):
            group = groups.resolve(args["group_id"], runtime.relay_name())
    # An empty list is "not given" for agents' arguments; here it revokes every remembered Allow.
    approvals = args.get("approvals", [] if payload.get("approvals") == [] else None)
    if approvals is not None and not all(kind in cards.REMEMBERED for kind in approvals):
        raise invalid(f"approvals must be a list of {', '.join(cards.REMEMBERED)}. {CHANGED_NOTHING}")
    with write_transaction():
        if approvals is not None:
            cards.set_approvals(session.id, "this", set(approvals))
        values = {key: args[key] for key in ("may_create_sessions", "title", "mode", "agent_outside") if key in args}
        if values:
            Session.update(**values).where(Session.id == session.id).execute()
        if "group_id" in args:
            if group is None:
                groups.leave(session)
            else:
                groups.join(session, group)
    if args.get("agent_outside") is False:
        turns.start_turns(runtime, session.id)  # what waited for the agent outside runs on the provider now
    return Session.get_by_id(session.id)


def archive(runtime: Runtime, session_id: str) -> Session:
    """Archive: its turn is stopped and queued prompts cancelled."""
    session = owner_session(runtime, session_id)
    lifecycle.archive(runtime, session)
    return session


def delete(runtime: Runtime, session_id: str) -> Session:
    """Delete: the session is gone from every listing."""
    session = owner_session(runtime, session_id)
    lifecycle.delete(runtime, session)
    return session
