"""Model checks (docs/sessions.md#model-checks): the pure check, and send / create_session / update_session over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from oar.core.errors import ActionError
from oar.providers import provider_class
from oar.providers.base import Provider
from oar.providers.modelcheck import check_model, suggestions_for
from tests.support.clients import Agent
from tests.support.relays import Relay

Echo = provider_class("echo")


def refusal(requested: str, provider: Provider, nothing: str = "Nothing was sent.", **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ActionError) as caught:
        check_model(requested, provider, relay_name=kwargs.pop("relay_name", "desk"), **kwargs)
    assert caught.value.code == "REMOTE_RELAY_UNKNOWN_MODEL"
    assert caught.value.status == 400
    # The refusal as the caller gets it: the dispatcher ends it with the action's sentence.
    return caught.value.ending(nothing).to_dict()


# Pure checks ----------------------------------------------------------------------------


def test_a_listed_model_passes_without_a_note() -> None:
    choice = check_model("echo-2", Echo("echo", {}), relay_name="desk")
    assert choice.model == "echo-2"
    assert choice.note is None


def test_an_unknown_model_names_close_ids_and_the_valid_ones() -> None:
    body = refusal("echo-3", Echo("echo", {}))
    assert body["suggestions"] == ["echo-2", "echo-1"]
    assert body["models"] == ["echo-1", "echo-2"]
    assert body["error"] == (
        "Unknown model 'echo-3' for echo on relay \"desk\"; did you mean 'echo-2'? "
        "Valid ids: echo-1, echo-2. Nothing was sent."
    )
    assert "remoteCode" not in body  # only dotted-id providers add one


def test_create_session_ends_the_sentence_with_nothing_was_created() -> None:
    body = refusal("echo-9", Echo("echo", {}), nothing="Nothing was created.")
    assert body["error"].endswith("Valid ids: echo-1, echo-2. Nothing was created.")


def test_an_unknown_model_with_nothing_close_has_no_guess() -> None:
    body = refusal("zzzzzzzzzzzz", Echo("echo", {}))
    assert body["suggestions"] == []
    assert body["error"] == (
        "Unknown model 'zzzzzzzzzzzz' for echo on relay \"desk\". Valid ids: echo-1, echo-2. Nothing was sent."
    )


def test_a_configured_model_list_replaces_the_built_in_one() -> None:
    provider = Echo("lab", {"models": ["gpt-5.4", "gpt-5.4-mini", "gpt-4o"]})
    body = refusal("gpt-5-4", provider, relay_name="build-box")
    assert body["suggestions"][0] == "gpt-5.4"
    assert body["error"].startswith("Unknown model 'gpt-5-4' for lab on relay \"build-box\"; did you mean 'gpt-5.4'? ")
    assert body["error"].endswith("Valid ids: gpt-5.4, gpt-5.4-mini, gpt-4o. Nothing was sent.")
    with pytest.raises(ActionError):
        check_model("echo-1", provider, relay_name="build-box")


def test_suggestions_try_the_dotted_spelling_of_versions_first() -> None:
    models = ["gpt-4o", "gpt-5.4-mini", "gpt-5.4"]
    assert suggestions_for("gpt-5-4", models)[0] == "gpt-5.4"
    assert suggestions_for("claude-opus-5-5", ["claude-opus-5.5", "claude-sonnet-5"])[0] == "claude-opus-5.5"
    assert suggestions_for("GPT-4O", models)[0] == "gpt-4o"  # case does not hide a match
    assert len(suggestions_for("gpt", ["gpt-1", "gpt-2", "gpt-3", "gpt-4"])) <= 3
    assert suggestions_for("something-else-entirely", models) == []


def test_dotted_providers_answer_a_model_unavailable_remote_code() -> None:
    copilot = Echo("copilot", {"dotted_model_ids": True, "family": "copilot", "models": ["gpt-5.4", "claude-opus-5.5"]})
    body = refusal("claude-opus-5-5", copilot, relay_name="build-box")
    assert body["code"] == "REMOTE_RELAY_UNKNOWN_MODEL"
    assert body["remoteCode"] == "COPILOT_MODEL_UNAVAILABLE"
    assert body["suggestions"][0] == "claude-opus-5.5"
    assert body["models"] == ["gpt-5.4", "claude-opus-5.5"]


def test_the_remote_code_uses_the_provider_name_without_a_family() -> None:
    copilot = Echo("gh-copilot", {"dotted_model_ids": True, "models": ["gpt-5.4"]})
    assert refusal("gpt-5-4", copilot)["remoteCode"] == "GH_COPILOT_MODEL_UNAVAILABLE"


def test_dotted_providers_reject_other_spellings_even_without_a_list() -> None:
    copilot = Provider("copilot", {"dotted_model_ids": True})
    assert copilot.models == []
    body = refusal("claude-opus-5-5", copilot)
    assert body["suggestions"] == ["claude-opus-5.5"]
    assert body["models"] == []
    assert body["remoteCode"] == "COPILOT_MODEL_UNAVAILABLE"
    assert body["error"] == (
        "Unknown model 'claude-opus-5-5' for copilot on relay \"desk\"; did you mean 'claude-opus-5.5'? Nothing was sent."
    )
    # Its own spelling passes unchecked, with a note.
    choice = check_model("claude-opus-5.5", copilot, relay_name="desk")
    assert choice.model == "claude-opus-5.5"
    assert choice.note and "unchecked" in choice.note


def test_create_session_names_the_one_other_provider_that_lists_the_id() -> None:
    copilot = Echo("copilot", {"dotted_model_ids": True, "family": "copilot", "models": ["gpt-5.4"]})
    claude = Echo("claude-api", {"family": "claude", "models": ["claude-opus-5-5", "claude-sonnet-5"]})
    ollama = Echo("ollama", {"models": ["llama-4"]})
    body = refusal("claude-opus-5-5", copilot, nothing="Nothing was created.", others=[copilot, claude, ollama])
    assert body["remoteCode"] == "CLAUDE_PROVIDER_REQUIRED"
    assert body["error"].endswith("Nothing was created.")
    # Two other providers listing it: no single one is required.
    claude_sub = Echo("claude-sub", {"family": "claude-sub", "models": ["claude-opus-5-5"]})
    body = refusal("claude-opus-5-5", copilot, nothing="Nothing was created.", others=[copilot, claude, claude_sub])
    assert body["remoteCode"] == "COPILOT_MODEL_UNAVAILABLE"
    # No other provider listing it.
    body = refusal("mistral-9", copilot, nothing="Nothing was created.", others=[copilot, ollama])
    assert body["remoteCode"] == "COPILOT_MODEL_UNAVAILABLE"


def test_a_provider_without_a_model_list_passes_the_model_with_a_note() -> None:
    discovering = Provider("lmstudio", {})
    assert discovering.models == []
    choice = check_model("qwen-3-32b", discovering, relay_name="desk")
    assert choice.model == "qwen-3-32b"
    assert choice.note == "lmstudio has no model list yet; 'qwen-3-32b' was passed unchecked."


# Over HTTP ------------------------------------------------------------------------------


def owner_view(relay: Relay, session_id: str) -> dict[str, Any]:
    return relay.owner.get(f"/api/v1/owner/sessions/{session_id}")


def test_send_with_an_unknown_model_sends_nothing(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="hello")
    session = created["session"]
    before = owner_view(relay, session)
    body = desk.refused("send", "REMOTE_RELAY_UNKNOWN_MODEL", relay="this", session=session, text="more", model="echo-3")
    assert body["error"] == (
        "Unknown model 'echo-3' for echo on relay \"desk\"; did you mean 'echo-2'? "
        "Valid ids: echo-1, echo-2. Nothing was sent."
    )
    assert body["suggestions"] == ["echo-2", "echo-1"] and body["models"] == ["echo-1", "echo-2"]
    after = owner_view(relay, session)
    assert after["messages"] == before["messages"]
    assert after["session"]["settings"]["model"] == "echo-1"
    assert after["session"]["messageCount"] == before["session"]["messageCount"]


def test_create_session_with_an_unknown_model_creates_nothing(relay: Relay, desk: Agent) -> None:
    before = relay.owner.get("/api/v1/owner/sessions")["sessions"]
    body = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_MODEL", relay="this", text="hi", model="gpt-5")
    assert body["error"].startswith("Unknown model 'gpt-5' for echo on relay \"desk\"")
    assert body["error"].endswith("Valid ids: echo-1, echo-2. Nothing was created.")
    assert body["models"] == ["echo-1", "echo-2"]
    after = relay.owner.get("/api/v1/owner/sessions")["sessions"]
    assert [s["id"] for s in after] == [s["id"] for s in before]
    assert relay.owner.get("/api/v1/owner/groups")["groups"] == []  # no group made for the caller either


def test_update_session_with_an_unknown_model_changes_nothing(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hi")["session"]
    body = desk.refused(
        "update_session", "REMOTE_RELAY_UNKNOWN_MODEL", relay="this", session=session, model="echo-7", title="Renamed"
    )
    assert body["error"].endswith("Valid ids: echo-1, echo-2. Nothing was changed.")
    settings = owner_view(relay, session)["session"]["settings"]
    assert settings["model"] == "echo-1" and settings["title"] == "hi"


def test_a_good_model_changes_the_session_and_the_reply(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="first")["session"]
    sent = desk.ok("send", relay="this", session=session, text="second", model="echo-2")
    assert sent["status"] == "done"
    assert sent["reply"] == {**sent["reply"], "text": "echo: second", "model": "echo-2"}
    assert "modelNote" not in sent
    assert owner_view(relay, session)["session"]["settings"]["model"] == "echo-2"
    # The model stays for the next turns.
    again = desk.ok("send", relay="this", session=session, text="third")
    assert again["reply"]["model"] == "echo-2"


def test_create_session_with_a_good_model_runs_it(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello", model="echo-2")
    assert body["model"] == "echo-2"
    assert body["reply"]["model"] == "echo-2"


def test_update_session_model_applies_to_the_next_turn(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hi")["session"]
    updated = desk.ok("update_session", relay="this", session=session, model="echo-2")
    assert updated["changed"] == ["model"]
    assert updated["settings"]["model"] == "echo-2"
    reply = desk.ok("send", relay="this", session=session, text="next")
    assert reply["reply"]["model"] == "echo-2"
