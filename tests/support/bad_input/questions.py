"""The bad-input table of answer_question, ask, list_questions and withdraw (docs/calling.md, docs/sessions.md#answer_question-stop-and-archive, docs/sessions.md#ask-list_questions-and-withdraw).

Cases may point at "<card>" (an ask_user question card a session desk started waits on, its
options "Yes" and "Wait"), "<ask>" (a pending ask desk made), "<others_ask>" (one `other`
made) and "<withdrawn_ask>" (one desk made and withdrew). answer_question takes `relay` as
required; ask, list_questions and withdraw as optional (= "this").
"""

from __future__ import annotations

from typing import Any

from tests.support.bad_input.world import FORBIDDEN, INVALID, NOT_FOUND, REMOVE, UNKNOWN_RELAY, Case, spoil

VALID = {
    "answer_question": {"relay": "this", "question_id": "<card>", "choices": ["Yes"]},
    "ask": {"question": "Deploy tonight?"},
    "list_questions": {},
    "withdraw": {"question_id": "<ask>"},
}
ASKED = "ask: options must be a list of up to 10 texts of 1 to 200 characters. Nothing was asked."


def case(action: str, name: str, code: str, changes: dict[str, Any], **options: Any) -> Case:
    return Case(id=f"{action}-{name}", action=action, args=spoil(VALID[action], changes), code=code, **options)


def _answer_question() -> list[Case]:
    aq = "answer_question"
    return [
        case(aq, "relay-missing", INVALID, {"relay": REMOVE}, says="answer_question needs relay"),
        case(aq, "relay-number", INVALID, {"relay": 7}, says="relay must be text"),
        case(aq, "relay-unknown", UNKNOWN_RELAY, {"relay": "build-box"}, says='No relay is named "build-box"'),
        case(aq, "question_id-missing", INVALID, {"question_id": REMOVE},
             exact="answer_question needs question_id (a question id (q_… or ask_…)). Nothing was sent."),
        case(aq, "question_id-number", INVALID, {"question_id": 5}, says="question_id must be text"),
        case(aq, "question_id-too-long", INVALID, {"question_id": "q" * 65}, says="the limit is 64"),
        case(aq, "question_id-unknown", NOT_FOUND, {"question_id": "q_nosuch"},
             exact='Relay "desk" has no question "q_nosuch". Nothing was sent.'),
        case(aq, "an-approval-card", FORBIDDEN, {"question_id": "card_0123456789ab"},
             exact="Approval cards are the owner's to decide. Nothing was sent."),
        case(aq, "an-ask-of-the-user", FORBIDDEN, {"question_id": "<others_ask>"},
             says="was asked of the user; only the owner answers it."),
        case(aq, "choices-text", INVALID, {"choices": "Yes"}, says="choices must be a list"),
        case(aq, "choices-unknown-option", INVALID, {"choices": ["Maybe"]},
             says="""choices must be among the question's options ("Yes", "Wait")."""),
        case(aq, "choices-two-for-one", INVALID, {"choices": ["Yes", "Wait"]}, says="takes one choice"),
        case(aq, "choices-numbers", INVALID, {"choices": [1]}, says="choices must be among the question's options"),
        case(aq, "answer-number", INVALID, {"choices": REMOVE, "answer": 5}, says="answer must be text"),
        case(aq, "answer-too-long", INVALID, {"choices": REMOVE, "answer": "x" * 100_001},
             says="the limit is 100,000"),
        case(aq, "neither-choices-nor-answer", INVALID, {"choices": REMOVE},
             says="Give choices (a list of options) or answer (text)."),
        case(aq, "by-the-session-that-waits", FORBIDDEN, {}, caller="asker",
             says="An agent cannot answer its own questions."),
    ]


