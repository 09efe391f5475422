"""`cli` providers (SPEC §11): a command-line agent run per turn in the session's folder, its
stream-json output parsed into text, tool activity and usage, resumed by its own session id;
a new folder starts a new agent session (`relaunched`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from oar.providers.base import Activity, AgentSession, TextDelta, Usage
from oar.providers.cli import CliFailure, CliLineParser, render
from tests.conftest import Agent, Relay, poll

FAKE_AGENT = str(Path(__file__).resolve().parent / "fakes" / "cli_agent.py")


def configure(relay: Relay, **extra: Any) -> None:
    body = {
        "kind": "cli", "command": [sys.executable, FAKE_AGENT, "{prompt}"], "resume_args": ["--resume", "{agent_session}"],
        "models": ["agent-default"], **extra,
    }
    status, answer = relay.owner.request("PUT", "/api/v1/owner/providers/coder", body)
    assert status == 200, answer


def test_the_parser_reads_stream_json_and_plain_lines() -> None:
    parser = CliLineParser()
    assert parser.feed('{"type":"system","subtype":"init","session_id":"s1"}') == [AgentSession("s1")]
    line = '{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"Read","input":{"path":"a"}}]}}'
    assert parser.feed(line) == [TextDelta("hi"), Activity('Read {"path": "a"}')]
    result = '{"type":"result","is_error":false,"result":"hi","session_id":"s1","usage":{"input_tokens":3,"cache_read_input_tokens":2,"output_tokens":1}}'
    assert parser.feed(result) == [AgentSession("s1"), Usage(5, 1)]
    assert parser.feed('{"type":"result","is_error":true,"result":"boom"}')[-1] == CliFailure("boom")
    assert CliLineParser().feed("just text\n") == [TextDelta("just text\n")]


def test_placeholders_fill_whole_arguments_without_a_shell() -> None:
    assert render(["agent", "-p", "{prompt}", "--model={model}"], {"prompt": "a; rm -rf /", "model": "m"}) == [
        "agent", "-p", "a; rm -rf /", "--model=m",
    ]


def test_a_cli_agent_runs_per_turn_in_the_folder_and_resumes_its_own_session(relay: Relay, desk: Agent) -> None:
    configure(relay)
    first = desk.ok("create_session", relay="this", provider="coder", text="hello", wait_seconds=30)
    assert first["status"] == "done", first
    session = first["session"]
    text = first["reply"]["text"]
    assert text.startswith("cli: hello in ") and "resumed" not in text
    second = desk.ok("send", relay="this", session=session, text="again", wait_seconds=30)
    assert " resumed agent-" in second["reply"]["text"]
    other = Path(relay.config.data_dir) / "work" / "elsewhere"
    other.mkdir(parents=True, exist_ok=True)
    moved = desk.ok("update_session", relay="this", session=session, cwd=str(other))
    assert moved["relaunched"] is True and "cwd" in moved["changed"]
    third = desk.ok("send", relay="this", session=session, text="fresh", wait_seconds=30)
    assert third["reply"]["text"] == f"cli: fresh in {other.resolve()}"


@pytest.mark.parametrize(
    ("prompt", "error"),
    [
        ("#fail", "The coder agent exited with status 3: fatal: the agent's configuration is broken"),
        ("#error", "The coder agent reported an error: tool budget exhausted"),
    ],
)
def test_a_failing_agent_fails_the_turn_saying_why(relay: Relay, desk: Agent, prompt: str, error: str) -> None:
    configure(relay)
    body = desk.ok("create_session", relay="this", provider="coder", text=prompt, wait_seconds=30)
    assert body["status"] == "failed" and body["error"] == error


def test_a_missing_program_fails_the_turn(relay: Relay, desk: Agent) -> None:
    status, _ = relay.owner.request("PUT", "/api/v1/owner/providers/coder", {"kind": "cli", "command": ["/nonexistent/agent", "{prompt}"]})
    assert status == 200
    body = desk.ok("create_session", relay="this", provider="coder", text="hi", wait_seconds=30)
    assert body["status"] == "failed" and "could not start '/nonexistent/agent'" in body["error"]


def test_stop_ends_the_agent_process(relay: Relay, desk: Agent) -> None:
    configure(relay)
    created = desk.ok("create_session", relay="this", provider="coder", text="#sleep", wait_seconds=0)
    session = created["session"]
    poll("reply in flight", lambda: (desk.ok("read_session", relay="this", session=session)["inFlight"] or {}).get("text") == "sleeping ")
    desk.ok("stop", relay="this", session=session)
    stopped = desk.ok("wait", relay="this", session=session, message_id=created["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped" and stopped["partialText"] == "sleeping "


def test_a_cli_provider_needs_a_command(relay: Relay) -> None:
    status, body = relay.owner.request("PUT", "/api/v1/owner/providers/coder", {"kind": "cli"})
    assert status == 400 and "A cli provider needs command" in body["error"]
    status, body = relay.owner.request("PUT", "/api/v1/owner/providers/coder", {"kind": "chat", "base_url": "http://h/v1", "models": ["m"], "command": ["x"]})
    assert status == 400 and "command is for cli providers only" in body["error"]
