"""What a running turn's provider asks of the relay through its `TurnControl`'s services
(`RelayTurnServices`, one per turn): background tasks it starts or reports, whether its server
answered, notes kept between turns, the conversation so far, `relay_tool` or OpenClaw's
session tools called as the session's own agent, an attached external agent's posts, and
`ask_user` cards (which pause the turn's time limit). Each gives its database connection back:
a turn holds none while it streams.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from oar import providers
from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch
from oar.approvals import questions
from oar.background import tasks
from oar.core import events, jobs, keys
from oar.core.db import release_connection, write_transaction
from oar.core.fields import storable
from oar.core.models import Message, Question, Session
from oar.core.ratelimit import refuse_over_limit
from oar.core.runtime import Runtime
from oar.core.statuses import QuestionStatus, TaskStatus, TurnStatus
from oar.core.timeutil import utcnow
from oar.core.waiting import Look, not_yet, settled, wait_on_signals
from oar.engine.turn_watcher import TurnWatcher
from oar.openclaw import openclaw_tools
from oar.providers.base import CancelEvent, TaskEnded, TaskReported
from oar.turns import external

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
    _status, body = dispatch(CallContext(runtime=runtime, caller_session=caller, turn=turn, via="provider"), payload)
    release_connection()
    return body


def call_openclaw_as(runtime: Runtime, session_id: str, turn_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One of OpenClaw's session tools called by the session's own agent during this turn (echo's `!openclaw`)."""
    caller = Session.get_by_id(session_id)
    turn = Message.get(Message.id == turn_id)
    _status, body = openclaw_tools.call(CallContext(runtime=runtime, caller_session=caller, turn=turn, via="provider"), tool, arguments)
    release_connection()
    return body


class RelayTurnServices:
    """The relay's `TurnServices` for one running turn: each call acts as the turn's session."""

    def __init__(
        self, runtime: Runtime, session_id: str, turn: Message, provider_name: str, watcher: TurnWatcher,
        cancelled: CancelEvent,
    ) -> None:
        self.runtime = runtime
        self.session_id = session_id
        self.turn = turn
        self.provider_name = provider_name
        # Paused while an `ask_user` card waits: that time does not count toward the turn's limit.
        self.watcher = watcher
        self.cancelled = cancelled

    def call_relay_tool(self, args: dict[str, Any]) -> dict[str, Any]:
        return call_relay_tool_as(self.runtime, self.session_id, self.turn.id, args)

    def call_openclaw(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return call_openclaw_as(self.runtime, self.session_id, self.turn.id, tool, args)

    def ask_user(self, question: str, options: list[str], allow_freeform: bool = True) -> str | None:
        return ask_user(self.runtime, self.turn, self.watcher, self.cancelled, question, options, allow_freeform)

    def start_task(self, command: str) -> str:
        return start_task(self.runtime, self.session_id, self.turn.id, command)

    def receive_external(self, seconds: float) -> list[dict[str, Any]]:
        return external.receive(self.runtime, self.turn.id, seconds)

    def note_reachable(self, reachable: bool) -> None:
        note_reachable(self.provider_name, reachable)

    def recall(self, key: str) -> str | None:
        return recall(self.runtime, self.session_id, key)

    def remember(self, key: str, value: str | None) -> None:
        remember(self.runtime, self.session_id, key, value)


def ask_user(
    runtime: Runtime, turn: Message, watcher: TurnWatcher, cancelled: CancelEvent, question: str, options: list[str],
    allow_freeform: bool = True,
) -> str | None:
    """Raise an `ask_user` card and wait for its answer; the turn is `waiting_for_answer` meanwhile.

    Returns the answer, "(dismissed)" when the owner dismissed the card, or None when the turn
    was stopped (the card then ends unanswered).
    """
    with write_transaction():
        card = questions.create_ask_user(turn.id, turn.session_id, question, options, turn.hops, allow_freeform)
        Message.update(status=TurnStatus.WAITING_FOR_ANSWER).where(
            (Message.id == turn.id) & (Message.status == TurnStatus.RUNNING)
        ).execute()
        events.record(turn.session_id, "question_asked", {"questionId": card.id, "question": question}, utcnow())
    runtime.signal_turn(turn.id)  # waiting callers return with pendingQuestions
    jobs.poke_delivery(runtime)
    watcher.pause()
    answer = None
    try:
        answer = _wait_for_answer(runtime, card.id, cancelled)
    finally:
        watcher.resume()
        if answer is None:
            Question.update(status=QuestionStatus.ENDED, answered_at=utcnow()).where(
                (Question.id == card.id) & (Question.status == QuestionStatus.PENDING)
            ).execute()
    with write_transaction():
        Message.update(status=TurnStatus.RUNNING).where(
            (Message.id == turn.id) & (Message.status == TurnStatus.WAITING_FOR_ANSWER)
        ).execute()
    release_connection()
    return answer


def _wait_for_answer(runtime: Runtime, question_id: str, cancelled: CancelEvent) -> str | None:
    """The answer, "(dismissed)", or None when the turn was stopped or the card ended unanswered."""

    def look() -> Look[str | None]:
        if cancelled.is_set():
            return settled(None)
        card = Question.get_by_id(question_id)
        if card.status == QuestionStatus.ANSWERED:
            return settled(card.answer)
        if card.status == QuestionStatus.DISMISSED:
            return settled("(dismissed)")
        if card.status != QuestionStatus.PENDING:
            return settled(None)
        return not_yet(None)

    # The answer arrives by signal; a stop is seen within the stop-poll period.
    return wait_on_signals(
        runtime, [keys.question_channel(runtime.config.namespace, question_id)], look,
        recheck_seconds=runtime.time("STOP_POLL_SECONDS"),
    )
