"""OpenClaw's session keys for the relay's sessions (docs/openclaw.md#session-keys).

The caller is `main` (`global` is its alias); a session a sessions_spawn started is
`agent:<agentId>:subagent:<uuid>`; a conversation a schedule fires into is `cron:<schedule id>`;
every other session is `oar:<session id>`. A bare session id is accepted wherever a key is.
`unknown` and `global` are never listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from oar.core.errors import ActionError, not_found
from oar.core.models import Schedule, Session
from oar.openclaw.models import Run
from oar.sessions import sessions

MAIN = "main"
# Names of the caller's own conversation besides `main`.
MAIN_ALIASES = ("main", "global")
# Reserved: never a session's key, never listed.
RESERVED = ("unknown", "global")
OAR_PREFIX = "oar:"
CRON_PREFIX = "cron:"
SUBAGENT_MARK = ":subagent:"
KINDS = ("main", "group", "cron", "hook", "node", "other")


@dataclass(frozen=True)
class Keyed:
    """A session as OpenClaw's tools name it."""

    session: Session
    key: str
    kind: str  # main | cron | other
    channel: str  # webchat | internal

    @property
    def chat_type(self) -> str:
        """The relay's conversations are all direct chats (there are no channel groups)."""
        return "direct"


def spawned_key(agent_id: str, uuid: str) -> str:
    return f"agent:{agent_id}{SUBAGENT_MARK}{uuid}"


def keyed(session: Session, caller: Session) -> Keyed:
    return keyed_many([session], caller)[session.id]


def keyed_many(rows: Iterable[Session], caller: Session) -> dict[str, Keyed]:
    """Each session's key, kind and channel, read in two queries for the whole list."""
    rows = list(rows)
    ids = [row.id for row in rows if row.id != caller.id]
    spawned: dict[str, str] = {}
    cron: dict[str, str] = {}
    if ids:
        spawned = {
            run.target_session_id: str(run.child_key)
            for run in Run.select(Run.target_session_id, Run.child_key).where(
                Run.target_session_id.in_(ids) & Run.child_key.is_null(False)
            )
        }
        for schedule in (
            Schedule.select(Schedule.id, Schedule.target)
            .where(Schedule.target.in_(ids) & Schedule.ended_at.is_null())
            .order_by(Schedule.created_at)
        ):
            cron[schedule.target_id] = schedule.id  # the newest one names it
    found: dict[str, Keyed] = {}
    for row in rows:
        agent_started = bool(row.created_by_session)
        if row.id == caller.id:
            found[row.id] = Keyed(row, MAIN, "main", "internal" if agent_started else "webchat")
        elif row.id in spawned:
            found[row.id] = Keyed(row, spawned[row.id], "other", "internal")
        elif row.id in cron:
            found[row.id] = Keyed(row, CRON_PREFIX + cron[row.id], "cron", "internal")
        else:
            found[row.id] = Keyed(row, OAR_PREFIX + row.id, "other", "internal" if agent_started else "webchat")
    return found


def source_key(caller: Session) -> str:
    """The caller as the sessions it writes to name it (its own `main` is not theirs)."""
    run = Run.get_or_none((Run.target_session_id == caller.id) & Run.child_key.is_null(False))
    return str(run.child_key) if run is not None and run.child_key else OAR_PREFIX + caller.id


def resolve(reference: str, caller: Session, relay_name: str) -> Session:
    """The session a key (or a bare session id) names; NOT_FOUND otherwise."""
    reference = reference.strip()
    missing = f"Session not found: {reference[:300]}"
    if reference in MAIN_ALIASES:
        return caller
    if reference in RESERVED:
        raise not_found(missing)
    session: Session | None = None
    if SUBAGENT_MARK in reference:
        run = Run.get_or_none(Run.child_key == reference)
        session = Session.get_or_none(Session.id == run.target_session_id) if run is not None else None
    elif reference.startswith(CRON_PREFIX):
        schedule = Schedule.get_or_none(Schedule.id == reference[len(CRON_PREFIX):])
        session = Session.get_or_none(Session.id == schedule.target_id) if schedule is not None else None
    else:
        bare = reference[len(OAR_PREFIX):] if reference.startswith(OAR_PREFIX) else reference
        try:
            session = sessions.resolve(bare, relay_name)
        except ActionError:
            session = None
    if session is None or session.deleted:
        raise not_found(missing)
    return session


def by_label(label: str, visible: Iterable[Session]) -> Session:
    """The most recently active visible session titled `label` (case-insensitive)."""
    wanted = label.strip().lower()
    for session in sorted(visible, key=lambda s: s.last_activity_at, reverse=True):
        if session.title.strip().lower() == wanted:
            return session
    raise not_found(f"No session found with label: {label.strip()[:200]}")
