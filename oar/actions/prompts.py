"""send, create_session and wait: prompting sessions and waiting for replies (docs/sessions.md#send, docs/sessions.md#create_session, docs/waiting.md#the-wait-action, docs/waiting.md)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import cards, loop
from oar.core import defaults, ids
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found, refusals_ending
from oar.core.fields import Param
from oar.core.models import Message, Session
from oar.core.shapes import CWD, EFFORT, GROUP, MODE, MODEL, PROVIDER, RELAY, SESSION, TEXT, TITLE, WAIT_SECONDS
from oar.core.statuses import IN_PROGRESS_TURN, OPEN_TURN, TurnStatus
from oar.core.timeutil import utcnow
from oar.core.waiting import current_watch
from oar.core.work_folders import RelayPlaces, ensure_own_folder
from oar.federation import peers, provenance
from oar.federation.models import Peer
from oar.providers.base import Provider
from oar.providers.choice import Requested, choose, pick_provider
from oar.sessions import groups, rules, session_state, sessions
from oar.sessions.folders import check_folder
from oar.turns import still_working as background
from oar.turns import turns
from oar.watching import own_prompts

# create_session's refusals about its group say which thing was not created.
NO_SESSION = "No session was created."


def wait_seconds(ctx: CallContext, args: dict[str, Any]) -> tuple[int, str | None]:
    """The wait to use, capped by the owner's "Longest wait per tool call" (docs/waiting.md#wait_seconds)."""
    requested = args.get("wait_seconds", defaults.DEFAULT_WAIT_SECONDS)
    cap = ctx.settings["max_wait_seconds"]
    if ctx.max_wait_seconds is not None and ctx.max_wait_seconds < cap:
        cap = ctx.max_wait_seconds
        if requested > cap:
            return cap, f"{ctx.max_wait_reason} waited {cap} s instead of {requested} s.".lstrip()
    if requested > cap:
        return cap, f"This relay caps waits at {cap} s; waited {cap} s instead of {requested} s."
    return requested, None


def waited_result(ctx: CallContext, message: Message, args: dict[str, Any]) -> dict[str, Any]:
    seconds, cap_note = wait_seconds(ctx, args)
    deadline = time.monotonic() + seconds
    watch = current_watch()
    if watch is not None:
        watch.on_prompt(message.session_id, message.id)
    if seconds > 0:
        # Own-prompt suppression (docs/events.md#own-prompts): while the sender waits, a turn_end is held;
        # once it got the finished reply here, that turn_end is not delivered.
        noted = own_prompts.waiting_for_reply(message, ctx.caller_session.id, ctx.now + timedelta(seconds=seconds))
        message = turns.wait_for(ctx.runtime, message.id, seconds)
        if noted:  # without a note, nothing of this turn was held for the caller
            own_prompts.wait_ended(ctx.runtime, message, ctx.caller_session.id, utcnow())
    else:
        message = Message.get(Message.id == message.id)
    entry = turns.result(ctx.runtime, message)
    if message.status == TurnStatus.DONE:
        working = background.still_working(ctx.runtime, message, max(0.0, deadline - time.monotonic()))
        if working:
            entry = background.report(entry, working, ctx.runtime.time("BACKGROUND_QUIET_SECONDS"))
    notes = []
    if message.status in IN_PROGRESS_TURN:  # the cap is news only when the wait ran out before the reply
        notes = [cap_note, turns.NOT_FINISHED_NOTE] if cap_note else [turns.NOT_FINISHED_NOTE]
    if entry.get("note"):
        notes.insert(0, entry["note"])
    if notes:
        entry["note"] = " ".join(notes)
    return entry


