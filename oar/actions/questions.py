"""answer_question, ask, list_questions and withdraw (docs/sessions.md#answer_question-stop-and-archive, docs/sessions.md#ask-list_questions-and-withdraw)."""

from __future__ import annotations

from typing import Any

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import cards, questions
from oar.core import jobs
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid
from oar.core.fields import Param
from oar.core.shapes import RELAY
from oar.core.statuses import QuestionStatus
from oar.core.words import plural
from oar.sessions import sessions

QUESTION_ID = Param("str", required=True, max_length=64, description="a question id (q_… or ask_…)")
ANSWER = Param("str", max_length=100_000, description="the answer as text")


@action("answer_question",
    params={
        "relay": RELAY,
        "question_id": QUESTION_ID,
        "choices": Param("list", items=Param("str"), description="the options picked, as the question lists them"),
        "answer": ANSWER,
    },
    level="full",
    writes=True,
    nothing="Nothing was sent.",
)
def answer_question(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Answer a question card another session's agent waits on (ask your user first unless told you may decide)."""
    nothing = "Nothing was sent."
    if args["question_id"].strip().startswith("card_"):
        raise ActionError("REMOTE_RELAY_FORBIDDEN", "Approval cards are the owner's to decide.")
    question = questions.find(args["question_id"], ctx.relay_name)
    ctx.view.check(question.session)
    if question.kind == "ask":
        raise ActionError(
            "REMOTE_RELAY_FORBIDDEN", f"Question {question.id} was asked of the user; only the owner answers it."
        )
    if question.session_id == ctx.caller_session.id:
        raise ActionError("REMOTE_RELAY_FORBIDDEN", "An agent cannot answer its own questions.")
    answer, choices = questions.checked_answer(question, args.get("answer"), args.get("choices"))
    cards.approve(ctx, cards.Request(
        action="answer_question", nothing=nothing, target=question.session, excerpt=answer,
        lines=(f"Question: {question.question[:200]}",),
    ))
    answered = QuestionStatus.ANSWERED
    if not questions.settle(ctx.runtime, question, status=answered, answer=answer, choices=choices, via=ctx.relay_name):
        raise invalid(f"Question {question.id} was answered meanwhile.")
    return {
        "summary": f"answer_question → {ctx.relay_name} session {question.session_id[:8]}: {question.id} answered",
        "status": QuestionStatus.ANSWERED,
        "question_id": question.id,
        "session": question.session_id,
        "message_id": question.turn_id,
        "answer": answer,
    }


@action("ask",
    params={
        "relay": RELAY,
        # Its refusal when missing stays "ask needs question." without the description.
        "question": Param("str", required=True, max_length=2_000, description="the question for the user", hint_when_missing=False),
        "options": Param(
            "list", items=Param("str", max_length=200), max_items=10, description="answers the user may pick from"
        ),
        "recommendation": Param("str", max_length=2_000, description="the answer this agent recommends, and why"),
        "detail": Param("str", max_length=20_000, description="background the user may need to answer"),
        "session": Param("str", max_length=64, description="the session the question is about; default: this one"),
    },
    level="prompt",
    writes_with="session",
    relay_optional=True,
    nothing="Nothing was asked.",
)
def ask(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Ask the user a question without waiting; the answer arrives later as a relay event."""
    nothing = "Nothing was asked."
    options = args.get("options") or []
    if len(options) > 10 or not all(isinstance(o, str) and o.strip() and len(o) <= 200 for o in options):
        raise invalid("ask: options must be a list of up to 10 texts of 1 to 200 characters.")
    target = ctx.caller_session
    if args.get("session") and not sessions.is_same(args["session"], ctx.caller_session):
        target = ctx.session(args["session"])
        if target.archived:
            raise invalid(f"Session {target.id[:8]} is archived.")
    questions.check_ask_limits(ctx.caller_session.id, target.id)
    if target.id != ctx.caller_session.id:  # a write only about another session (docs/calling.md#levels-and-write-actions)
        cards.approve(ctx, cards.Request(action="ask", nothing=nothing, target=target, excerpt=args["question"]))
    with write_transaction():
        question = questions.create_ask(
            ctx.caller_session, target, args["question"].strip(), [o.strip() for o in options],
            args.get("recommendation"), args.get("detail"), ctx.hops(),
        )
    jobs.poke_notifications(ctx.runtime)  # the owner hears of it (docs/notifications.md)
    return {
        "summary": f"ask → {ctx.relay_name}: question {question.id[:7]}… pending",
        "question_id": question.id,
        "status": QuestionStatus.PENDING,
        "session": target.id,
    }


@action("list_questions",
    params={"relay": RELAY, "session": Param("str", max_length=64, description="only the asks about this session")},
    level="read",
    relay_optional=True,
)
def list_questions(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """This conversation's asks: pending, and those answered, dismissed, withdrawn or ended within a day."""
    about = ctx.session(args["session"]).id if args.get("session") else None
    rows = [questions.listed(q) for q in questions.asks_of(ctx.caller_session.id, about, ctx.now)]
    pending = sum(1 for q in rows if q["status"] == QuestionStatus.PENDING)
    return {
        "summary": f"list_questions → {ctx.relay_name}: {plural(len(rows), 'question')}, {pending} pending",
        "questions": rows,
    }


@action("withdraw",
    params={"relay": RELAY, "question_id": QUESTION_ID},
    level="prompt",
    writes=True,
    relay_optional=True,
    nothing="Nothing was withdrawn.",
)
def withdraw(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Withdraw a pending ask this conversation made."""
    nothing = "Nothing was withdrawn."
    question = questions.find(args["question_id"], ctx.relay_name)
    if question.kind != "ask" or question.asker_session_id != ctx.caller_session.id:
        raise ActionError("REMOTE_RELAY_FORBIDDEN", f"Only the conversation that asked {question.id} can withdraw it.")
    if question.status == QuestionStatus.PENDING:
        cards.approve(ctx, cards.Request(action="withdraw", nothing=nothing, lines=(f"Question: {question.question[:200]}",)))
    withdrawn = QuestionStatus.WITHDRAWN
    if not questions.settle(ctx.runtime, question, status=withdrawn, answer=None, choices=None, via=ctx.relay_name):
        raise invalid(f"Question {question.id} is no longer pending.")
    return {
        "summary": f"withdraw → {ctx.relay_name}: question {question.id[:7]}… withdrawn",
        "question_id": question.id,
        "status": QuestionStatus.WITHDRAWN,
    }

