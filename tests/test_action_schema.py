"""Every schema of the actions comes from the registry: the JSON Schema per action, the one
relay_tool definition, the system prompt's action list, `oar call --help` and docs/actions.md."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oar.actions import reference
from oar.actions.args import check_arguments
from oar.actions.catalog import load_actions, ordered_actions
from oar.actions.schema import arguments_schema, relay_tool, system_prompt
from oar.cli.main import main
from oar.core.errors import ActionError
from oar.core.fields import Param
from oar.core.schema import param_schema
from tests.support.product_probes import action_schemas

ACTIONS = load_actions()


# One field ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "schema"),
    [
        (Param("str", max_length=64, description="an id"), {"type": "string", "maxLength": 64, "description": "an id"}),
        (Param("str", choices=("a", "b")), {"type": "string", "enum": ["a", "b"]}),
        (Param("int", minimum=1, maximum=50), {"type": "integer", "minimum": 1, "maximum": 50}),
        (Param("bool"), {"type": "boolean"}),
        (Param("list", items=Param("str", max_length=200), max_items=10),
         {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 10}),
        (Param("object", fields={"from": Param("str", required=True), "note": Param("str")}),
         {"type": "object", "properties": {"from": {"type": "string"}, "note": {"type": "string"}}, "required": ["from"]}),
        (Param("any", alternatives=(Param("str", choices=("auto",)), Param("int", minimum=1_000))),
         {"anyOf": [{"type": "string", "enum": ["auto"]}, {"type": "integer", "minimum": 1_000}]}),
        (Param("any"), {}),
    ],
)
def test_each_kind_of_param_becomes_its_json_schema(param: Param, schema: dict[str, Any]) -> None:
    assert param_schema(param) == schema


# One action ---------------------------------------------------------------------------------


def test_an_actions_schema_has_its_types_ranges_choices_and_required_arguments() -> None:
    listing = arguments_schema(ACTIONS["list_sessions"])
    assert listing["type"] == "object" and listing["required"] == ["relay"]  # relay may not be omitted here
    assert listing["properties"]["scope"]["enum"] == ["active", "recent", "all", "archived"]
    assert listing["properties"]["limit"] == {**listing["properties"]["limit"], "type": "integer", "minimum": 1, "maximum": 100}
    assert "additionalProperties" not in listing  # unknown arguments are ignored and listed, not refused
    assert arguments_schema(ACTIONS["read_task_output"])["required"] == ["relay", "session", "task_id"]
    assert arguments_schema(ACTIONS["subscribe"])["required"] == ["sessions"]  # relay may be omitted
    assert "required" not in arguments_schema(ACTIONS["list_schedules"])
    assert arguments_schema(ACTIONS["list_relays"]) == {"type": "object", "properties": {}}


def test_strict_actions_refuse_other_arguments_and_update_session_needs_one_setting() -> None:
    update = arguments_schema(ACTIONS["update_session"])
    assert update["additionalProperties"] is False
    assert {"required": ["model"]} in update["anyOf"] and len(update["anyOf"]) == 9
    assert update["properties"]["auto_compact_window"]["anyOf"][1] == {"type": "integer", "minimum": 1_000, "maximum": 10_000_000}
    assert arguments_schema(ACTIONS["create_session"])["additionalProperties"] is False


def test_list_and_object_arguments_describe_what_they_hold() -> None:
    subscribe = arguments_schema(ACTIONS["subscribe"])["properties"]
    assert subscribe["events"]["items"]["enum"][:3] == ["question_asked", "error", "turn_end"]
    assert subscribe["sessions"] == {**subscribe["sessions"], "type": "array", "items": {"type": "string"}, "maxItems": 100}
    quiet = subscribe["quiet_hours"]
    assert quiet["type"] == "object" and quiet["required"] == ["from", "to", "tz"]
    assert arguments_schema(ACTIONS["ask"])["properties"]["options"]["items"] == {"type": "string", "maxLength": 200}


def test_every_argument_of_every_action_is_described() -> None:
    undescribed = [f"{spec.name}.{name}" for spec in ACTIONS.values() for name, param in spec.params.items() if not param.description]
    assert undescribed == []
    assert list(action_schemas()) == [spec.name for spec in ordered_actions()] and len(ACTIONS) == 25


def test_describing_question_left_its_refusal_unchanged() -> None:
    with pytest.raises(ActionError) as refused:
        check_arguments(ACTIONS["ask"], {"action": "ask"})
    assert refused.value.message == "ask needs question. Nothing was asked."
    with pytest.raises(ActionError) as refused:
        check_arguments(ACTIONS["wait"], {"action": "wait", "relay": "this", "session": "3f9c2a1e"})
    assert refused.value.message == "wait needs message_id (the message_id send returned)."


# The relay_tool function and the system prompt ----------------------------------------------


def test_relay_tool_is_one_object_schema_with_every_action_and_argument() -> None:
    tool = relay_tool()
    assert tool.name == "relay_tool" and tool.description
    parameters = tool.parameters
    assert parameters["type"] == "object" and parameters["required"] == ["action"]
    properties = parameters["properties"]
    assert properties["action"]["enum"] == [spec.name for spec in ordered_actions()]
    arguments = {name for spec in ACTIONS.values() for name in spec.params}
    assert set(properties) == arguments | {"action"}
    assert properties["session"]["maxLength"] == 64  # the same shape wherever it is taken
    assert properties["session"]["description"].startswith("read_session, read_task_output, send, wait")
    assert "ask: the session the question is about" in properties["session"]["description"]
    assert properties["relay"]["description"].startswith("every action but list_relays, take, reply (optional for ask,")
    assert properties["text"]["description"] == (
        "send, create_session (required): the prompt · reply (required): the reply · schedule (required): the prompt to queue"
    )
    json.dumps(parameters)  # plain JSON


def test_the_system_prompt_lists_every_action_and_is_the_same_text_every_time() -> None:
    prompt = system_prompt()
    assert prompt == system_prompt() and prompt.encode() == system_prompt.__wrapped__().encode()
    listed = [line[2:].split("(")[0] for line in prompt.splitlines() if line.startswith("- ")]
    assert listed == [spec.name for spec in ordered_actions()] and len(listed) == 25
    assert "\n- transfer_subscriptions(from[, relay]): Move every subscription of another conversation" in prompt
    assert "\n- send(relay, session, text[, wait_seconds, mode, model, effort, provider, if_busy]): " in prompt
    assert "\n- update_session(relay, session[, at least one of model, effort," in prompt


# oar call --help and docs/actions.md -----------------------------------------------------------


def test_oar_call_help_lists_every_action_and_an_action_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "--help"]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {spec.name.ljust(24)}{spec.summary}" in listing for spec in ACTIONS.values())
    assert main(["call", "read_task_output", "--help"]) == 0
    arguments = capsys.readouterr().out
    assert arguments.startswith("usage: oar call read_task_output relay=… session=… task_id=… [key=value ...]\n")
    assert "  lines    how many of the last lines (default 50) (integer, 1 to 500)" in arguments
    assert main(["call", "no_such_action", "--help"]) == 2
    assert "there is no action 'no_such_action'" in capsys.readouterr().err


def test_the_committed_actions_reference_is_up_to_date() -> None:
    committed = reference.DOCS_FILE.read_text(encoding="utf-8") if reference.DOCS_FILE.exists() else ""
    assert committed == reference.markdown(), (
        f"docs/actions.md is stale: the action registry changed. Regenerate it with `{reference.REGENERATE}` "
        "and commit it."
    )


def test_the_reference_shows_each_actions_level_kind_arguments_and_notes() -> None:
    text = reference.markdown()
    assert all(f"\n## {spec.name}\n" in text for spec in ACTIONS.values())
    section = text.split("\n## update_session\n")[1].split("\n## ")[0]
    assert "- Level: full" in section and "- Kind: write" in section
    assert "Refuses arguments it does not take" in section and "`may_create_sessions` is refused" in section
    assert "| `thinking_display` | text | no | one of \"summarized\", \"full\", \"hidden\" |" in section
    assert "| `quiet_hours.tz` | text | yes |" in text
