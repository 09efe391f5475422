"""The owner's Inbox: pending approval cards and questions, Allow or Deny, and answers given
as the owner (docs/rules.md#approval-cards, docs/waiting.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from oar.approvals import cards, questions
from oar.core import defaults
from oar.core.errors import invalid, refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.models import Question, Session
from oar.core.runtime import Runtime
from oar.core.statuses import CardStatus, DecidedVia, QuestionStatus
from oar.core.timeutil import iso, utcnow
from oar.schedules import schedules
from oar.turns import automated

CHANGED_NOTHING = "Nothing was changed."

DECISION = {"decision": Param("str", required=True, choices=cards.DECISIONS,
                              description="allow (remembering what the card may remember), allow_once or deny")}
ANSWER = {"answer": Param("str", max_length=100_000), "choices": Param("list"), "dismiss": Param("bool")}


def pending_questions() -> list[dict[str, Any]]:
    """Every pending question card and ask across sessions, oldest first."""
    pending = (
        Question.select(Question, Session.id, Session.title)
        .join(Session)
        .where((Question.status == QuestionStatus.PENDING) & Session.live())
        .order_by(Question.created_at)
    )
    listed = []
    for question in pending:
        entry = questions.shape(question)
        entry.update(
            session=question.session_id, sessionTitle=question.session.title, askedBy=question.asker_session_id,
            recommendation=question.recommendation, detail=question.detail, createdAt=iso(question.created_at),
        )
        listed.append(entry)
    return listed


def pending_count() -> int:
    """How many cards and questions wait for the owner (the page's Inbox badge)."""
    waiting = (
        Question.select().join(Session)
        .where((Question.status == QuestionStatus.PENDING) & Session.live())
        .count()
    )
    return waiting + cards.pending_count()


def inbox(runtime: Runtime) -> dict[str, list[dict[str, Any]]]:
    """Every pending approval card and question, across sessions, and those decided lately with how."""
    return {"cards": cards.pending(), "questions": pending_questions(), "decided": decided_lately(utcnow())}


def decided_lately(now: datetime) -> list[dict[str, Any]]:
    """Cards and questions decided, answered or ended within `INBOX_DECIDED_SECONDS`, newest
    first: what happened to each, when, and how the owner decided it (docs/notifications.md#how-it-was-decided)."""
    since = now - timedelta(seconds=defaults.INBOX_DECIDED_SECONDS)
    shown = defaults.INBOX_DECIDED_SHOWN
    entries = cards.decided_since(since, shown)
    answered = (
        Question.select(Question, Session.id, Session.title).join(Session)
        .where((Question.status != QuestionStatus.PENDING) & (Question.answered_at >= since)
               & Session.live())
        .order_by(Question.answered_at.desc()).limit(shown)
    )
    for question in answered:
        entries.append({
            **questions.shape(question), "status": question.status, "answer": question.answer,
            "session": question.session_id, "sessionTitle": question.session.title,
            "createdAt": iso(question.created_at), "decidedAt": iso(question.answered_at),
            "decidedVia": question.decided_via, "decidedChannel": question.decided_channel,
        })
    entries.sort(key=lambda entry: entry["decidedAt"] or "", reverse=True)
    return entries[:shown]


def decide_card(runtime: Runtime, card_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The owner's Allow or Deny on an approval card, given as `{"decision": "allow"|"allow_once"|"deny"}`."""
    args, _ = check_fields("decide", DECISION, payload, strict=True, nothing=CHANGED_NOTHING)
    return decide(runtime, card_id, args["decision"])


def decide(
    runtime: Runtime, card_id: str, decision: str, via: DecidedVia = DecidedVia.API, channel: str | None = None,
) -> dict[str, Any]:
    """Allow or Deny (`decision`: one of `cards.DECISIONS`), recorded with how it was given; an
    Allow on the loop card starts the count over, so the schedule firings held by loop
    protection go out now (docs/schedules.md)."""
    card = cards.decide(runtime, card_id, decision, via, channel)
    if card["status"] == CardStatus.ALLOWED and "loop" in card["reasons"]:
        schedules.release_held(runtime, card["session"]["id"], utcnow())
    return card


@refusals_ending(CHANGED_NOTHING)
def answer_question(
    runtime: Runtime, question_id: str, payload: dict[str, Any], via: DecidedVia = DecidedVia.API,
    channel: str | None = None,
) -> dict[str, Any]:
    """The owner answers or dismisses a question card (ask_user or ask), recorded with how."""
    args, _ = check_fields("answer", ANSWER, payload, strict=True, nothing=CHANGED_NOTHING)
    question = questions.find(question_id, runtime.relay_name())
    if args.get("dismiss"):
        if question.status != QuestionStatus.PENDING:
            raise invalid(f"Question {question.id} is {question.status}, not pending.")
        status, answer, choices = QuestionStatus.DISMISSED, None, None
    else:
        status = QuestionStatus.ANSWERED
        answer, choices = questions.checked_answer(question, args.get("answer"), args.get("choices"))
    if not questions.settle(runtime, question, status=status, answer=answer, choices=choices, via=runtime.relay_name(),
                            decided_via=via, decided_channel=channel):
        raise invalid(f"Question {question.id} was settled meanwhile.")
    if question.kind == "ask":
        automated.announce_answer(runtime, question)
    return questions.listed(Question.get_by_id(question.id))
