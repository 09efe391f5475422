"""`runs` providers (docs/providers.md#agent-servers): a Hermes-style agent server keeps the transcript; the relay
sends only the current turn, relays approvals and clarifications as `ask_user` cards, stops
runs, backfills a conversation that moves onto it once, and names the server's session once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from oar.core.db import database
from oar.core.models import Session
from oar.providers.base import Activity, TextDelta, Usage
from oar.providers.llm import StreamFailure, Thinking
from oar.providers.runs import (
    BACKFILL_CHARS,
    BACKFILL_HEADER,
    ApprovalRequest,
    ClarifyQuestion,
    ClarifyRequest,
    RunEnded,
    RunsParser,
    backfill_transcript,
    session_title,
    with_backfill,
)
from oar.providers.sse import SseEvent
from tests.fakes.llm import FakeLLM
from tests.fakes.runs import FakeRunsServer
from tests.support.clients import Agent, poll
from tests.support.relays import Relay


@pytest.fixture(scope="module")
def runs_server() -> Iterator[FakeRunsServer]:
    server = FakeRunsServer().start()
    yield server
    server.stop()


@pytest.fixture
def fake(runs_server: FakeRunsServer) -> FakeRunsServer:
    runs_server.reset()
    return runs_server


@pytest.fixture(scope="module")
def llm_server() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


def configure(relay: Relay, fake: FakeRunsServer, name: str = "hermes", **extra: Any) -> dict[str, Any]:
    body = {"kind": "runs", "base_url": fake.base_url, "api_key": fake.api_key, **extra}
    status, answer = relay.owner.request("PUT", f"/api/v1/owner/providers/{name}", body)
    assert status == 200, answer
    return answer


def start(desk: Agent, text: str, wait_seconds: int = 30, provider: str = "hermes") -> dict[str, Any]:
    return desk.ok("create_session", relay="this", provider=provider, text=text, wait_seconds=wait_seconds)


def agent_session_of(session_id: str) -> str | None:
    with database.connection_context():
        return Session.get_by_id(session_id).agent_session_id


def run_starts(fake: FakeRunsServer) -> list[dict[str, Any]]:
    return fake.bodies("POST", "/v1/runs")


def pending_card(desk: Agent, session: str) -> dict[str, Any]:
    def card() -> dict[str, Any] | None:
        pending = desk.ok("read_session", relay="this", session=session)["pendingQuestions"]
        return pending[0] if pending else None

    return poll("a question card", card)


# The parser (pure) ---------------------------------------------------------------------------


def frame(name: str, **fields: Any) -> SseEvent:
    return SseEvent("message", json.dumps({"event": name, "run_id": "run_1", "timestamp": 1.0, **fields}))


def test_the_parser_turns_run_events_into_turn_events() -> None:
    parser = RunsParser()
    assert parser.feed(frame("message.delta", delta="Hel")) == [TextDelta("Hel")]
    assert parser.feed(frame("reasoning.delta", delta="hmm")) == [Thinking("hmm")]
    assert parser.feed(frame("reasoning.available", text="Hello")) == []  # a replay of the answer
    assert parser.feed(frame("tool.started", tool="terminal", preview="ls -la")) == [Activity("terminal ls -la")]
    assert parser.feed(frame("tool.completed", tool="terminal", duration=0.2, error=False)) == []
    assert parser.feed(frame("tool.completed", tool="terminal", error=True)) == [Activity("terminal failed")]
    assert parser.feed(frame("approval.request", command="rm -rf build", description="recursive delete",
                             request_id="r1", choices=["once", "deny"])) == [ApprovalRequest("rm -rf build", "recursive delete", "r1")]
    assert parser.feed(frame("clarify.request", clarify_id="c1", question="Which?", choices=["a", "b"])) == [
        ClarifyRequest("c1", (ClarifyQuestion("Which?", ("a", "b")),))
    ]
    form = parser.feed(frame("clarify.request", clarify_id="c2", questions=[{"prompt": "Env?", "choices": None}]))
    assert form == [ClarifyRequest("c2", (ClarifyQuestion("Env?"),), form=True)]
    assert parser.feed(frame("run.completed", output="Hello", usage={"input_tokens": 3, "output_tokens": 2})) == [
        Usage(3, 2), RunEnded("completed", output="Hello")
    ]
    assert parser.feed(frame("run.failed", error="boom")) == [RunEnded("failed", error="boom")]
    assert parser.feed(frame("run.cancelled")) == [RunEnded("cancelled")]
    assert parser.feed(frame("approval.responded", choice="once")) == []
    assert parser.feed(SseEvent("message", "<html>")) == [StreamFailure("protocol", "an event that is not JSON: '<html>'")]


def test_the_backfill_is_the_last_200000_characters_of_a_plain_transcript() -> None:
    history = [{"role": "user", "text": "hello"}, {"role": "assistant", "text": "hi there"}, {"role": "event", "text": ""}]
    assert backfill_transcript(history) == "User: hello\n\nAssistant: hi there"
    assert backfill_transcript([]) is None
    long = backfill_transcript([{"role": "user", "text": "x" * (BACKFILL_CHARS + 10)}]) or ""
    assert len(long) == BACKFILL_CHARS and long.startswith("…x")
    assert with_backfill("now", None) == "now"
    assert with_backfill("now", "User: hello").startswith(BACKFILL_HEADER) and with_backfill("now", "User: hello").endswith("\n\nnow")


def test_the_session_title_is_oar_and_the_first_line_within_48_characters() -> None:
    assert session_title("\n  Fix the flaky test  \nmore detail") == "oar: Fix the flaky test"
    long = session_title("Refactor the authentication module and its tests please")
    assert len(long) == 48 and long.endswith("…") and long.startswith("oar: Refactor")


# Turns against the fake server -------------------------------------------------------------------


def test_a_turn_streams_the_reply_records_usage_and_the_agent_session(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    provider = configure(relay, fake, monthly_token_cap=1000)["provider"]
    assert provider["models"] == ["hermes-agent"] and provider["kind"] == "runs"
    body = start(desk, "hello there #tool")
    assert body["status"] == "done", body
    assert body["reply"]["text"] == "runs: hello there #tool" and body["reply"]["model"] == "hermes-agent"
    sent = run_starts(fake)[-1]
    assert sent == {"input": "hello there #tool", "clarify": True, "model": "hermes-agent"}
    headers = next(entry["headers"] for entry in fake.requests if entry["path"] == "/v1/runs")
    assert headers["Authorization"] == f"Bearer {fake.api_key}" and headers["Idempotency-Key"].startswith("oar-")
    run_id = next(iter(fake.runs))
    assert agent_session_of(body["session"]) == run_id  # the server keys a new session by its run
    read = desk.ok("read_session", relay="this", session=body["session"], include_activity=True)
    assert read["messages"][-1]["text"] == "runs: hello there #tool"
    lab = {p["name"]: p for p in desk.ok("usage", relay="this")["providers"]}["hermes"]
    assert lab["meters"][0] == {**lab["meters"][0], "used": 18, "limit": 1000}


def test_only_the_current_turn_is_sent_never_the_history(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    first = start(desk, "remember the number 7")
    session = first["session"]
    second = desk.ok("send", relay="this", session=session, text="which number? #history", wait_seconds=30)
    run_id = agent_session_of(session)
    assert second["reply"]["text"] == f"runs: input 2 of session {run_id}"
    starts = run_starts(fake)
    assert starts[1] == {"input": "which number? #history", "clarify": True, "model": "hermes-agent", "session_id": run_id}
    assert "conversation_history" not in json.dumps(starts) and "remember the number" not in json.dumps(starts[1])
    assert fake.sessions[run_id] == ["remember the number 7", "which number? #history"]


def test_thinking_is_dropped_or_inline_and_the_reasoning_replay_never_shows(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    plain = start(desk, "#think")
    assert plain["reply"]["text"] == "thought through"
    session = plain["session"]
    assert desk.ok("update_session", relay="this", session=session, thinking_display="full")["changed"] == ["thinking_display"]
    inline = desk.ok("send", relay="this", session=session, text="#think again", wait_seconds=30)
    assert inline["reply"]["text"] == "<thinking>Let me think.</thinking>\nthought through"


def test_an_approval_is_an_allow_deny_card_the_owner_answers(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "clean up #approve", wait_seconds=0)
    session = created["session"]
    card = pending_card(desk, session)
    assert card["options"] == ["Allow", "Deny"] and card["allowFreeform"] is False
    assert "rm -rf build" in card["question"] and "recursive delete" in card["question"]
    status, refused = relay.owner.request("POST", f"/api/v1/owner/questions/{card['id']}", {"answer": "sure, go"})
    assert status == 400 and "takes one of its options" in refused["error"]
    relay.owner.post(f"/api/v1/owner/questions/{card['id']}", {"choices": ["Allow"]})
    done = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert done["status"] == "done", done
    assert done["reply"]["text"] == "approval: once (req-1)"
    assert fake.bodies("POST", "/approval") == [{"choice": "once", "request_id": "req-1"}]
    activities = desk.ok("read_session", relay="this", session=session, include_activity=True)
    assert "approval: Allow · rm -rf build" in json.dumps(activities, ensure_ascii=False)


def test_another_agent_answers_an_approval_with_answer_question(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "clean up #approve", wait_seconds=0)
    session = created["session"]
    card = pending_card(desk, session)
    bob = relay.conversation("bob")
    bob.refused("answer_question", "REMOTE_RELAY_INVALID_INPUT", relay="this", question_id=card["id"], answer="maybe")
    bob.ok("answer_question", relay="this", question_id=card["id"], choices=["Deny"])
    done = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert done["reply"]["text"] == "approval: deny (req-1)"
    assert fake.bodies("POST", "/approval") == [{"choice": "deny", "request_id": "req-1"}]


def test_a_clarification_is_a_free_text_card(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "deploy #clarify", wait_seconds=0)
    session = created["session"]
    card = pending_card(desk, session)
    assert card["question"] == "Which branch?" and card["options"] == ["main", "dev"] and card["allowFreeform"] is True
    relay.owner.post(f"/api/v1/owner/questions/{card['id']}", {"answer": "feature/login"})
    done = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert done["reply"]["text"] == 'clarified: "feature/login"'
    assert fake.bodies("POST", "/clarify") == [{"clarify_id": "clr_1", "response": "feature/login"}]


def test_a_form_clarification_asks_each_question_and_answers_them_together(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "ship #form", wait_seconds=0)
    session = created["session"]
    first = pending_card(desk, session)
    assert first["question"] == "Which environment?"
    relay.owner.post(f"/api/v1/owner/questions/{first['id']}", {"choices": ["production"]})
    second = poll("the second card", lambda: next(
        (q for q in desk.ok("read_session", relay="this", session=session)["pendingQuestions"] if q["id"] != first["id"]), None
    ))
    assert second["question"] == "Anything to tell the reviewers?" and second["options"] == []
    relay.owner.post(f"/api/v1/owner/questions/{second['id']}", {"answer": "ship it"})
    done = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert done["reply"]["text"] == 'clarified: ["production", "ship it"]'
    assert fake.bodies("POST", "/clarify") == [{"clarify_id": "clr_2", "responses": ["production", "ship it"]}]


def test_stop_ends_the_turn_and_stops_the_run_on_the_server(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "#stall", wait_seconds=0)
    session = created["session"]
    poll("reply in flight", lambda: (desk.ok("read_session", relay="this", session=session)["inFlight"] or {}).get("text") == "working ")
    desk.ok("stop", relay="this", session=session)
    stopped = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped" and stopped["partialText"] == "working "
    run = next(iter(fake.runs.values()))
    poll("the server told to stop", run.stopped.is_set)
    assert fake.bodies("POST", f"/runs/{run.id}/stop") == [{}]


def test_stop_while_an_approval_waits_ends_the_card_and_the_run(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    created = start(desk, "#approve", wait_seconds=0)
    session = created["session"]
    card = pending_card(desk, session)
    desk.ok("stop", relay="this", session=session)
    stopped = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped"
    assert desk.ok("read_session", relay="this", session=session)["pendingQuestions"] == []
    poll("the server told to stop", next(iter(fake.runs.values())).stopped.is_set)
    status, _ = relay.owner.request("POST", f"/api/v1/owner/questions/{card['id']}", {"choices": ["Allow"]})
    assert status == 400 and fake.bodies("POST", "/approval") == []


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        ("#drop", 'Provider "hermes" broke off the stream'),
        ("#html", 'Provider "hermes" answered text/html instead of a JSON object: an HTML page instead of an API answer'),
        ("#garbage", 'Provider "hermes" answered application/json instead of a JSON object: run accepted {{{ not json'),
        ("#badevent", 'Provider "hermes" sent a broken stream: an event that is not JSON'),
        ("#noend", 'The stream from provider "hermes" ended before the run was complete.'),
        ("#fail", 'Provider "hermes" reported that the run failed: the model provider refused the request'),
        ("#401", 'Provider "hermes" rejected the API key (HTTP 401'),
        ("#500", 'Provider "hermes" failed (HTTP 500: upstream failure while calling the model with key [key hidden])'),
    ],
)
def test_a_broken_agent_server_fails_the_turn_with_a_clear_error(
    relay: Relay, desk: Agent, fake: FakeRunsServer, prompt: str, words: str
) -> None:
    configure(relay, fake)
    body = start(desk, prompt)
    assert body["status"] == "failed", body
    assert words in body["error"], body["error"]
    assert fake.api_key not in json.dumps(body)
    assert agent_session_of(body["session"]) is None  # only a successful turn records the agent's session


def test_a_rate_limited_start_is_retried_with_the_same_idempotency_key(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    body = start(desk, "#429 please")
    assert body["reply"]["text"] == "runs: #429 please"
    keys = [entry["headers"]["Idempotency-Key"] for entry in fake.requests if entry["path"] == "/v1/runs"]
    assert len(keys) == 2 and keys[0] == keys[1]


def test_a_conversation_moving_onto_the_agent_server_sends_its_transcript_once(
    relay: Relay, desk: Agent, fake: FakeRunsServer, llm_server: FakeLLM
) -> None:
    status, answer = relay.owner.request("PUT", "/api/v1/owner/providers/lab", {
        "kind": "chat", "base_url": llm_server.base_url, "api_key": llm_server.api_key, "family": "duo",
    })
    assert status == 200, answer
    configure(relay, fake, family="duo")
    first = desk.ok("create_session", relay="this", provider="lab", text="hello", wait_seconds=30)
    session = first["session"]
    moved = desk.ok("send", relay="this", session=session, provider="hermes", model="hermes-agent", text="go on", wait_seconds=30)
    assert moved["status"] == "done", moved
    backfilled = run_starts(fake)[0]["input"]
    assert backfilled == with_backfill("go on", "User: hello\n\nAssistant: fake: hello")
    again = desk.ok("send", relay="this", session=session, text="and again", wait_seconds=30)
    assert again["status"] == "done" and run_starts(fake)[1]["input"] == "and again"


# Naming the server-side session --------------------------------------------------------------------


def test_the_server_session_is_named_once_after_the_first_successful_turn(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    first = start(desk, "Fix the login bug\nin the web app")
    run_id = agent_session_of(first["session"])
    poll("the session named", lambda: fake.titles)
    desk.ok("send", relay="this", session=first["session"], text="and the tests", wait_seconds=30)
    assert fake.titles == [(run_id, "oar: Fix the login bug")]
    assert fake.bodies("PATCH", f"/api/sessions/{run_id}") == [{"title": "oar: Fix the login bug"}]


def test_a_refused_title_counts_as_named_and_is_not_retried(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    fake.title_mode = "conflict"
    first = start(desk, "Duplicate title")
    poll("the naming answered", fake.title_answered.is_set)
    desk.ok("send", relay="this", session=first["session"], text="second", wait_seconds=30)
    assert [title for _, title in fake.titles] == ["oar: Duplicate title"]


def test_a_naming_transport_failure_is_retried_after_the_next_successful_turn(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    fake.title_mode = "drop"
    first = start(desk, "Name me later")
    session = first["session"]
    poll("the naming tried", lambda: fake.titles)
    fake.title_mode = "ok"
    failed = desk.ok("send", relay="this", session=session, text="#fail", wait_seconds=30)
    assert failed["status"] == "failed"
    assert len(fake.titles) == 1  # a failed turn does not name
    desk.ok("send", relay="this", session=session, text="third", wait_seconds=30)
    poll("the naming retried", lambda: len(fake.titles) == 2)
    assert fake.titles[1] == (agent_session_of(session), "oar: Name me later")
    desk.ok("send", relay="this", session=session, text="fourth", wait_seconds=30)
    assert len(fake.titles) == 2


def test_naming_never_holds_the_reply_back_until_the_server_answers(relay: Relay, desk: Agent, fake: FakeRunsServer) -> None:
    configure(relay, fake)
    fake.title_mode = "hold"
    body = start(desk, "Slow naming server")
    assert body["status"] == "done"
    assert fake.titles and not fake.title_answered.is_set()  # the reply was recorded while naming waited
    fake.release_titles.set()
    poll("the naming answered", fake.title_answered.is_set)
