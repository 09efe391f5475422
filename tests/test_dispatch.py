"""The dispatcher: the result envelope and the check order (docs/calling.md#check-order)."""

from __future__ import annotations

import ast
import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import oar.actions as actions_package
from oar.actions.catalog import load_actions
from oar.actions.checks import CHECKS, Call
from oar.actions.context import CallContext, Caller
from oar.actions.dispatch import short_read_gate
from oar.actions.registry import ActionSpec
from oar.actions.targets import Target, ThisRelay, Unlocked
from oar.core.db import is_sqlite
from oar.core.errors import ActionError
from tests.support.clients import Agent
from tests.support.relays import Relay


def test_every_result_has_the_envelope(relay: Relay, desk: Agent) -> None:
    body = desk.ok("relay_info", relay="this")
    assert body["ok"] is True and body["relay"] == "desk"
    assert body["summary"].startswith("relay_info → desk")
    assert list(body)[:3] == ["ok", "relay", "summary"]


def test_arguments_an_action_does_not_take_are_listed_in_ignored(relay: Relay, desk: Agent) -> None:
    body = desk.ok("list_sessions", relay="this", colour="blue", size=3, empty="", nothing=None, off=False)
    assert body["ignored"] == ["colour", "size"]
    many = {f"extra{i}": i + 1 for i in range(30)}
    assert len(desk.ok("relay_info", relay="this", **many)["ignored"]) == 20


