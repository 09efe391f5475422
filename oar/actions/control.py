"""update_session, stop and archive (docs/sessions.md#update_session, docs/sessions.md#answer_question-stop-and-archive)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oar import lifecycle
from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import cards
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid
from oar.core.fields import Param
from oar.core.models import Group, Message, Session, Task
from oar.core.shapes import CWD, EFFORT, GROUP, MODE, MODEL, RELAY, SESSION, TITLE
from oar.core.statuses import LIVE_TURN, OPEN_TURN, TaskStatus, TurnStatus
from oar.core.work_folders import RelayPlaces
from oar.providers.choice import Requested, choose
from oar.sessions import groups, session_state, sessions
from oar.sessions.folders import check_folder
from oar.turns import turns

UPDATE_NOTHING = "Nothing was changed."
OWNER_ONLY_SETTING = "Whether a session may start sessions is the owner's setting alone."
# What an archive card tells the owner besides the work in progress (docs/sessions.md#answer_question-stop-and-archive).
ARCHIVE_ENDS = "Archiving also ends its schedules, its subscriptions and the asks about it."


def _window(value: Any) -> str:
    """`auto_compact_window`: "auto" or a token count."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or not 1_000 <= value <= 10_000_000:
        raise invalid(
            'update_session: auto_compact_window must be "auto" or a token count from 1,000 to 10,000,000.'
        )
    return str(value)