@action("send",
    params={
        "relay": RELAY,
        "session": SESSION,
        "text": TEXT,
        "wait_seconds": WAIT_SECONDS,
        "mode": MODE,
        "model": MODEL,
        "effort": EFFORT,
        "provider": PROVIDER,
        "if_busy": Param(
            "str", choices=("queue", "fail"),
            description="when the session is busy: queue the prompt after its turns (default) or fail",
        ),
    },
    level="prompt",
    writes=True,
    nothing="Nothing was sent.",
    not_own_session="session",
)
def send(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Queue a prompt to a session and wait for the reply."""
    nothing = "Nothing was sent."
    target = ctx.session(args["session"])
    if target.archived:
        raise not_found(f"Session {target.id[:8]} is archived.")
    busy = session_state.is_busy(target)
    if target.created_by_session == ctx.caller_session.id and not busy:
        rules.check_active_limit(ctx.caller_session)
    chosen = choose(target, Requested.of(args), relay_name=ctx.relay_name, cap_checked_at=ctx.now)
    provider, model, effort = chosen.provider, chosen.model, chosen.effort
    if busy and args.get("if_busy") == "fail":
        active = Message.select().where(
            (Message.session == target.id) & Message.status.in_(OPEN_TURN)
        ).order_by(Message.seq).first()
        raise ActionError(
            "REMOTE_RELAY_BUSY",
            f"Session {target.id[:8]} is busy with another turn (if_busy: fail).",
            progress=turns.progress(active),
        )
    mode = args.get("mode") or ctx.caller_session.mode
    cards.approve(ctx, cards.Request(
        action="send", nothing=nothing, target=target, mode=mode, provider=provider.name, model=model,
        folder=target.cwd or target.repo, excerpt=args["text"], counted=True,
        lines=chosen.card_lines,
    ))
    unlocks = _relay_to_unlock(ctx, target.id)
    with write_transaction():
        Session.update(mode=mode, model=model, effort=effort, provider=provider.name).where(Session.id == target.id).execute()
        target = Session.get_by_id(target.id)
        message = turns.insert_prompt(
            target, ctx.prompt_text(args["text"]), ctx.provenance(), mode=mode, model=model, effort=effort
        )
        if unlocks is not None:
            peers.note_remote_prompt(target, unlocks)
        loop.count_prompt(ctx.caller_session)
    turns.start_turns(ctx.runtime, target.id)
    entry = waited_result(ctx, message, args)
    entry.update(chosen.reported())
    entry["summary"] = f"send → {ctx.relay_name} session {target.id[:8]}: {turns.summary_status(entry)}"
    return entry


@action("create_session",
    params={
        "relay": RELAY,
        "text": TEXT,
        "provider": PROVIDER,
        "model": MODEL,
        "cwd": CWD,
        "repo": Param("str", max_length=500, description="the repository, for providers that work in repositories"),
        "branch": Param("str", max_length=200, description="the branch of repo"),
        "mode": MODE,
        "effort": EFFORT,
        "title": TITLE,
        "group": GROUP,
        "wait_seconds": WAIT_SECONDS,
    },
    level="full",
    writes=True,
    strict=True,
    nothing="Nothing was created.",
    approval=("create_sessions",),
)
def create_session(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Start a session with a first prompt and wait for the reply."""
    nothing = "Nothing was created."
    caller = ctx.caller_session
    rules.check_may_create(caller)
    rules.check_active_limit(caller)
    requested = Requested.of(args)
    picked = pick_provider(None, requested, relay_name=ctx.relay_name, like=caller, cap_checked_at=ctx.now)
    # The workspace arguments are checked against the provider before its model, as always.
    session_id = ids.session_id()
    cwd, repo, branch = _workspace(ctx, args, picked.provider, session_id)
    chosen = choose(None, requested, relay_name=ctx.relay_name, like=caller, picked=picked)
    provider, model, effort = chosen.provider, chosen.model, chosen.effort
    group = None
    if args.get("group"):
        with refusals_ending(NO_SESSION):
            group = groups.resolve(args["group"], ctx.relay_name)
    mode = args.get("mode") or caller.mode
    title = (args.get("title") or "").strip() or sessions.title_from(args["text"])
    cards.approve(ctx, cards.Request(
        action="create_session", nothing=nothing, mode=mode, provider=provider.name, model=model,
        folder=cwd or repo, excerpt=args["text"], counted=True,
        lines=(f'Title: {title}', *((f"Group: {groups.display_name(group)} ({group.id})",) if group else ())),
    ))
    unlocks = _relay_to_unlock(ctx, None)
    with write_transaction():
        session = sessions.create(
            title=title, provider=provider.name, model=model, effort=effort, mode=mode,
            cwd=cwd, repo=repo, branch=branch, created_by=caller, session_id=session_id,
        )
        if group is None and caller.remote_relay is not None:
            pass  # started by an agent on another relay: it joins no group (docs/sessions.md#create_session)
        elif group is None:
            caller = Session.get_by_id(caller.id)
            group = caller.group or groups.create(head=caller)
            if caller.group_id is None:
                groups.join(caller, group)
        elif not groups.still_open(group):  # dissolved by the owner since it was checked
            raise groups.unknown_group(
                f'The session group "{groups.display_name(group)}" was dissolved.'
            ).ending(NO_SESSION)
        if group is not None:
            groups.join(session, group)
        message = turns.insert_prompt(
            session, ctx.prompt_text(args["text"]), ctx.provenance(), mode=mode, model=model, effort=effort
        )
        if unlocks is not None:
            peers.note_remote_prompt(session, unlocks)
        loop.count_prompt(caller)
    turns.start_turns(ctx.runtime, session.id)
    entry = waited_result(ctx, message, args)
    session = Session.get_by_id(session.id)
    entry.update(
        provider=provider.name, model=model, mode=mode, effort=effort, title=title,
        group=groups.field_for(session),
    )
    if repo:
        entry.update(repo=repo, branch=branch)
    entry.update(chosen.reported())
    entry["summary"] = (
        f'create_session → {ctx.relay_name}: session {session.id[:8]} "{title}" {turns.summary_status(entry)}'
    )
    return entry


def _relay_to_unlock(ctx: CallContext, session_id: str | None) -> Peer | None:
    """The paired relay a prompt from another relay's agent unlocks in the session it arrives in:
    asked before the prompt's transaction, since it asks that relay (docs/relays.md#provenance)."""
    calling = ctx.caller
    if calling.relay is None or calling.pairing is None:
        return None
    return provenance.relay_to_unlock(ctx.runtime, calling.pairing, calling.relay, session_id)


def _workspace(
    ctx: CallContext, args: dict[str, Any], provider: Provider, session_id: str
) -> tuple[str | None, str | None, str | None]:
    """(cwd, repo, branch): repository-based providers take a repo, the others a folder: the one
    named, else the caller's (unless the new session may not use it: the caller's own folder is
    its alone), else the new session's own folder (docs/sessions.md#folders)."""
    if provider.workspace == "repo":
        if args.get("cwd"):
            raise invalid(f"{provider.name} works in repositories: give repo (and branch), not cwd.")
        if not args.get("repo"):
            raise invalid(f"create_session needs repo for {provider.name}, which works in repositories.")
        return None, args["repo"], args.get("branch")
    if args.get("repo") or args.get("branch"):
        raise invalid(f"{provider.name} works in folders: give cwd, not repo or branch.")
    roots = ctx.settings["allowed_roots"]
    places = RelayPlaces.of(ctx.runtime.config)
    if args.get("cwd"):
        return check_folder(args["cwd"], roots, places=places), None, None
    if ctx.caller_session.cwd:
        try:
            return check_folder(ctx.caller_session.cwd, roots, places=places), None, None
        except ActionError:
            pass  # the caller's folder is not one the new session may use: it gets its own
    ensure_own_folder(places, session_id)
    return places.own_folder(session_id), None, None


@action("wait",
    params={
        "relay": RELAY,
        "session": SESSION,
        "message_id": Param("str", required=True, max_length=64, description="the message_id send returned"),
        "wait_seconds": WAIT_SECONDS,
    },
    level="read",
    not_own_session="session",
)
def wait(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Keep waiting for a reply that send or create_session did not get in time."""
    session = ctx.session(args["session"])
    message = Message.get_or_none(
        (Message.id == args["message_id"]) & (Message.session == session.id) & Message.status.is_null(False)
    )
    if message is None:
        raise not_found(f'Session {session.id[:8]} has no prompt with message_id "{args["message_id"][:64]}".')
    entry = waited_result(ctx, message, args)
    entry["summary"] = f"wait → {ctx.relay_name} session {session.id[:8]}: {turns.summary_status(entry)}"
    return entry

