"""Event lines: how one event reads in the message delivered to a watcher (docs/events.md#events)."""

from __future__ import annotations

from typing import Any

from oar.background.masking import mask
from oar.core.models import Event, Session
from oar.core.statuses import TaskStatus

EXCERPT_CHARS = 80


def excerpt(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 2] + " …"


def _description(payload: dict[str, Any]) -> str:
    """A task's description in an event line: masked like its output (docs/tasks.md#read_task_output),
    before it is cut, so that a cut cannot leave part of a credential unrecognised."""
    return excerpt(mask(str(payload.get("description") or "")))


def event_line(event: Event, session: Session, kind: str | None = None) -> str:
    """`[relay event] session "Review: server/" (3f9c…): turn_end (done) "Found 4 places …"`;
    `kind` is the name the watcher receives it under (see `subscription_rules.received_as`)."""
    payload = event.payload or {}
    kind = kind or event.kind
    head = f'[relay event] session "{session.title}" ({session.id[:4]}…): {kind}'
    if event.kind == "stalled" and payload.get("stalledMinutes"):
        quiet = f'(no output for {payload["stalledMinutes"]} min)'
        if payload.get("taskId"):
            return f'{head} task {payload["taskId"]} "{_description(payload)}" {quiet}'
        return f'{head} turn {payload.get("turnId", "")} "{excerpt(payload.get("prompt", ""))}" {quiet}'
    if kind == "subagent_finished":
        exit_code = payload.get("exitCode")
        status = payload.get("status") or TaskStatus.COMPLETED
        tail = f"{status}, exit {exit_code}" if exit_code not in (None, 0) else status
        return f'{head} {payload.get("taskId", "")} "{_description(payload)}" ({tail})'
    if event.kind == "turn_end":
        return f'{head} ({payload.get("status")}) "{excerpt(payload.get("excerpt", ""))}"'
    if event.kind == "error":
        return f'{head} "{excerpt(payload.get("error", ""))}"'
    if event.kind in ("question_asked", "question_answered"):
        tail = f' → "{excerpt(payload["answer"])}"' if payload.get("answer") else ""
        return f'{head} {payload.get("questionId", "")} "{excerpt(payload.get("question", ""))}"{tail}'
    if event.kind.startswith("task_") or event.kind in ("stalled", "subagent_finished"):
        exit_code = payload.get("exitCode")
        tail = f" (exit {exit_code})" if exit_code not in (None, 0) else ""
        return f'{head} {payload.get("taskId", "")} "{_description(payload)}"{tail}'
    return head
