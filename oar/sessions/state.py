"""A session's state from its turns and tasks: `running_turn`, `background_only` or `idle` (docs/concepts.md#session-state)."""

from __future__ import annotations

from collections.abc import Iterable

from oar.core.models import Message, Session, Task
from oar.core.statuses import OPEN_TURN, SessionState, TaskStatus


def busy_session_ids(session_ids: Iterable[str]) -> set[str]:
    """Which of these sessions have a turn queued, running or waiting for an answer."""
    session_ids = list(session_ids)
    if not session_ids:
        return set()
    query = (
        Message.select(Message.session)
        .where(Message.session.in_(session_ids) & Message.status.in_(OPEN_TURN))
        .distinct()
    )
    return set(query.scalars())


def is_busy(session: Session) -> bool:
    return bool(busy_session_ids([session.id]))


def background_session_ids(session_ids: Iterable[str]) -> set[str]:
    """Which of these sessions have a background task running."""
    session_ids = list(session_ids)
    if not session_ids:
        return set()
    running = Task.session.in_(session_ids) & (Task.status == TaskStatus.RUNNING)
    query = Task.select(Task.session).where(running).distinct()
    return set(query.scalars())


def state_of(session: Session, busy: bool, background: bool | None = None) -> SessionState:
    """`running_turn`, `background_only` (no turn, a task running) or `idle` (docs/concepts.md#session-state)."""
    if busy:
        return SessionState.RUNNING_TURN
    if background is None:
        background = bool(background_session_ids([session.id]))
    return SessionState.BACKGROUND_ONLY if background else SessionState.IDLE
