"""Question cards (docs/sessions.md#answer_question-stop-and-archive, docs/sessions.md#ask-list_questions-and-withdraw, docs/waiting.md).

Two kinds share one table and one shape:
- `ask_user`: a session's agent waits on it mid-turn (the echo provider's `!ask`); another
  session's agent answers it with `answer_question`, or the owner does;
- `ask`: a non-blocking question from a conversation to the human (optionally about another
  session); only the owner answers or dismisses it, and the asking conversation (and that
  session) then receive the `question_answered` relay event as an automated message.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import peewee as pw

from oar.core import events, ids, jobs, keys
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.models import Message, Question, Session
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import DecidedVia, QuestionStatus, TurnStatus
from oar.core.timeutil import iso, utcnow

# Pending asks per asking conversation and per target session (docs/sessions.md#ask-list_questions-and-withdraw).
MAX_PENDING_ASKS = 20
# Answered, dismissed, withdrawn and ended asks stay listed this long.
LISTED_AFTER_ENDING = timedelta(days=1)


def shape(question: Question) -> dict[str, Any]:
    """The one shape of a pending question, used everywhere (docs/concepts.md#questions)."""
    return {
        "id": question.id,
        "kind": question.kind,
        "question": question.question,
        "header": question.header,
        "options": question.options or [],
        "multiSelect": question.multi_select,
        "allowFreeform": question.allow_freeform,
        "message_id": question.turn_id,
    }


def pending_in_session(session_id: str) -> list[dict[str, Any]]:
    """Every pending question shown in the session: its own cards and asks about it."""
    return [shape(row) for row in _PENDING_IN_SESSION.rows(session_id)]


# Read by every read_session: its SQL built once (oar/core/prepared.py).
_PENDING_IN_SESSION = Prepared(
    lambda session_id: Question.select()
    .where((Question.session == session_id) & (Question.status == QuestionStatus.PENDING))
    .order_by(Question.created_at)
)


def pending_exists() -> Any:
    """Whether the session of the enclosing query (its `Session.id`) has pending questions,
    as one SQL expression: read_session asks it in the query that reads the session, and
    reads the questions only when there are some."""
    return pw.fn.EXISTS(
        Question.select(Question.id).where((Question.session == Session.id) & (Question.status == QuestionStatus.PENDING))
    )


def pending_of_turn(turn_id: str) -> list[dict[str, Any]]:
    rows = Question.select().where((Question.turn_id == turn_id) & (Question.status == QuestionStatus.PENDING))
    return [shape(row) for row in rows.order_by(Question.created_at)]


def create_ask_user(
    turn_id: str, session_id: str, question: str, options: list[str], hops: int, allow_freeform: bool = True
) -> Question:
    """A card the running turn waits on (inside the caller's write transaction).

    `allow_freeform=False`: only one of the options answers it (an agent server's Allow/Deny).
    """
    return Question.create(
        id=ids.prefixed_id("q"), kind="ask_user", session=session_id, asker_session_id=session_id,
        turn_id=turn_id, question=question, options=options, allow_freeform=allow_freeform, hops=hops,
    )


def check_ask_limits(asker_id: str, target_id: str) -> None:
    """Refuses an ask over the pending limits (the caller adds what was not done, as for `find` and
    `checked_answer`: the dispatcher the action's sentence, the owner API its own)."""
    pending = Question.select().where((Question.kind == "ask") & (Question.status == QuestionStatus.PENDING))
    if pending.where(Question.asker_session_id == asker_id).count() >= MAX_PENDING_ASKS:
        raise ActionError(
            "REMOTE_RELAY_QUESTION_LIMIT",
            f"This conversation has {MAX_PENDING_ASKS} questions pending; wait for answers or withdraw one.",
        )
    if pending.where(Question.session == target_id).count() >= MAX_PENDING_ASKS:
        raise ActionError(
            "REMOTE_RELAY_QUESTION_LIMIT",
            f"Session {target_id[:8]} has {MAX_PENDING_ASKS} questions pending.",
        )


def create_ask(
    asker: Session, target: Session, question: str, options: list[str], recommendation: str | None,
    detail: str | None, hops: int,
) -> Question:
    return Question.create(
        id=ids.prefixed_id("ask"), kind="ask", session=target, asker_session_id=asker.id, question=question,
        options=options, allow_freeform=True, recommendation=recommendation, detail=detail, hops=hops,
    )


def find(question_id: str, relay_name: str) -> Question:
    question = Question.get_or_none(Question.id == (question_id or "").strip())
    if question is None:
        raise not_found(f'Relay "{relay_name}" has no question "{question_id[:64]}".')
    return question


def checked_answer(
    question: Question, answer: str | None, choices: list[Any] | None
) -> tuple[str, list[str] | None]:
    """The answer text and the chosen options, or INVALID_INPUT (nothing recorded)."""
    if question.status != QuestionStatus.PENDING:
        raise invalid(f"Question {question.id} is {question.status}, not pending.")
    options = question.options or []
    picked: list[str] | None = None
    if choices is not None:
        by_text = {option.casefold(): option for option in options}
        unknown = [c for c in choices if not isinstance(c, str) or c.casefold() not in by_text]
        if unknown or not choices:
            listed = ", ".join(f'"{o}"' for o in options) or "none"
            raise invalid(f"choices must be among the question's options ({listed}).")
        picked = [by_text[c.casefold()] for c in choices]
        if len(picked) > 1 and not question.multi_select:
            raise invalid(f"Question {question.id} takes one choice.")
    if answer is None and picked is None:
        raise invalid("Give choices (a list of options) or answer (text).")
    if answer is not None and not question.allow_freeform and answer.casefold() not in {o.casefold() for o in options}:
        raise invalid(f"Question {question.id} takes one of its options, not free text.")
    return (answer if answer is not None else ", ".join(picked or [])), picked


def settle(
    runtime: Runtime, question: Question, *, status: QuestionStatus, answer: str | None, choices: list[str] | None,
    via: str, decided_via: DecidedVia | None = None, decided_channel: str | None = None,
) -> bool:
    """Record an answer or dismissal once and wake the turn that waits on it; `decided_via` and
    `decided_channel`: how the owner gave it (None for an agent's answer).

    False when the question was no longer pending. Telling the asking conversation about an
    answered `ask` is `automated.announce_answer`'s job.
    """
    now = utcnow()
    with write_transaction():
        changed = (
            Question.update(status=status, answer=answer, choices=choices, via=via, answered_at=now,
                            decided_via=decided_via, decided_channel=decided_channel)
            .where((Question.id == question.id) & (Question.status == QuestionStatus.PENDING))
            .execute()
        )
        if changed:
            events.record(
                question.session_id, "question_answered",
                {"questionId": question.id, "question": question.question,
                 "answer": answer if status == QuestionStatus.ANSWERED else "(dismissed)"},
                now,
            )
        if changed and question.turn_id:
            # The waiting turn runs again from this moment: a `wait` now waits for its reply.
            Message.update(status=TurnStatus.RUNNING).where(
                (Message.id == question.turn_id) & (Message.status == TurnStatus.WAITING_FOR_ANSWER)
            ).execute()
    if not changed:
        return False
    publish(runtime.redis, keys.question_channel(runtime.config.namespace, question.id))

    jobs.poke_delivery(runtime)
    return True


def event_line(question: Question) -> str:
    """`[relay event] question_answered: ask_7d2… "Ship the migration…?" → "Wait" (via desk)`."""
    text = question.question if len(question.question) <= 60 else question.question[:59] + "…"
    outcome = "dismissed" if question.status == QuestionStatus.DISMISSED else f'"{question.answer}"'
    return f'[relay event] question_answered: {question.id[:7]}… "{text}" → {outcome} (via {question.via})'


def end_for_session(session_id: str, now: datetime) -> None:
    """Asks about an archived or deleted session end silently; its own cards end too."""
    Question.update(status=QuestionStatus.ENDED, answered_at=now).where(
        (Question.session == session_id) & (Question.status == QuestionStatus.PENDING)
    ).execute()


def listed(question: Question) -> dict[str, Any]:
    return {
        "question_id": question.id,
        "session": question.session_id,
        "question": question.question,
        "options": question.options or [],
        "status": question.status,
        "answer": question.answer,
        "choices": question.choices,
        "via": question.via,
        "answeredAt": iso(question.answered_at),
    }


def asks_of(asker_id: str, about: str | None, now: datetime) -> pw.ModelSelect[Question]:
    """A conversation's asks: pending, and those that ended within a day."""
    query = Question.select().where(
        (Question.kind == "ask")
        & (Question.asker_session_id == asker_id)
        & ((Question.status == QuestionStatus.PENDING) | (Question.answered_at >= now - LISTED_AFTER_ENDING))
    )
    if about:
        query = query.where(Question.session == about)
    return query.order_by(Question.created_at)