@action("update_session",
    params={
        "relay": RELAY,
        "session": SESSION,
        "model": MODEL,
        "effort": EFFORT,
        "mode": MODE,
        "title": TITLE,
        "group": GROUP,
        "cwd": CWD,
        "thinking_enabled": Param("bool", description="whether the model reasons before it answers"),
        "thinking_display": Param(
            "str", choices=("summarized", "full", "hidden"), description="how the reasoning is shown in replies"
        ),
        "auto_compact_window": Param(  # checked by _window
            "any",
            alternatives=(Param("str", choices=("auto",)), Param("int", minimum=1_000, maximum=10_000_000)),
            description='"auto" or the token count at which the conversation is compacted',
        ),
    },
    level="full",
    writes=True,
    strict=True,
    nothing=UPDATE_NOTHING,
    not_own_session="session",
    refused_args=(("may_create_sessions", OWNER_ONLY_SETTING),),
    needs_one_of=(
        "model", "effort", "mode", "title", "group", "cwd", "thinking_enabled", "thinking_display",
        "auto_compact_window",
    ),
    approval=("change_other_sessions",),  # only on a session the caller did not start
)
def update_session(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Change a session's settings for its next turns without prompting it."""
    target = ctx.session(args["session"])
    # Settings for the next turns: the provider's caps refuse prompts, not this.
    chosen = choose(target, Requested.of(args), relay_name=ctx.relay_name)
    provider = chosen.provider
    notes: list[str] = [chosen.model_note] if chosen.model_note else []
    wanted: dict[str, Any] = {}
    if "model" in args:
        wanted["model"] = chosen.model
    if "effort" in args:
        wanted["effort"] = chosen.effort
    if "mode" in args:
        wanted["mode"] = args["mode"]
    if "title" in args:
        wanted["title"] = args["title"].strip()
    group_change = _group_change(ctx, target, args.get("group"))
    if "cwd" in args:
        if provider.workspace == "repo":
            raise invalid(f"{provider.name} works in repositories; a session there has no folder.")
        folder = check_folder(args["cwd"], ctx.settings["allowed_roots"],
                              places=RelayPlaces.of(ctx.runtime.config), session_id=target.id)
        if folder != target.cwd:
            if session_state.is_busy(target):
                raise ActionError(
                    "REMOTE_RELAY_BUSY",
                    f"The session cannot move to another folder now: a turn is queued or running in session "
                    f"{target.id[:8]}.",
                )
            wanted["cwd"] = folder
    ignored_settings: dict[str, Any] = {}
    # Providers that honour thinking settings change them; others store them (docs/sessions.md#update_session).
    thinking_settings = wanted if provider.supports_thinking else ignored_settings
    if "thinking_enabled" in args:
        thinking_settings["thinking_enabled"] = args["thinking_enabled"]
    if "thinking_display" in args:
        thinking_settings["thinking_display"] = args["thinking_display"]
    if "auto_compact_window" in args:
        ignored_settings["auto_compact_window"] = _window(args["auto_compact_window"])

    changed = [key for key, value in wanted.items() if getattr(target, key) != value]
    if group_change is not None and not isinstance(group_change, GroupKept):
        changed.append("group")
    stored_only = [key for key, value in ignored_settings.items() if getattr(target, key) != value]
    if not changed and not stored_only:
        return _update_result(ctx, target, [], notes)
    cards.approve(ctx, cards.Request(
        action="update_session", nothing=UPDATE_NOTHING, target=target, denied_code="REMOTE_RELAY_PERMISSION",
        lines=(_changes_line(wanted, changed, stored_only, ignored_settings, group_change),),
    ))
    group_created = None
    agent_before = target.agent_session_id
    with write_transaction():
        values = {key: wanted[key] for key in changed if key != "group"}
        if "cwd" in values:  # an agent's own session belongs to its folder: the next turn starts anew
            values["agent_session_id"] = None
        values.update({key: ignored_settings[key] for key in stored_only})
        if values:
            Session.update(**values).where(Session.id == target.id).execute()
        target = Session.get_by_id(target.id)
        if group_change is not None:
            group_created = _apply_group_change(target, group_change)
    target = Session.get_by_id(target.id)
    if stored_only:
        notes.append(
            f"{', '.join(stored_only)} stored; {provider.name} does not use "
            f"{'it' if len(stored_only) == 1 else 'them'}, so the change is not in changed."
        )
    result = _update_result(ctx, target, changed, notes)
    if "cwd" in changed and agent_before:
        result["relaunched"] = True
        notes.append(f"{provider.name} starts a new agent session in the new folder from the next turn.")
        result["note"] = " ".join(notes)
    elif "cwd" in changed:
        result["relaunched"] = False
        notes.append("The session has no running agent process; the new folder is used from its next turn.")
        result["note"] = " ".join(notes)
    if group_created:
        result["groupCreated"] = group_created
    return result


def _changes_line(
    wanted: dict[str, Any], changed: list[str], stored_only: list[str], ignored: dict[str, Any],
    group_change: GroupChange | None,
) -> str:
    """`Model: … · Effort: … · Group: …` for the card (docs/sessions.md#groups)."""
    parts = [f"{key.replace('_', ' ').capitalize()}: {wanted[key]}" for key in changed if key != "group"]
    parts += [f"{key.replace('_', ' ').capitalize()}: {ignored[key]}" for key in stored_only]
    match group_change:
        case GroupJoined(group):
            parts.append(f"Group: {groups.display_name(group)} ({group.id})")
        case GroupCreated(name):
            parts.append(f"Group: {name} (new)")
        case GroupLeft():
            parts.append("Group: none")
    return " · ".join(parts)


# What update_session's `group` asks of the session's group (docs/sessions.md#groups).


@dataclass(frozen=True)
class GroupKept:
    """The session stays where it is: already in the group named, or in none and asked for none."""


@dataclass(frozen=True)
class GroupLeft:
    """The session leaves its group."""


@dataclass(frozen=True)
class GroupJoined:
    """The session joins an existing group."""

    group: Group


@dataclass(frozen=True)
class GroupCreated:
    """No group has the name: a new one by that name, headed by the session, which joins it."""

    name: str


GroupChange = GroupKept | GroupLeft | GroupJoined | GroupCreated


def _group_change(ctx: CallContext, target: Session, reference: str | None) -> GroupChange | None:
    """What to do with the group; None when `group` was not given."""
    if reference is None:
        return None
    if reference.strip().lower() == "none":
        return GroupLeft() if target.group_id else GroupKept()
    if reference.strip().startswith("grp_"):
        group = groups.resolve(reference, ctx.relay_name)
    else:
        matches = groups.find_by_name(reference)
        if not matches:
            return GroupCreated(reference.strip())
        group = groups.resolve(reference, ctx.relay_name)
    return GroupKept() if target.group_id == group.id else GroupJoined(group)


def _apply_group_change(target: Session, change: GroupChange) -> dict[str, str] | None:
    """Make the change; for a group made here, its id and name (the result's `groupCreated`)."""
    match change:
        case GroupLeft():
            groups.leave(target)
        case GroupJoined(group):
            groups.join(target, group)
        case GroupCreated(name):
            created = groups.create(head=target, name=name)
            groups.join(target, created)
            return {"id": created.id, "name": name}
    return None


def _update_result(ctx: CallContext, target: Session, changed: list[str], notes: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "summary": f"update_session → {ctx.relay_name} session {target.id[:8]}: "
        + (f"changed {', '.join(changed)}" if changed else "nothing to change"),
        "session": target.id,
        "settings": sessions.settings_of(target),
        "changed": changed,
    }
    if notes:
        result["note"] = " ".join(notes)
    return result


@action("stop",
    params={"relay": RELAY, "session": SESSION},
    level="full",
    writes=True,
    nothing="Nothing was stopped.",
    not_own_session="session",
    approval=("end_other_sessions",),  # only on a session the caller did not start
)
def stop(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Stop the session's running turn, like the page's Stop button."""
    target = ctx.session(args["session"])
    cards.approve(ctx, cards.Request(
        action="stop", nothing="Nothing was stopped.", target=target, lines=(_work_line(target),),
    ))
    acknowledgement = turns.stop_turn(ctx.runtime, target)
    return {
        "summary": f"stop → {ctx.relay_name} session {target.id[:8]}: {acknowledgement}",
        "session": target.id,
        "stopRequested": acknowledgement != "no-active-turn",
        "acknowledgement": acknowledgement,
    }


@action("archive",
    params={"relay": RELAY, "session": SESSION},
    level="full",
    writes=True,
    nothing="Nothing was archived.",
    not_own_session="session",
    approval=("end_other_sessions",),  # only on a session the caller did not start
)
def archive(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Archive a session: its running turn stops and queued prompts are cancelled."""
    target = ctx.session(args["session"])
    cards.approve(ctx, cards.Request(
        action="archive", nothing="Nothing was archived.", target=target,
        lines=(_work_line(target), ARCHIVE_ENDS),
    ))
    already = target.archived
    lifecycle.archive(ctx.runtime, target)
    result = {
        "summary": f"archive → {ctx.relay_name} session {target.id[:8]}: archived",
        "session": target.id,
        "archived": True,
    }
    if already:
        result["note"] = "The session was already archived."
    return result


def _work_line(target: Session) -> str:
    """The work a stop or archive would end, for its card: `Now: 1 turn running · 2 prompts queued · …`."""
    statuses = [
        row.status for row in Message.select(Message.status).where(
            (Message.session == target.id) & Message.status.in_(OPEN_TURN)
        )
    ]
    running = sum(status in LIVE_TURN for status in statuses)
    queued = statuses.count(TurnStatus.QUEUED)
    tasks = Task.select().where((Task.session == target.id) & (Task.status == TaskStatus.RUNNING)).count()
    parts = [
        f"{count} {noun}{'' if count == 1 else 's'} {state}"
        for count, noun, state in (
            (running, "turn", "running"), (queued, "prompt", "queued"), (tasks, "background task", "running"),
        )
        if count
    ]
    return "Now: " + (" · ".join(parts) if parts else "nothing running")
