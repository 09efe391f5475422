"""Which sessions an agent's conversation sees and reaches (docs/rules.md#visibility).

The owner setting `sessions_visibility` holds for every agent surface alike — relay_tool over
HTTP, MCP and a provider's turns, OpenClaw's session tools, a paired relay's calls — because
they all act as the same session with the same token: a rule one of them kept and another did
not would be no boundary. `all` sees every session; `agent` the conversation's tree and every
session on its provider (OpenClaw's agent id); `tree` the conversation itself and the sessions
it started, and theirs, to TREE_DEPTH levels; `self` the conversation alone.

A session is in a conversation's tree when the conversation started it, or started the one
that started it, and so on, through sessions that are not deleted: `tree_of` walks down from
the conversation (for lists), `ancestors_of` up from the sessions (for one session, and for a
batch of events).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.models import Session, Setting

SETTING = "sessions_visibility"
EVERYTHING = "all"


def tree_of(caller_id: str) -> set[str]:
    """The conversation and the sessions started from it, to TREE_DEPTH levels."""
    found = {caller_id}
    frontier = [caller_id]
    for _level in range(defaults.VISIBILITY_TREE_DEPTH):
        if not frontier:
            break
        frontier = [
            row.id for row in Session.select(Session.id).where(
                Session.created_by_session.in_(frontier) & Session.live()
            ) if row.id not in found
        ]
        found.update(frontier)
    return found


def ancestors_of(session_ids: Iterable[str]) -> dict[str, set[str]]:
    """For each session, the conversations whose tree holds it: its starter, the starter's
    starter and so on, to TREE_DEPTH levels, through starters that are not deleted (as
    `tree_of` walks down)."""
    ancestors: dict[str, set[str]] = {session_id: set() for session_id in session_ids}
    # Each session's chain goes on from `climbing[session]`, the last ancestor reached.
    climbing = {session_id: session_id for session_id in ancestors}
    for _level in range(defaults.VISIBILITY_TREE_DEPTH):
        if not climbing:
            break
        rows = {
            row.id: row for row in Session.select(Session.id, Session.created_by_session, Session.deleted)
            .where(Session.id.in_(list(set(climbing.values()))))
        }
        still: dict[str, str] = {}
        for session_id, reached in climbing.items():
            row = rows.get(reached)
            if row is None or row.deleted or row.created_by_session is None:
                continue  # the chain ends here: deleted, or started by no session
            ancestors[session_id].add(row.created_by_session)
            still[session_id] = row.created_by_session
        climbing = still
    return ancestors


def relay_visibility() -> str:
    """The owner's setting as stored (for the event engine, which has no call to read it from)."""
    row = Setting.get_or_none(Setting.key == SETTING)
    return str(row.value) if row is not None else defaults.SESSIONS_VISIBILITY


def sees(visibility: str, viewer: Session, session: Session, ancestors: set[str]) -> bool:
    """Whether `viewer` sees `session`, whose ancestors are `ancestors` (pure)."""
    if visibility == EVERYTHING or session.id == viewer.id:
        return True
    if visibility == "self":
        return False
    if viewer.id in ancestors:
        return True
    return visibility == "agent" and session.provider is not None and session.provider == viewer.provider


@dataclass
class View:
    """One conversation's view of the relay's sessions, for one call."""

    viewer: Session
    visibility: str
    _tree: set[str] | None = field(default=None, repr=False)

    @property
    def everything(self) -> bool:
        return self.visibility == EVERYTHING

    def sees(self, session: Session) -> bool:
        if self.everything or session.id == self.viewer.id:
            return True
        return sees(self.visibility, self.viewer, session, ancestors_of([session.id])[session.id])

    def where(self) -> Any:
        """A condition on `Session` that keeps what this view sees (None: everything)."""
        if self.everything:
            return None
        if self.visibility == "self":
            return Session.id == self.viewer.id
        if self._tree is None:
            self._tree = tree_of(self.viewer.id)
        in_tree = Session.id.in_(sorted(self._tree))
        return in_tree | (Session.provider == self.viewer.provider) if self.visibility == "agent" else in_tree

    def check(self, session: Session) -> Session:
        """`session` when this view sees it; else refused as outside it (nothing is done)."""
        if not self.sees(session):
            raise hidden(session.id, self.visibility)
        return session


WHAT_IT_SEES = {
    "all": "every session",
    "self": "this conversation alone",
    "tree": "this conversation and the sessions it started, and theirs",
    "agent": "this conversation, the sessions it started and theirs, and the sessions on its provider",
}


def hidden(session_id: str, visibility: str) -> ActionError:
    return ActionError(
        "REMOTE_RELAY_FORBIDDEN",
        f'Session {session_id[:8]} is not visible to this conversation: the owner\'s sessions_visibility is '
        f'"{visibility}" ({WHAT_IT_SEES.get(visibility, visibility)}).',
    )


@dataclass
class Watchers:
    """Which watchers see which sessions, for one batch of events (the event engine): a watcher
    receives events only of the sessions it sees."""

    visibility: str
    ancestors: dict[str, set[str]]
    providers: dict[str, str]

    @classmethod
    def of(cls, visibility: str, session_ids: Iterable[str], watcher_ids: Iterable[str]) -> Watchers:
        session_ids = set(session_ids)
        if visibility == EVERYTHING:
            return cls(visibility, {}, {})
        providers: dict[str, str] = {}
        if visibility == "agent":
            wanted = list(session_ids | set(watcher_ids))
            providers = {row.id: row.provider for row in Session.select(Session.id, Session.provider).where(Session.id.in_(wanted))}
        return cls(visibility, ancestors_of(session_ids) if visibility != "self" else {}, providers)

    @property
    def everything(self) -> bool:
        return self.visibility == EVERYTHING

    def sees(self, watcher_id: str, session_id: str) -> bool:
        return sees(
            self.visibility,
            Session(id=watcher_id, provider=self.providers.get(watcher_id)),
            Session(id=session_id, provider=self.providers.get(session_id)),
            self.ancestors.get(session_id, set()),
        )