def test_empty_values_count_as_absent_but_false_is_a_value_for_booleans(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hi", model="", effort=None, group=[], title={}, wait_seconds=30)
    assert body["status"] == "done" and body["model"] == "echo-1"
    changed = desk.ok("update_session", relay="this", session=body["session"], thinking_enabled=False)
    assert changed["settings"]["thinking_enabled"] is False


def test_validation_comes_before_everything_else(relay: Relay, desk: Agent) -> None:
    relay.settings(agent_sessions_enabled=False)
    # A bad argument is reported even though the relay is disabled and the name unknown.
    desk.refused("list_sessions", "REMOTE_RELAY_INVALID_INPUT", relay="elsewhere", limit=0)
    # list_relays answers before the relay is resolved or checked.
    assert desk.ok("list_relays")["relays"] == []


def test_an_unknown_relay_comes_before_the_disabled_check(relay: Relay, desk: Agent) -> None:
    relay.settings(agent_sessions_enabled=False)
    body = desk.refused("list_sessions", "REMOTE_RELAY_UNKNOWN", relay="build-box")
    assert body["relays"] == [{"name": "desk", "self": True}]
    desk.refused("list_sessions", "REMOTE_RELAY_LOCAL_DISABLED", relay="this")
    # This relay's own name means this relay.
    desk.refused("list_sessions", "REMOTE_RELAY_LOCAL_DISABLED", relay="DESK")


def test_own_session_comes_before_the_rate_limit(relay: Relay, desk: Agent) -> None:
    relay.settings(rate_calls_per_minute=1)
    desk.ok("relay_info", relay="this")
    desk.refused("send", "REMOTE_RELAY_OWN_SESSION", relay="this", session=desk.session_id, text="me")
    body = desk.refused("relay_info", "REMOTE_RELAY_RATE_LIMITED", relay="this")
    assert 1 <= body["retryAfterSeconds"] <= 60


def test_every_registered_action_has_a_level_and_a_summary_line() -> None:
    actions = load_actions()
    assert {"list_relays", "relay_info", "usage", "list_sessions", "read_session", "send", "create_session",
            "update_session", "wait", "stop", "archive"} <= set(actions)
    for spec in actions.values():
        assert spec.level in (None, "read", "prompt", "full")
        assert spec.summary, f"{spec.name} has no docstring"
        # docs/calling.md#levels-and-write-actions: the write actions (`ask` is one only about another session).
        assert spec.writes == (spec.name in WRITE_ACTIONS), spec.name
    assert actions["ask"].writes_with == "session"


WRITE_ACTIONS = {
    "send", "create_session", "update_session", "answer_question", "stop", "archive", "subscribe", "unsubscribe",
    "transfer_subscriptions", "schedule", "unschedule", "withdraw",
}


def test_the_checks_run_in_the_order_of_spec_section_5() -> None:
    assert [check.name for check in CHECKS] == [
        "LOCAL_DISABLED", "unlock", "level", "INBOUND_DISABLED", "OWN_SESSION", "hop limit", "rate limit",
    ]


def test_no_check_is_an_assert_that_python_O_would_remove() -> None:
    """Not in the dispatcher's checks, nor anywhere else in the product: `python -O` drops them."""
    project = Path(actions_package.__file__).parents[2]
    asserts = [
        f"{path.relative_to(project)}:{node.lineno}"
        for path in sorted([*(project / "oar").rglob("*.py"), *(project / "workers").rglob("*.py")])
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert asserts == []


@dataclass(frozen=True)
class PairedRelay:
    """A target that answers the checks' questions as a paired relay could."""

    name: str = "build-box"
    agent_sessions_enabled: bool = True
    level: str = "full"
    crossings: int = 1
    unlocked: Unlocked | None = "owner"
    takes_prompts: bool = True

    def unlocked_by(self, caller: Caller) -> Unlocked | None:
        return self.unlocked

    def accepts(self, caller: Caller) -> bool:
        return self.takes_prompts

    def run(self, ctx: CallContext, spec: ActionSpec, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def refusal(target: Target, action: str, caller: Caller | None = None) -> str | None:
    """The code of the first relay check that refuses the call (None: all pass but the rate limit)."""
    call = Call(
        ctx=cast(CallContext, None),  # the rate limit, the only check that reads it, is left out
        caller=caller or Caller(session_id="s" * 16, session_title="desk", model="echo-1", remote_hops=0),
        target=target, spec=load_actions()[action], args={"relay": target.name, "session": "t" * 16},
    )
    try:
        for check in CHECKS[:-1]:
            check.refuse(call)
    except ActionError as error:
        return error.code
    return None


def test_the_relay_checks_ask_the_target_instead_of_assuming_this_relay() -> None:
    assert refusal(PairedRelay(), "send") is None
    assert refusal(PairedRelay(unlocked=None), "send") == "REMOTE_RELAY_LOCKED"
    assert refusal(PairedRelay(level="read"), "send") == "REMOTE_RELAY_FORBIDDEN"
    assert refusal(PairedRelay(level="read"), "read_session") is None
    assert refusal(PairedRelay(level="off"), "read_session") == "REMOTE_RELAY_FORBIDDEN"
    assert refusal(PairedRelay(takes_prompts=False), "send") == "REMOTE_INBOUND_DISABLED"
    assert refusal(PairedRelay(takes_prompts=False), "read_session") is None
    far = Caller(session_id="s" * 16, session_title="desk", model="echo-1", relay="hub", remote_hops=2)
    assert refusal(PairedRelay(unlocked="agent"), "send", far) == "REMOTE_RELAY_HOP_LIMIT"
    assert refusal(PairedRelay(unlocked="owner"), "send", far) is None  # the owner's mention lets it pass
    assert refusal(PairedRelay(unlocked="agent"), "wait", far) is None  # reads and waits are never limited
    # This relay passes all of them because it says so: unlocked, full, open to its own conversations.
    here = ThisRelay(name="desk", agent_sessions_enabled=True)
    assert (here.unlocked_by(far), here.level, here.crossings) == ("always", "full", 0)
    assert refusal(here, "send") is None


def test_short_reads_on_this_relay_queue_in_their_process_and_other_calls_do_not(relay: Relay, desk: Agent) -> None:
    """docs/decisions.md#short-reads-one-at-a-time-issue-14: on SQLite, a read_session or list_sessions
    call of this relay (its token look-up included) waits while another runs in the process;
    a call of any other action, or one naming a paired relay, does not queue. On PostgreSQL
    nothing queues."""
    assert sorted(name for name, spec in load_actions().items() if spec.short_read) == ["list_sessions", "read_session"]
    for payload in ({"action": "relay_info", "relay": "this"}, {"action": "read_session", "relay": "lab"}, [], {"action": 3}):
        assert isinstance(short_read_gate(payload), contextlib.nullcontext)
    gate = short_read_gate({"action": "read_session", "relay": "this", "session": "x"})
    if not is_sqlite():
        assert isinstance(gate, contextlib.nullcontext)
        return
    assert gate is short_read_gate({"action": "list_sessions", "relay": "this"})
    answers: list[dict[str, Any]] = []
    with gate:
        reading = threading.Thread(target=lambda: answers.append(desk.ok("list_sessions", relay="this")))
        reading.start()
        assert desk.ok("relay_info", relay="this")["relay"] == "desk"  # not queued behind the read
        assert reading.is_alive() and not answers  # queued
    reading.join(timeout=60)
    assert answers and answers[0]["sessions"]


def test_a_refusal_ends_with_the_actions_sentence_once() -> None:
    # Domain code raises without the sentence; the dispatcher adds the action's (oar.core.errors.ending).
    assert ActionError("REMOTE_RELAY_BUSY", "Session ab is busy.").ending("Nothing was sent.").message == (
        "Session ab is busy. Nothing was sent."
    )
    assert ActionError("REMOTE_RELAY_BUSY", "Session ab is busy.").ending("").message == "Session ab is busy."
    # A refusal that already says what was not done keeps its own sentence.
    for said in ("Gone. Nothing was sent.", "Dissolved. No session was created.", "Nothing was changed."):
        assert ActionError("REMOTE_RELAY_INVALID_INPUT", said).ending("Nothing was created.").message == said
    # One said in full (a paired relay's answer) is passed on as it is.
    peer = ActionError("REMOTE_RELAY_OFFLINE", 'Relay "b" answered HTTP 200. What was asked there is unknown.')
    assert peer.in_full().ending("Nothing was sent.").message == peer.message
    assert ActionError("REMOTE_RELAY_BUSY", "x.").ending("Nothing was sent.").to_dict()["error"] == "x. Nothing was sent."