def _ask() -> list[Case]:
    return [
        case("ask", "question-missing", INVALID, {"question": REMOVE}, says="ask needs question"),
        case("ask", "question-blank-is-absent", INVALID, {"question": "  "}, says="ask needs question"),
        case("ask", "question-number", INVALID, {"question": 5}, says="question must be text"),
        case("ask", "question-too-long", INVALID, {"question": "q" * 2_001}, says="the limit is 2,000"),
        case("ask", "options-text", INVALID, {"options": "yes or no"}, says="options must be a list"),
        case("ask", "options-eleven", INVALID, {"options": [f"option {n}" for n in range(11)]}, exact=ASKED),
        case("ask", "options-blank", INVALID, {"options": ["Yes", "  "]}, exact=ASKED),
        case("ask", "options-number", INVALID, {"options": [1, 2]}, exact=ASKED),
        case("ask", "options-too-long", INVALID, {"options": ["o" * 201]}, exact=ASKED),
        case("ask", "recommendation-too-long", INVALID, {"recommendation": "r" * 2_001}, says="the limit is 2,000"),
        case("ask", "detail-too-long", INVALID, {"detail": "d" * 20_001}, says="the limit is 20,000"),
        case("ask", "detail-number", INVALID, {"detail": 5}, says="detail must be text"),
        case("ask", "session-number", INVALID, {"session": 5}, says="session must be text"),
        case("ask", "session-too-long", INVALID, {"session": "s" * 65}, says="the limit is 64"),
        case("ask", "session-unknown", NOT_FOUND, {"session": "nosuchsession"},
             says='Relay "desk" has no session "nosuchsession".'),
        case("ask", "session-archived", INVALID, {"session": "<archived>"}, says="is archived. Nothing was asked."),
        case("ask", "relay-number", INVALID, {"relay": 7}, says="relay must be text"),
        case("ask", "relay-unknown", UNKNOWN_RELAY, {"relay": "build-box"}, says='No relay is named "build-box"'),
    ]


def _list_questions() -> list[Case]:
    lq = "list_questions"
    return [
        case(lq, "session-number", INVALID, {"session": 5}, says="session must be text"),
        case(lq, "session-too-long", INVALID, {"session": "s" * 65}, says="the limit is 64"),
        case(lq, "session-unknown", NOT_FOUND, {"session": "nosuchsession"},
             exact='Relay "desk" has no session "nosuchsession".'),
        case(lq, "relay-list", INVALID, {"relay": ["this"]}, says="relay must be text"),
        case(lq, "relay-unknown", UNKNOWN_RELAY, {"relay": "build-box"}, says='No relay is named "build-box"'),
    ]


def _withdraw() -> list[Case]:
    wd = "withdraw"
    return [
        case(wd, "question_id-missing", INVALID, {"question_id": REMOVE}, says="withdraw needs question_id"),
        case(wd, "question_id-number", INVALID, {"question_id": 5}, says="question_id must be text"),
        case(wd, "question_id-too-long", INVALID, {"question_id": "q" * 65}, says="the limit is 64"),
        case(wd, "question_id-unknown", NOT_FOUND, {"question_id": "ask_nosuch"},
             exact='Relay "desk" has no question "ask_nosuch". Nothing was withdrawn.'),
        case(wd, "someone-elses-ask", FORBIDDEN, {"question_id": "<others_ask>"},
             exact="Only the conversation that asked <others_ask> can withdraw it. Nothing was withdrawn."),
        case(wd, "a-question-card", FORBIDDEN, {"question_id": "<card>"}, says="Only the conversation that asked"),
        case(wd, "already-withdrawn", INVALID, {"question_id": "<withdrawn_ask>"},
             exact="Question <withdrawn_ask> is no longer pending. Nothing was withdrawn."),
        case(wd, "relay-number", INVALID, {"relay": 7}, says="relay must be text"),
        case(wd, "relay-unknown", UNKNOWN_RELAY, {"relay": "build-box"}, says='No relay is named "build-box"'),
    ]


CASES = _answer_question() + _ask() + _list_questions() + _withdraw()
