"""Provider pickers (docs/providers.md#configuring-providers, last paragraph): only configured providers, reachable ones first
(a cached probe, never a call per listing); a saved default that is no longer configured is
repaired to the first configured one; a session's model is honoured only while it belongs to
its provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oar import providers
from oar.core import settings as stored_values
from oar.core.db import database
from tests.fakes.llm import FakeLLM
from tests.support.clients import Agent
from tests.support.relays import Relay

# A port nothing listens on: connecting is refused at once.
CLOSED = "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def fake(fake_server: FakeLLM) -> FakeLLM:
    fake_server.requests.clear()
    return fake_server


def put(relay: Relay, name: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = relay.owner.request("PUT", f"/api/v1/owner/providers/{name}", body)
    assert status == 200, answer
    return answer


def picker(desk: Agent) -> list[str]:
    return [provider["name"] for provider in desk.ok("relay_info", relay="this")["providers"]]


def test_providers_whose_server_did_not_answer_are_listed_last(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    put(relay, "down", {"kind": "chat", "base_url": CLOSED, "models": ["m"], "position": 1})
    put(relay, "up", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key, "position": 2})
    assert picker(desk) == ["echo", "down", "up"]  # not called yet: the owner's order
    failed = desk.ok("create_session", relay="this", provider="down", text="hi", wait_seconds=30)
    assert failed["status"] == "failed" and "could not be reached" in failed["error"]
    assert picker(desk) == ["echo", "up", "down"]
    assert [p["name"] for p in relay.owner.get("/api/v1/owner/providers")["providers"]] == ["echo", "up", "down"]
    # Reconfigured, it is unknown again; a successful turn keeps it in its place.
    put(relay, "down", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key, "models": ["fake-large"], "position": 1})
    assert picker(desk) == ["echo", "down", "up"]
    assert desk.ok("create_session", relay="this", provider="down", text="hi", wait_seconds=30)["status"] == "done"
    assert picker(desk) == ["echo", "down", "up"]


def test_a_provider_whose_model_discovery_could_not_connect_is_listed_last(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    gone = put(relay, "gone", {"kind": "chat", "base_url": CLOSED, "position": 0})
    assert gone["provider"]["models"] == [] and "Model discovery failed" in gone["modelNote"]
    put(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "api_key": "sk-wrong-key", "position": 1})
    # A 401 is an answer: the server is reachable, only the key is wrong.
    assert picker(desk) == ["echo", "lab", "gone"]
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/gone")[0] == 200
    assert picker(desk) == ["echo", "lab"]


def test_a_saved_default_no_longer_configured_is_repaired_to_the_first_configured(relay: Relay, fake: FakeLLM) -> None:
    put(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key})
    with database.connection_context():
        stored_values.set_value(providers.DEFAULT_PROVIDER_KEY, "lab")
        assert providers.default_provider().name == "lab"
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/lab")[0] == 200
    with database.connection_context():
        assert providers.default_provider().name == "echo"
        assert stored_values.get_value(providers.DEFAULT_PROVIDER_KEY) == "echo"  # the repair is saved
    settings = relay.owner.get("/api/v1/owner/settings")["settings"]
    assert providers.DEFAULT_PROVIDER_KEY not in settings and providers.REACHABILITY_KEY not in settings


def test_a_sessions_model_is_honoured_only_while_it_belongs_to_its_provider(relay: Relay, desk: Agent, fake: FakeLLM) -> None:
    put(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "api_key": fake.api_key})
    first = desk.ok("create_session", relay="this", provider="lab", model="fake-small", text="hello", wait_seconds=30)
    assert first["reply"]["model"] == "fake-small" and fake.bodies("/chat/completions")[-1]["model"] == "fake-small"
    put(relay, "lab", {"kind": "chat", "base_url": fake.base_url, "models": ["fake-large"]})  # fake-small is gone
    again = desk.ok("send", relay="this", session=first["session"], text="still there?", wait_seconds=30)
    assert again["status"] == "done", again
    assert fake.bodies("/chat/completions")[-1]["model"] == "fake-large"
    assert again["reply"]["model"] == "fake-large"
