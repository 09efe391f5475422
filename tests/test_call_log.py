"""One log line per agent call and per owner write (docs/operations.md#logs), read from the log of
a relay whose web is gunicorn and whose worker is a process, as an operator reads it: time, relay,
calling conversation, action, target, outcome, duration; in `OAR_LOG_FORMAT=json` as fields; no
argument values beyond ids; `OAR_CALL_LOG=off` turns the lines off."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.clients import poll
from tests.support.relays import WEB, RelayStack, own_relay

pytestmark = pytest.mark.stack  # relays of their own

# Words that are argument values, never to be found in the log.
SECRET = "sk-live-DO-NOT-LOG-4242"


def call_lines(stack: RelayStack, part: str = WEB) -> list[dict[str, Any]]:
    """The JSON lines of the call log that a part of the relay wrote so far."""
    path = stack.log_path(part)
    entries = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("logger") == "oar.calls":
                entries.append(entry)
    return entries


def whole_log(stack: RelayStack) -> str:
    return "".join(path.read_text(errors="replace") for path in stack.logs.glob("*.log"))


def mcp_call(url: str, token: str, arguments: dict[str, Any]) -> None:
    answer = requests.post(
        f"{url}/mcp", headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "relay_tool", "arguments": arguments}},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text


def test_each_agent_call_and_owner_write_is_one_json_line_of_fields(tmp_path: Path) -> None:
    env = {"OAR_LOG_LEVEL": "INFO", "OAR_LOG_FORMAT": "json"}
    with own_relay(tmp_path, web="process", env=env) as stack:
        relay = stack.relay
        assert relay is not None
        owner_writes_before = len([e for e in call_lines(stack) if e["message"].startswith("owner ")])
        desk = relay.conversation("Review: server/")
        relay.owner.request("PATCH", "/api/v1/owner/settings", {"max_wait_seconds": "soon"})  # refused
        relay.owner.get("/api/v1/owner/settings")  # a read: no line

        desk.ok("list_sessions", relay="this")
        child = desk.ok("create_session", relay="this", title="child", text="!relay " + json.dumps(
            {"action": "list_sessions", "relay": "this"}) + f"\n{SECRET}", wait_seconds=30)["session"]
        desk.refused("send", "REMOTE_RELAY_NOT_FOUND", relay="this", session="feedfacefeedface", text=SECRET)
        desk.refused("send", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=child)
        desk.refused("no_such_action", "REMOTE_RELAY_UNKNOWN_ACTION", text=SECRET)
        mcp_call(relay.url, desk.token, {"action": "read_session", "relay": "this", "session": child})

        calls = poll("the call lines", lambda: (lambda found: found if len(found) >= 6 else None)(
            [e for e in call_lines(stack) if e["message"].startswith("call ")]))
        by_action = {(entry["action"], entry["outcome"]): entry for entry in calls}
        assert len(calls) == 6, calls
        listed = by_action[("list_sessions", "ok")]
        assert {key: listed[key] for key in ("relay", "caller", "title", "via", "target", "level")} == {
            "relay": "desk", "caller": desk.session_id[:8], "title": "Review: server/", "via": "http",
            "target": "desk", "level": "info",
        }
        assert isinstance(listed["duration_ms"], int) and listed["duration_ms"] >= 0 and listed["time"]
        assert by_action[("create_session", "ok")]["target"] == "desk"
        assert by_action[("send", "REMOTE_RELAY_NOT_FOUND")]["target"] == "desk/feedface"
        assert by_action[("send", "REMOTE_RELAY_INVALID_INPUT")]["target"] == "-"  # refused before its target
        assert by_action[("-", "REMOTE_RELAY_UNKNOWN_ACTION")]["target"] == "-"
        assert by_action[("read_session", "ok")]["via"] == "mcp"
        assert by_action[("read_session", "ok")]["target"] == f"desk/{child[:8]}"

        # The child's turn ran `!relay` in the worker: the call of a session the relay runs.
        from_the_turn = poll("the provider's call line", lambda: next(
            (e for e in call_lines(stack, "worker") if e["action"] == "list_sessions"), None))
        assert (from_the_turn["caller"], from_the_turn["title"], from_the_turn["via"]) == (child[:8], "child", "provider")

        owner = [e for e in call_lines(stack) if e["message"].startswith("owner ")][owner_writes_before:]
        assert [(e["action"], e["target"], e["outcome"], e["via"]) for e in owner] == [
            ("POST /api/v1/owner/sessions", "-", "ok", "api"),
            ("PATCH /api/v1/owner/sessions/<session_id>", desk.session_id, "ok", "api"),
            ("PATCH /api/v1/owner/settings", "-", "REMOTE_RELAY_INVALID_INPUT", "api"),
        ]
        logged = whole_log(stack)
        assert SECRET not in logged and desk.token not in logged and (relay.config.owner_token or "?") not in logged


def test_text_lines_read_as_key_value_and_oar_call_log_off_turns_them_off(tmp_path: Path) -> None:
    with own_relay(tmp_path, web="process", env={"OAR_LOG_LEVEL": "INFO"}) as stack:
        relay = stack.relay
        assert relay is not None
        desk = relay.conversation('say "hi" = ok')
        desk.ok("list_sessions", relay="this")
        line = poll("the text line", lambda: next(
            (line for line in stack.log(WEB, 100_000).splitlines() if "oar.calls: call " in line), None))
        assert re.fullmatch(
            rf'\S+ \S+ INFO oar\.calls: call relay=desk caller={desk.session_id[:8]} title="say \\"hi\\" = ok" '
            r"via=http action=list_sessions target=desk outcome=ok duration_ms=\d+", line,
        ), line

        stack.stop(WEB)
        stack.env["OAR_CALL_LOG"] = "off"
        stack.start_web()
        before = stack.log(WEB, 1_000_000).count("oar.calls")
        desk.ok("list_sessions", relay="this")
        relay.owner.settings(max_wait_seconds=600)
        assert stack.log(WEB, 1_000_000).count("oar.calls") == before
