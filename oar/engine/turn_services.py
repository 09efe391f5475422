"""What a running turn's provider asks of the relay through its `TurnControl`, besides
questions (`runner.ask_user`, which pauses the turn's time limit): background tasks it
starts or reports, whether its server answered, notes kept between turns, the
conversation so far, and `relay_tool` or OpenClaw's session tools called as the session's
own agent. Each gives its database connection back: a turn holds none while it streams.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from oar import providers
from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch
from oar.background import tasks
from oar.core import keys
from oar.core.db import release_connection
from oar.core.fields import storable
from oar.core.models import Message, Session
from oar.core.ratelimit import refuse_over_limit
from oar.core.runtime import Runtime
from oar.core.statuses import TaskStatus
from oar.openclaw import openclaw_tools
from oar.providers.base import TaskEnded, TaskReported

log = logging.getLogger(__name__)


def start_task(runtime: Runtime, session_id: str, turn_id: str, command: str) -> str:
    """A background task the turn starts; it runs in its own job and outlives the turn. A write of
    the conversation, limited as its other task starts are (docs/rules.md#rate-limits)."""
    try:
        refuse_over_limit(runtime, session_id, is_write=True, nothing="Nothing was run.")
        return tasks.start(runtime, Session.get_by_id(session_id), command, turn_id=turn_id).id
    finally:
        release_connection()


def record_reported_task(runtime: Runtime, session_id: str, turn_id: str, reported: TaskReported) -> str:
    """A background task the agent runs itself, recorded (never run) as one of the session's tasks."""
    try:
        return tasks.record_reported(
            runtime, session_id, turn_id, description=storable(reported.description), type=reported.type,
            output_file=reported.output_file,
        ).id
    finally:
        release_connection()


def end_reported_task(runtime: Runtime, task_id: str, ended: TaskEnded) -> None:
    try:
        tasks.end_reported(runtime, task_id, ended.status, ended.note and storable(ended.note), ended.output_file)
    finally:
        release_connection()


def end_leftover_tasks(runtime: Runtime, task_ids: list[str]) -> None:
    """The records of tasks the agent reported and did not end, end with its turn: the relay
    can follow an agent's own task only through that turn (ended ones stay as they are)."""
    try:
        for task_id in task_ids:
            tasks.finish(runtime, task_id, TaskStatus.KILLED, None, tasks.AGENT_GONE_TEXT)
    finally:
        release_connection()


def note_reachable(provider_name: str, reachable: bool) -> None:
    try:
        providers.note_reachable(provider_name, reachable)
    finally:
        release_connection()


# Notes a provider keeps about a session between turns: best effort, so Redis, for a month.
NOTE_SECONDS = 30 * 86_400


def _note_key(runtime: Runtime, session_id: str, key: str) -> str:
    return keys.provider_note(runtime.config.namespace, session_id, key)


def recall(runtime: Runtime, session_id: str, key: str) -> str | None:
    try:
        value = runtime.redis.get(_note_key(runtime, session_id, key))
    except redis.RedisError:
        return None
    if value is None:
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def remember(runtime: Runtime, session_id: str, key: str, value: str | None) -> None:
    try:
        if value is None:
            runtime.redis.delete(_note_key(runtime, session_id, key))
        else:
            runtime.redis.set(_note_key(runtime, session_id, key), value.encode("utf-8"), ex=NOTE_SECONDS)
    except redis.RedisError:
        log.warning("a note of session %s was not kept: Redis is unavailable", session_id)


def history_of(session_id: str, before_seq: int) -> list[dict[str, str]]:
    rows = (
        Message.select(Message.role, Message.text)
        .where((Message.session == session_id) & (Message.seq < before_seq))
        .order_by(Message.seq)
    )
    history = [{"role": row.role, "text": row.text} for row in rows]
    release_connection()
    return history


def call_relay_tool_as(runtime: Runtime, session_id: str, turn_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """`relay_tool` called by the session's own agent during this turn."""
    caller = Session.get_by_id(session_id)
    turn = Message.get(Message.id == turn_id)
    _status, body = dispatch(CallContext(runtime=runtime, caller=caller, turn=turn, via="provider"), payload)
    release_connection()
    return body


def call_openclaw_as(runtime: Runtime, session_id: str, turn_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One of OpenClaw's session tools called by the session's own agent during this turn (echo's `!openclaw`)."""
    caller = Session.get_by_id(session_id)
    turn = Message.get(Message.id == turn_id)
    _status, body = openclaw_tools.call(CallContext(runtime=runtime, caller=caller, turn=turn, via="provider"), tool, arguments)
    release_connection()
    return body
