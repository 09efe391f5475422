"""Bad input to answer_question, ask, list_questions and withdraw is refused in the documented shape
and changes nothing (docs/calling.md, docs/sessions.md#answer_question-stop-and-archive, docs/sessions.md#ask-list_questions-and-withdraw, docs/errors.md): the table of tests/support/bad_input/questions.py.

Every case runs in-process through the dispatcher with the database's write counts
(tests/support/bad_input/in_process.py); one also runs over real HTTP with the full snapshot."""

from __future__ import annotations

import pytest

from tests.support.bad_input.in_process import WorldKeeper, assert_case_refused_in_process
from tests.support.bad_input.questions import CASES, VALID
from tests.support.bad_input.world import Case, World, assert_case_refused

ASKING = "!ask Ship the migration tonight? | Yes | Wait"
# Over real HTTP too: a case refused on what the question card is (its options).
OVER_HTTP = ("answer_question-choices-unknown-option",)


def add_questions(world: World) -> None:
    """A question card a session desk started waits on, and asks."""
    waiting = world.desk.ok("create_session", relay="this", text=ASKING, wait_seconds=30)
    assert waiting["status"] == "waiting_for_answer", waiting
    world.refs["<card>"] = waiting["pendingQuestions"][0]["id"]
    world.callers["asker"] = world.relay.agent_for(waiting["session"])
    world.heartbeats_move = True
    world.refs["<ask>"] = world.desk.ok("ask", question="Rotate the keys?")["question_id"]
    other = world.relay.agent_for(world.refs["<other>"])
    world.refs["<others_ask>"] = other.ok("ask", question="Tag the release?")["question_id"]
    withdrawn = world.desk.ok("ask", question="Clean the cache?")["question_id"]
    world.desk.ok("withdraw", question_id=withdrawn)
    world.refs["<withdrawn_ask>"] = withdrawn


@pytest.fixture
def question_world(world: World) -> World:
    """The shared world, plus a question card a session desk started waits on, and asks."""
    add_questions(world)
    return world


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_question_input_is_refused_and_changes_nothing(kept_worlds: WorldKeeper, bad: Case) -> None:
    assert_case_refused_in_process(kept_worlds.get("questions", add_questions), bad)


@pytest.mark.parametrize("bad", [c for c in CASES if c.id in OVER_HTTP], ids=lambda c: c.id)
def test_over_http_bad_question_input_is_refused_and_changes_nothing(question_world: World, bad: Case) -> None:
    assert_case_refused(question_world, bad)


def test_the_valid_question_arguments_succeed(question_world: World) -> None:
    """The table's cases spoil one thing each: without it, every action succeeds."""
    world = question_world
    assert world.desk.ok("list_questions", **world.fill(VALID["list_questions"]))["questions"]
    assert world.desk.ok("answer_question", **world.fill(VALID["answer_question"]))["status"] == "answered"
    assert world.desk.ok("withdraw", **world.fill(VALID["withdraw"]))["status"] == "withdrawn"
    assert world.desk.ok("ask", **world.fill(VALID["ask"]))["status"] == "pending"
