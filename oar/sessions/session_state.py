"""A session's state from its turns and tasks: `running_turn`, `background_only` or `idle` (docs/concepts.md#session-state)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from peewee import fn

from oar.core.models import Message, Session, Task
from oar.core.prepared import Prepared, scalars
from oar.core.statuses import OPEN_TURN, SessionState, TaskStatus


def busy_exists() -> Any:
    """Whether the session of the enclosing query (its `Session.id`) is busy, as one SQL
    expression: read_session asks it in the query that reads the session."""
    return fn.EXISTS(Message.select(Message.id).where((Message.session == Session.id) & Message.status.in_(OPEN_TURN)))


def background_exists() -> Any:
    """Whether the session of the enclosing query (its `Session.id`) has a background task
    running, as one SQL expression: list_sessions asks it in the query that lists the sessions."""
    return fn.EXISTS(Task.select(Task.id).where((Task.session == Session.id) & (Task.status == TaskStatus.RUNNING)))


# Asked on every list_sessions and read_session: their SQL built once (oar/core/prepared.py).
_BUSY = Prepared(
    lambda session_ids: Message.select(Message.session)
    .where(Message.session.in_(session_ids) & Message.status.in_(OPEN_TURN))
    .distinct()
    .tuples()
)
_BACKGROUND = Prepared(
    lambda session_ids: Task.select(Task.session)
    .where(Task.session.in_(session_ids) & (Task.status == TaskStatus.RUNNING))
    .distinct()
    .tuples()
)


def busy_session_ids(session_ids: Iterable[str]) -> set[str]:
    """Which of these sessions have a turn queued, running or waiting for an answer."""
    session_ids = list(session_ids)
    if not session_ids:
        return set()
    return set(scalars(_BUSY.rows(session_ids)))


def is_busy(session: Session) -> bool:
    return bool(busy_session_ids([session.id]))


def background_session_ids(session_ids: Iterable[str]) -> set[str]:
    """Which of these sessions have a background task running."""
    session_ids = list(session_ids)
    if not session_ids:
        return set()
    return set(scalars(_BACKGROUND.rows(session_ids)))


def state_of(session: Session, busy: bool, background: bool | None = None) -> SessionState:
    """`running_turn`, `background_only` (no turn, a task running) or `idle` (docs/concepts.md#session-state)."""
    if busy:
        return SessionState.RUNNING_TURN
    if background is None:
        background = bool(background_session_ids([session.id]))
    return SessionState.BACKGROUND_ONLY if background else SessionState.IDLE
