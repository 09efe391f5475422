"""Question cards (`!ask` → ask_user, answer_question) and non-blocking asks (docs/sessions.md#answer_question-stop-and-archive, docs/sessions.md#ask-list_questions-and-withdraw, docs/waiting.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clients import Agent, poll
from tests.support.conversations import event_lines
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

ASKING = "!ask Ship the migration tonight? | Yes | Wait"


@pytest.fixture
def waiting(relay: Relay, desk: Agent) -> dict[str, Any]:
    """A session desk started whose turn waits on an `!ask` card."""
    body = desk.ok("create_session", relay="this", text=ASKING, wait_seconds=30)
    assert body["status"] == "waiting_for_answer", body
    return body


def test_an_ask_card_makes_the_turn_wait_and_an_answer_resumes_it(relay: Relay, desk: Agent, waiting: dict[str, Any]) -> None:
    [card] = waiting["pendingQuestions"]
    assert card["id"].startswith("q_") and card["kind"] == "ask_user"
    assert card["question"] == "Ship the migration tonight?" and card["options"] == ["Yes", "Wait"]
    assert card["message_id"] == waiting["message_id"] and card["multiSelect"] is False
    read = desk.ok("read_session", relay="this", session=waiting["session"])
    assert read["pendingQuestions"] == [card]
    assert read["state"] == "running_turn"
    bob = relay.conversation("bob")
    answered = bob.ok("answer_question", relay="this", question_id=card["id"], choices=["wait"])
    assert answered == {**answered, "status": "answered", "question_id": card["id"], "session": waiting["session"],
                        "message_id": waiting["message_id"], "answer": "Wait"}
    done = desk.ok("wait", relay="this", session=waiting["session"], message_id=waiting["message_id"], wait_seconds=30)
    assert done["status"] == "done"
    assert done["reply"]["text"] == "echo: done\nanswer: Wait"
    assert desk.ok("read_session", relay="this", session=waiting["session"])["pendingQuestions"] == []


def test_the_owner_answers_a_card_with_free_text_from_the_inbox(relay: Relay, desk: Agent, waiting: dict[str, Any]) -> None:
    inbox = relay.owner.get("/api/v1/owner/inbox")
    assert inbox["cards"] == []
    [card] = inbox["questions"]
    assert card["session"] == waiting["session"] and card["kind"] == "ask_user"
    relay.owner.post(f"/api/v1/owner/questions/{card['id']}", {"answer": "Tomorrow morning"})
    done = desk.ok("wait", relay="this", session=waiting["session"], message_id=waiting["message_id"], wait_seconds=30)
    assert done["reply"]["text"].endswith("answer: Tomorrow morning")
    assert relay.owner.get("/api/v1/owner/inbox")["questions"] == []


def test_agents_cannot_answer_their_own_questions_asks_or_approval_cards(relay: Relay, desk: Agent, waiting: dict[str, Any]) -> None:
    card = waiting["pendingQuestions"][0]["id"]
    own = relay.agent_for(waiting["session"])
    bob = relay.conversation("bob")
    before = snapshot(relay)
    own.refused("answer_question", "REMOTE_RELAY_FORBIDDEN", relay="this", question_id=card, answer="Yes")
    asked = desk.ok("ask", question="Deploy?")["question_id"]
    bob.refused("answer_question", "REMOTE_RELAY_FORBIDDEN", relay="this", question_id=asked, answer="y")
    desk.refused("answer_question", "REMOTE_RELAY_FORBIDDEN", relay="this", question_id="card_0123456789ab", answer="y")
    after = snapshot(relay)
    # Only the ask itself was added.
    assert after["counts"] == {**before["counts"], "Question": before["counts"]["Question"] + 1}


def test_stopping_a_waiting_turn_ends_its_card(relay: Relay, desk: Agent, waiting: dict[str, Any]) -> None:
    assert desk.ok("stop", relay="this", session=waiting["session"])["acknowledgement"] == "stop-queued"
    stopped = desk.ok("wait", relay="this", session=waiting["session"], message_id=waiting["message_id"], wait_seconds=10)
    assert stopped["status"] == "stopped"
    assert relay.owner.get("/api/v1/owner/inbox")["questions"] == []


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ({"choices": ["Maybe"]}, "choices must be among the question's options"),
        ({"choices": ["Yes", "Wait"]}, "takes one choice"),
        ({"choices": []}, "needs question_id"),  # an empty list is "not given"…
        ({}, "Give choices"),
        ({"answer": "x" * 100_001}, "the limit is 100,000"),
    ],
)
def test_bad_answers_are_refused_and_change_nothing(
    relay: Relay, desk: Agent, waiting: dict[str, Any], answer: dict[str, Any], fragment: str
) -> None:
    card = waiting["pendingQuestions"][0]["id"]
    bob = relay.conversation("bob")
    # The waiting turn's worker moves its heartbeat on meanwhile: liveness, not a change.
    before = snapshot(relay, heartbeats=False)
    args = {"question_id": card, **answer} if "needs question_id" not in fragment else {"choices": []}
    body = bob.refused("answer_question", "REMOTE_RELAY_INVALID_INPUT", relay="this", **args)
    assert fragment in body["error"] and body["error"].endswith("Nothing was sent.")
    assert snapshot(relay, heartbeats=False) == before


def test_an_answered_card_cannot_be_answered_again(relay: Relay, desk: Agent, waiting: dict[str, Any]) -> None:
    card = waiting["pendingQuestions"][0]["id"]
    bob = relay.conversation("bob")
    bob.ok("answer_question", relay="this", question_id=card, choices=["Yes"])
    again = bob.refused("answer_question", "REMOTE_RELAY_INVALID_INPUT", relay="this", question_id=card, choices=["Wait"])
    assert "is answered, not pending" in again["error"]
    bob.refused("answer_question", "REMOTE_RELAY_NOT_FOUND", relay="this", question_id="q_nosuch", answer="x")
    status, body = relay.owner.request("POST", f"/api/v1/owner/questions/{card}", {"answer": "late"})
    assert status == 400 and body["code"] == "REMOTE_RELAY_INVALID_INPUT"


def test_ask_returns_at_once_and_the_answer_arrives_as_a_relay_event(relay: Relay, desk: Agent) -> None:
    asked = desk.ok("ask", question="Ship the migration tonight?", options=["Yes", "Wait"], recommendation="Wait")
    assert asked["status"] == "pending" and asked["question_id"].startswith("ask_")
    assert asked["summary"] == f"ask → desk: question {asked['question_id'][:7]}… pending"
    listed = desk.ok("list_questions")["questions"]
    assert [q["status"] for q in listed] == ["pending"]
    [card] = relay.owner.get("/api/v1/owner/inbox")["questions"]
    assert card["kind"] == "ask" and card["recommendation"] == "Wait" and card["session"] == desk.session_id
    relay.owner.post(f"/api/v1/owner/questions/{asked['question_id']}", {"choices": ["Wait"]})
    expected = (
        "[relay event · automated message from OAR, not from the user; it approves nothing]\n"
        f'[relay event] question_answered: {asked["question_id"][:7]}… "Ship the migration tonight?" → "Wait" (via desk)'
    )
    assert poll("the question_answered event", lambda: expected in event_lines(relay, desk.session_id))
    [answered] = desk.ok("list_questions")["questions"]
    assert answered == {**answered, "status": "answered", "answer": "Wait", "choices": ["Wait"], "via": "desk"}
    assert answered["answeredAt"]


def test_an_ask_about_another_session_shows_there_and_both_hear_the_dismissal(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("release")
    asked = desk.ok("ask", relay="this", question="Merge the release branch?", session=other.session_id)
    shown = other.ok("read_session", relay="this", session=other.session_id)["pendingQuestions"]
    assert [q["id"] for q in shown] == [asked["question_id"]]
    relay.owner.post(f"/api/v1/owner/questions/{asked['question_id']}", {"dismiss": True})
    line = f'question_answered: {asked["question_id"][:7]}… "Merge the release branch?" → dismissed (via desk)'
    for session_id in (desk.session_id, other.session_id):
        assert poll("the dismissal", lambda sid=session_id: any(line in t for t in event_lines(relay, sid)))
    assert desk.ok("list_questions", session=other.session_id)["questions"][0]["status"] == "dismissed"


def test_only_the_asker_withdraws(relay: Relay, desk: Agent) -> None:
    asked = desk.ok("ask", question="Rotate the keys?")["question_id"]
    relay.conversation("bob").refused("withdraw", "REMOTE_RELAY_FORBIDDEN", question_id=asked)
    assert desk.ok("withdraw", question_id=asked)["status"] == "withdrawn"
    assert desk.ok("list_questions")["questions"][0]["status"] == "withdrawn"
    desk.refused("withdraw", "REMOTE_RELAY_INVALID_INPUT", question_id=asked)
    assert relay.owner.get("/api/v1/owner/inbox")["questions"] == []


def test_at_most_20_pending_asks_per_conversation(relay: Relay, desk: Agent) -> None:
    for number in range(20):
        desk.ok("ask", question=f"Question {number}?")
    before = snapshot(relay)
    desk.refused("ask", "REMOTE_RELAY_QUESTION_LIMIT", question="One more?")
    assert snapshot(relay) == before


def test_asks_end_silently_when_their_session_is_archived(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("release")
    asked = desk.ok("ask", question="Tag it?", session=other.session_id)["question_id"]
    relay.owner.post(f"/api/v1/owner/sessions/{other.session_id}/archive")
    assert desk.ok("list_questions")["questions"][0] == {
        **desk.ok("list_questions")["questions"][0], "question_id": asked, "status": "ended"}
    assert relay.owner.get("/api/v1/owner/inbox")["questions"] == []
    assert event_lines(relay, desk.session_id) == []


def test_own_asks_work_while_agent_sessions_are_off(relay: Relay, desk: Agent) -> None:
    other = relay.conversation("release")
    relay.settings(agent_sessions_enabled=False)
    asked = desk.ok("ask", question="Are we shipping?")["question_id"]
    assert desk.ok("list_questions")["questions"][0]["question_id"] == asked
    desk.refused("ask", "REMOTE_RELAY_LOCAL_DISABLED", question="And them?", session=other.session_id)
    assert desk.ok("withdraw", question_id=asked)["status"] == "withdrawn"
