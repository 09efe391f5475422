"""Real providers (docs/providers.md, docs/owner-api.md#providers, docs/sessions.md#usage): the owner API configures them, and the real worker
runs turns against a local fake API speaking each wire format over HTTP with SSE."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oar.actions.catalog import load_actions, ordered_actions
from tests.fakes.llm import FakeLLM
from tests.support.clients import Agent, poll
from tests.support.relays import Relay

PROTOCOLS = ("chat", "responses", "anthropic")
PATHS = {"chat": "/chat/completions", "responses": "/responses", "anthropic": "/messages"}


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def fake(fake_server: FakeLLM) -> FakeLLM:
    fake_server.requests.clear()
    fake_server.counts.clear()
    return fake_server


def put_provider(relay: Relay, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return relay.owner.request("PUT", f"/api/v1/owner/providers/{name}", body)


def configure(relay: Relay, fake: FakeLLM, kind: str, name: str = "lab", **extra: Any) -> dict[str, Any]:
    status, body = put_provider(relay, name, {"kind": kind, "base_url": fake.base_url, "api_key": fake.api_key, **extra})
    assert status == 200, body
    return body


def start(desk: Agent, text: str, provider: str = "lab", wait_seconds: int = 30) -> dict[str, Any]:
    return desk.ok("create_session", relay="this", provider=provider, text=text, wait_seconds=wait_seconds)


# Owner API --------------------------------------------------------------------------------


def test_it_configures_a_provider_and_discovers_its_models_without_ever_showing_the_key(relay: Relay, fake: FakeLLM) -> None:
    body = configure(relay, fake, "chat", family="fake", billing="api_key", monthly_token_cap=1000)
    provider = body["provider"]
    assert provider["models"] == ["fake-large", "fake-small"]
    assert provider["defaultModel"] == "fake-large"
    assert provider["apiKeySet"] is True and provider["baseUrl"] == fake.base_url
    listed = relay.owner.get("/api/v1/owner/providers")["providers"]
    assert [p["name"] for p in listed] == ["echo", "lab"]
    # A PUT without api_key keeps the stored key (nobody can send back what is never shown).
    status, again = put_provider(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "models": ["fake-small"]})
    assert status == 200 and again["provider"]["apiKeySet"] is True and again["provider"]["models"] == ["fake-small"]
    shown = json.dumps([listed, relay.owner.get("/api/v1/owner/providers/lab"), again])
    assert fake.api_key not in shown
    info = relay.conversation("desk").ok("relay_info", relay="this")
    assert {"name": "lab", "kind": "chat", "defaultModel": "fake-small", "models": ["fake-small"], "efforts": []} in info["providers"]
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/lab")[0] == 200
    assert relay.owner.request("GET", "/api/v1/owner/providers/lab")[0] == 404
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/lab")[0] == 404


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"kind": "gpt"}, 'kind must be one of "echo", "chat"'),
        ({"kind": "chat"}, "A chat provider needs base_url"),
        ({"kind": "chat", "base_url": "ftp://host/v1"}, "base_url must be an http:// or https:// URL"),
        ({"kind": "chat", "base_url": "http://u:p@host/v1"}, "must not hold credentials"),
        ({"kind": "chat", "base_url": "http://host/v1", "models": ["a", 3]}, "models must be a list of ids"),
        ({"kind": "chat", "base_url": "http://host/v1", "models": ["a"], "default_model": "b"}, "default_model 'b' is not in models"),
        ({"kind": "chat", "base_url": "http://host/v1", "temperature": 2}, "provider does not take: temperature"),
        ({"kind": "chat", "base_url": "http://host/v1", "monthly_token_cap": 0}, "monthly_token_cap must be a whole number"),
        ({"kind": "runs"}, "A runs provider needs base_url"),
        ({"kind": "runs", "base_url": "http://host/v1", "command": ["x"]}, "command is for cli providers only"),
        ({"kind": "chat", "base_url": "http://[::1"}, "base_url must be an http:// or https:// URL"),
        ({"kind": "chat", "base_url": "http://[::1]:99999/v1"}, "base_url must be an http:// or https:// URL"),
        ({"kind": "chat", "base_url": "http://host:port/v1"}, "base_url must be an http:// or https:// URL"),
        ({"kind": "chat", "base_url": "http:///v1"}, "base_url must be an http:// or https:// URL"),
        ({"kind": "chat", "base_url": "http://host/v1", "api_key": "sk-schlüssel-ключ"}, "api_key must be visible ASCII"),
        ({"kind": "chat", "base_url": "http://host/v1", "api_key": "sk-key\r\nX-Evil: 1"}, "api_key must be visible ASCII"),
    ],
)
def test_a_bad_provider_configuration_is_refused_saying_why(relay: Relay, body: dict[str, Any], words: str) -> None:
    status, answer = put_provider(relay, "lab", body)
    assert status == 400 and answer["code"] == "REMOTE_RELAY_INVALID_INPUT", answer
    assert words in answer["error"] and answer["error"].endswith("Nothing was changed.")
    assert relay.owner.request("GET", "/api/v1/owner/providers/lab")[0] == 404


def test_a_stored_key_is_not_sent_to_a_new_host_without_being_given_again(relay: Relay, fake: FakeLLM) -> None:
    configure(relay, fake, "chat", models=["fake-small"])
    elsewhere = fake.base_url.replace("127.0.0.1", "localhost")
    status, refused = put_provider(relay, "lab", {"kind": "chat", "base_url": elsewhere, "models": ["fake-small"]})
    assert status == 400 and refused["code"] == "REMOTE_RELAY_INVALID_INPUT", refused
    assert "another host" in refused["error"] and "give api_key again" in refused["error"]
    assert relay.owner.get("/api/v1/owner/providers/lab")["provider"]["baseUrl"] == fake.base_url
    # The same host with another path keeps the key; a new host with the key given is saved.
    status, _ = put_provider(relay, "lab", {"kind": "chat", "base_url": fake.base_url + "/", "models": ["fake-small"]})
    assert status == 200
    status, moved = put_provider(relay, "lab", {"kind": "chat", "base_url": elsewhere, "api_key": fake.api_key,
                                                "models": ["fake-small"]})
    assert status == 200 and moved["provider"]["baseUrl"] == elsewhere
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/lab")[0] == 200


def test_a_server_without_a_model_list_still_saves_and_says_why(relay: Relay, fake: FakeLLM) -> None:
    status, body = put_provider(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "api_key": "sk-wrong-key-999"})
    assert status == 200
    assert body["provider"]["models"] == [] and "HTTP 401" in body["modelNote"]
    assert "sk-wrong-key-999" not in json.dumps(body)


# Turns on each protocol -----------------------------------------------------------------


@pytest.mark.parametrize("kind", PROTOCOLS)
def test_a_turn_streams_the_reply_and_records_usage(relay: Relay, desk: Agent, fake: FakeLLM, kind: str) -> None:
    configure(relay, fake, kind, monthly_token_cap=1000)
    body = start(desk, "hello there")
    assert body["status"] == "done", body
    assert body["reply"] == {**body["reply"], "text": "fake: hello there", "model": "fake-large"}
    assert "outputTruncated" not in body["reply"]
    sent = fake.bodies(PATHS[kind])[-1]
    assert sent["stream"] is True and sent["model"] == "fake-large"
    if kind == "anthropic":
        headers = fake.requests[-1]["headers"]
        assert headers["Anthropic-Version"] == "2023-06-01" and headers["X-Api-Key"] == fake.api_key
        assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    meters = {p["name"]: p for p in desk.ok("usage", relay="this")["providers"]}
    assert meters["echo"]["status"] == "untracked"
    lab = meters["lab"]
    assert lab["status"] == "ok" and lab["paused"] is False
    assert lab["meters"][0] == {**lab["meters"][0], "used": 18, "limit": 1000, "remaining": 982, "percent": 1.8}


@pytest.mark.parametrize("kind", PROTOCOLS)
def test_a_reply_holding_a_nul_or_a_lone_surrogate_is_kept_with_replacement_characters(
    relay: Relay, desk: Agent, fake: FakeLLM, kind: str
) -> None:
    configure(relay, fake, kind)
    body = start(desk, "#unstorable")
    assert body["status"] == "done", body
    assert body["reply"]["text"] == "bad \ufffd and \ufffd end"
    read = desk.ok("read_session", relay="this", session=body["session"])
    assert read["messages"][-1]["text"] == "bad \ufffd and \ufffd end"


@pytest.mark.parametrize("kind", PROTOCOLS)
def test_a_reply_cut_at_the_budget_continues_once_then_says_output_truncated(
    relay: Relay, desk: Agent, fake: FakeLLM, kind: str
) -> None:
    configure(relay, fake, kind)
    continued = start(desk, "write #length")
    assert continued["reply"]["text"] == "part one, part two." and "outputTruncated" not in continued["reply"]
    truncated = start(desk, "write #alwayslength")
    assert truncated["status"] == "done"
    assert truncated["reply"]["text"] == "still going still going "
    assert truncated["reply"]["outputTruncated"] is True


@pytest.mark.parametrize("kind", ("chat", "anthropic"))
def test_a_400_naming_the_servers_output_cap_is_retried_once_with_it(relay: Relay, desk: Agent, fake: FakeLLM, kind: str) -> None:
    configure(relay, fake, kind)
    body = start(desk, "#cap please")
    assert body["reply"]["text"] == "budget 4096"
    assert [sent["max_tokens"] for sent in fake.bodies(PATHS[kind])] == [32768, 4096]


def test_a_context_overflow_rebuilds_the_request_once_without_the_oldest_history(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "chat")
    first = start(desk, "hello-old")
    second = desk.ok("send", relay="this", session=first["session"], text="now #overflow", wait_seconds=30)
    assert second["reply"]["text"] == "fit"
    attempts = [[m["content"] for m in sent["messages"]] for sent in fake.bodies("/chat/completions")[1:]]
    assert "hello-old" in attempts[0] and "hello-old" not in attempts[1]


def test_a_rate_limit_is_retried_after_the_servers_retry_after(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "anthropic")
    assert start(desk, "#429 once")["reply"]["text"] == "after retry"
    failed = start(desk, "#429always")
    assert failed["status"] == "failed"
    assert "rate limiting" in failed["error"] and "Gave up after 3 retries" in failed["error"]


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        ("#401", "rejected the API key (HTTP 401"),
        ("#html", "answered text/html"),
        ("#drop", "broke off the stream"),
        ("#cut", "ended before the reply was complete"),
        ("#silent", 'Provider "lab" stopped sending'),
    ],
)
def test_a_broken_provider_fails_the_turn_with_a_clear_error(relay: Relay, desk: Agent, fake: FakeLLM, prompt: str, words: str) -> None:
    configure(relay, fake, "chat")
    body = start(desk, prompt)
    assert body["status"] == "failed", body
    assert words in body["error"]
    assert fake.api_key not in json.dumps(body)


def test_an_unreachable_provider_fails_the_turn(relay: Relay, desk: Agent) -> None:
    status, _ = put_provider(relay, "lab", {"kind": "chat", "base_url": "http://127.0.0.1:9/v1", "models": ["m"]})
    assert status == 200
    body = start(desk, "anyone there?")
    assert body["status"] == "failed" and 'Provider "lab" could not be reached' in body["error"]


def test_stop_closes_a_stream_that_went_quiet(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "responses")
    created = start(desk, "#stall", wait_seconds=0)
    session = created["session"]
    poll("reply in flight", lambda: (desk.ok("read_session", relay="this", session=session)["inFlight"] or {}).get("text") == "waiting ")
    desk.ok("stop", relay="this", session=session)
    stopped = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped" and stopped["partialText"] == "waiting "


def test_thinking_inline_puts_reasoning_in_one_block(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "chat")
    plain = start(desk, "#think")
    assert plain["reply"]["text"] == "thought through"  # omit by default
    session = plain["session"]
    updated = desk.ok("update_session", relay="this", session=session, thinking_display="full")
    assert updated["changed"] == ["thinking_display"]  # the LLM kinds honour it (docs/sessions.md#update_session)
    inline = desk.ok("send", relay="this", session=session, text="#think again", wait_seconds=30)
    assert inline["reply"]["text"] == "<thinking>Let me think.</thinking>\nthought through"


# relay_tool -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PROTOCOLS)
def test_a_model_calls_relay_tool_and_the_relay_runs_the_loop_as_that_session(
    relay: Relay, desk: Agent, fake: FakeLLM, kind: str
) -> None:
    configure(relay, fake, kind)
    owner = relay.owner.post("/api/v1/owner/sessions", {"title": "llm", "provider": "lab"})
    session = owner["session"]["id"]
    relay.owner.patch(f"/api/v1/owner/sessions/{session}", {"approvals": ["create_sessions"]})  # allowed ahead
    call = {"action": "create_session", "relay": "this", "provider": "echo", "text": "made by a model"}
    message = relay.owner.post(f"/api/v1/owner/sessions/{session}/messages", {"text": "#tool " + json.dumps(call)})
    done = desk.ok("wait", relay="this", session=session, message_id=message["message_id"], wait_seconds=30)
    assert done["status"] == "done", done
    text = done["reply"]["text"]
    assert text.startswith("tool said: ")
    result = json.loads(text.removeprefix("tool said: "))
    assert result["ok"] is True and result["reply"]["text"] == "echo: made by a model"
    created = desk.ok("read_session", relay="this", session=result["session"])
    assert created["session"]["id"] == result["session"]
    listed = {s["id"]: s for s in desk.ok("list_sessions", relay="this", scope="all")["sessions"]}
    assert listed[result["session"]]["viaAgent"] == "llm"


# Usage caps ---------------------------------------------------------------------------------


def test_a_provider_over_its_monthly_cap_is_capped_and_its_turns_do_not_run(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "chat", monthly_token_cap=10)
    assert start(desk, "hello")["status"] == "done"
    lab = {p["name"]: p for p in desk.ok("usage", relay="this")["providers"]}["lab"]
    assert lab["status"] == "capped" and lab["paused"] is True
    assert lab["meters"][0] == {**lab["meters"][0], "used": 18, "limit": 10, "remaining": 0, "percent": 100.0}
    refused = desk.refused("create_session", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", relay="this", provider="lab", text="again")
    assert refused["error"] == "lab is over its monthly cap. Ask the user to raise the cap. Nothing was created."
    # A turn that reaches a capped provider anyway (the owner's own prompt) fails without calling it.
    owner = relay.owner.post("/api/v1/owner/sessions", {"title": "mine", "provider": "lab", "text": "again"})
    failed = desk.ok("wait", relay="this", session=owner["session"]["id"], message_id=owner["message_id"], wait_seconds=30)
    assert failed["status"] == "failed" and "over its monthly token cap of 10" in failed["error"]
    assert len(fake.bodies("/chat/completions")) == 1


def test_the_api_key_never_appears_in_answers_or_files(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "chat")
    answers = [start(desk, prompt) for prompt in ("#401", "hello", "#html")]
    answers.append(desk.ok("usage", relay="this"))
    answers.append(desk.ok("relay_info", relay="this"))
    answers.append(relay.owner.get("/api/v1/owner/providers"))
    for answer in answers[:3]:
        answers.append(desk.ok("read_session", relay="this", session=answer["session"], include_activity=True))
    assert fake.api_key not in json.dumps(answers)
    for path in Path(relay.config.data_dir).rglob("*"):
        if path.is_file() and path.suffix in (".log", ".txt", ".out", ".json"):
            assert fake.api_key not in path.read_text(errors="replace"), path


# The billing switch (docs/sessions.md#send) ---------------------------------------------------------------


@pytest.fixture
def claude_pair(relay: Relay, fake: FakeLLM) -> None:
    configure(relay, fake, "anthropic", name="claude-sub", family="claude", billing="subscription", models=["opus-5", "sonnet-5"])
    configure(relay, fake, "anthropic", name="claude-api", family="claude", billing="api_key", models=["opus-5"], monthly_token_cap=10)
    configure(relay, fake, "chat", name="other", family="gpt", models=["fake-large"])


def test_send_with_provider_moves_the_session_between_billings_of_one_family(
    relay: Relay, desk: Agent, fake: FakeLLM, claude_pair: None
) -> None:
    first = desk.ok("create_session", relay="this", provider="claude-sub", model="opus-5", text="hello", wait_seconds=30)
    session = first["session"]
    moved = desk.ok("send", relay="this", session=session, provider="claude-api", text="on the key", wait_seconds=30)
    assert moved["status"] == "done" and moved["provider"] == "claude-api"
    assert moved["billingSwitch"] == "Switches billing to API key"
    listed = {s["id"]: s for s in desk.ok("list_sessions", relay="this", scope="all")["sessions"]}
    assert listed[session]["provider"] == "claude-api"
    # claude-api is now over its cap of 10 (a turn uses 18): a send without provider queues nothing…
    refused = desk.refused("send", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", relay="this", session=session, text="more")
    assert refused["error"] == (
        'claude-api is over its monthly cap. Send with provider "claude-sub" to move the session to the '
        "subscription, or ask the user to raise the cap. Nothing was queued."
    )
    assert refused["remoteCode"] == "CLAUDE_API_CAP_REACHED"
    # …and moving back to the subscription works.
    back = desk.ok("send", relay="this", session=session, provider="claude-sub", text="back", wait_seconds=30)
    assert back["status"] == "done" and back["billingSwitch"] == "Switches billing to subscription"


def test_every_refused_switch_sends_nothing_and_switches_nothing(
    relay: Relay, desk: Agent, fake: FakeLLM, claude_pair: None
) -> None:
    first = desk.ok("create_session", relay="this", provider="claude-sub", model="sonnet-5", text="hello", wait_seconds=30)
    session = first["session"]
    unknown_model = desk.refused("send", "REMOTE_RELAY_UNKNOWN_MODEL", relay="this", session=session, provider="claude-api", text="x")
    assert unknown_model["models"] == ["opus-5"]
    other_family = desk.refused("send", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=session, provider="other", text="x")
    assert "not of the family" in other_family["error"]
    missing = desk.refused("send", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", relay="this", session=session, provider="nope", text="x")
    assert missing["error"].endswith("Nothing was sent.")
    configure(relay, fake, "anthropic", name="claude-api", family="claude", billing="api_key", models=["sonnet-5"], monthly_token_cap=1)
    desk.ok("create_session", relay="this", provider="claude-api", text="spend it", wait_seconds=30)
    capped = desk.refused("send", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", relay="this", session=session, provider="claude-api", text="x")
    assert capped["remoteCode"] == "CLAUDE_API_CAP_REACHED"
    read = desk.ok("read_session", relay="this", session=session, last=50)
    assert [m["text"] for m in read["messages"] if m["role"] == "user"] == ["hello"]
    listed = {s["id"]: s for s in desk.ok("list_sessions", relay="this", scope="all")["sessions"]}
    assert listed[session]["provider"] == "claude-sub" and listed[session]["model"] == "sonnet-5"


def test_a_misspelt_provider_is_refused_with_suggestions(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    configure(relay, fake, "chat", name="openai")
    refused = desk.refused("create_session", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", relay="this", provider="OpenAl", text="hi")
    assert refused["suggestions"] == ["openai"] and refused["providers"] == ["echo", "openai"]
    unknown = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_MODEL", relay="this", provider="openai", model="fake-larg", text="hi")
    assert unknown["suggestions"][0] == "fake-large" and unknown["error"].endswith("Nothing was created.")


def test_a_chat_model_is_offered_relay_tool_naming_every_action_and_its_arguments(
    relay: Relay, desk: Agent, fake: FakeLLM
) -> None:
    configure(relay, fake, "chat")
    first = start(desk, "first turn")
    assert first["status"] == "done", first
    second = desk.ok("send", relay="this", session=first["session"], text="second turn", wait_seconds=30)
    assert second["status"] == "done", second
    bodies = fake.bodies("/chat/completions")
    assert len(bodies) == 2
    tools = bodies[0]["tools"]
    assert [(tool["type"], tool["function"]["name"]) for tool in tools] == [("function", "relay_tool")]
    parameters = tools[0]["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["required"] == ["action"]
    properties = parameters["properties"]
    actions = load_actions()
    assert len(actions) == 25 and properties["action"]["enum"] == [spec.name for spec in ordered_actions()]
    for name, spec in actions.items():
        for argument in spec.params:
            described = properties[argument]["description"]
            assert name in described or described.startswith("every action"), (name, argument, described)
    assert properties["scope"]["enum"] == ["active", "recent", "all", "archived"]
    assert properties["limit"] == {**properties["limit"], "type": "integer", "minimum": 1, "maximum": 100}
    assert properties["sessions"]["type"] == "array" and "subscribe (required)" in properties["sessions"]["description"]
    assert set(properties["quiet_hours"]["properties"]) == {"from", "to", "tz"}
    assert properties["from"]["description"].startswith("transfer_subscriptions (required)")
    # The system prompt lists every action and stays byte-identical from turn to turn (prompt caches).
    systems = [body["messages"][0] for body in bodies]
    assert systems[0]["role"] == "system" and systems[0] == systems[1]
    assert all(f"\n- {name}(" in systems[0]["content"] for name in actions)
    assert "\n- transfer_subscriptions(from[, relay]): " in systems[0]["content"]
    assert tools == bodies[1]["tools"]
