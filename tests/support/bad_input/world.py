"""The world every bad-input case runs in, the case shape, and the check of the failure shape (docs/calling.md)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from flask import Flask

from oar.core.db import database
from oar.core.models import Task
from oar.core.timeutil import utcnow
from tests.support.clients import Agent
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

# docs/errors.md: the HTTP status of each code these tests expect. Written out here on purpose,
# so that the tests check oar.core.errors against docs/errors.md rather than against itself.
SPEC_STATUS = {
    "REMOTE_RELAY_INVALID_INPUT": 400,
    "REMOTE_RELAY_UNKNOWN_ACTION": 400,
    "REMOTE_RELAY_UNKNOWN": 404,
    "REMOTE_RELAY_PERMISSION": 403,
    "REMOTE_RELAY_FORBIDDEN": 403,
    "REMOTE_RELAY_UNAUTHORIZED": 401,
    "REMOTE_RELAY_NOT_FOUND": 404,
    "REMOTE_RELAY_BUSY": 409,
    "REMOTE_RELAY_LOCAL_DISABLED": 403,
    "REMOTE_RELAY_NESTED_SESSION": 403,
    "REMOTE_RELAY_OWN_SESSION": 400,
    "REMOTE_RELAY_UNKNOWN_MODEL": 400,
    "REMOTE_RELAY_UNKNOWN_GROUP": 400,
    "REMOTE_RELAY_PROVIDER_UNAVAILABLE": 400,
}

INVALID = "REMOTE_RELAY_INVALID_INPUT"
NOT_FOUND = "REMOTE_RELAY_NOT_FOUND"
OWN = "REMOTE_RELAY_OWN_SESSION"
UNKNOWN_RELAY = "REMOTE_RELAY_UNKNOWN"
FORBIDDEN = "REMOTE_RELAY_FORBIDDEN"

# What every refusal of a write action ends with (docs/calling.md).
NOTHING = {
    "send": "Nothing was sent.",
    "create_session": "Nothing was created.",
    "update_session": "Nothing was changed.",
    "stop": "Nothing was stopped.",
    "archive": "Nothing was archived.",
    "schedule": "Nothing was scheduled.",
    "unschedule": "Nothing was unscheduled.",
    "subscribe": "Nothing was subscribed.",
    "unsubscribe": "Nothing was unsubscribed.",
    "transfer_subscriptions": "Nothing was transferred.",
    "answer_question": "Nothing was sent.",
    "ask": "Nothing was asked.",
    "withdraw": "Nothing was withdrawn.",
    "take": "Nothing was taken.",
    "reply": "Nothing was replied.",
}


@dataclass(frozen=True)
class Case:
    """One refused call: `args` (with "<name>" placeholders), the code, and what the error says.

    `ends` is the error's last sentence (default: the action's "Nothing was …"; "" for none);
    `caller` is "desk" (the owner's conversation), "nested" (the agent of a session desk's
    agent started), "stranger" (a new conversation that set and receives nothing), "gone"
    (the token of a deleted session), "owner" (the owner's token, which is no agent's), or one
    of `World.callers` that a table's fixture adds.
    """

    id: str
    action: str
    args: dict[str, Any]
    code: str
    says: str = ""
    exact: str = ""
    ends: str | None = None
    caller: str = "desk"

    @property
    def ending(self) -> str | None:
        return self.ends if self.ends is not None else NOTHING.get(self.action)


REMOVE = object()  # in a case's changes: drop that argument


def spoil(valid: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`valid` with `changes` applied (REMOVE drops one)."""
    args = dict(valid)
    for key, value in changes.items():
        if value is REMOVE:
            args.pop(key, None)
        else:
            args[key] = value
    return args


@dataclass
class World:
    relay: Relay
    desk: Agent  # the owner's conversation "desk" and its agent
    nested: Agent  # the agent of `child`, a session desk's agent started
    refs: dict[str, str] = field(default_factory=dict)
    callers: dict[str, Agent] = field(default_factory=dict)  # more callers a table's fixture adds
    heartbeats_move: bool = False  # a turn waits (on a question): its worker moves its heartbeat on
    app: Flask | None = None  # the relay's own app, for cases run in-process (bad_input/in_process.py)

    def fill(self, value: Any) -> Any:
        """Replace "<name>" placeholders (sessions, messages, folders) with the world's values."""
        if isinstance(value, str):
            return self.refs.get(value, value)
        if isinstance(value, list):
            return [self.fill(item) for item in value]
        if isinstance(value, dict):
            return {key: self.fill(item) for key, item in value.items()}
        return value

    def fill_in(self, text: str) -> str:
        """Replace placeholders inside a text (e.g. a path)."""
        for name, value in self.refs.items():
            text = text.replace(name, value)
        return text

    def caller(self, case: Case) -> Agent:
        if case.caller in self.callers:
            return self.callers[case.caller]
        if case.caller == "nested":
            return self.nested
        if case.caller == "stranger":
            return self.relay.conversation("stranger")
        if case.caller in ("gone", "owner"):
            return Agent(self.relay.url, self.refs[f"<{case.caller}_token>"], "")
        assert case.caller == "desk", case
        return self.desk


def build_world(relay: Relay, desk: Agent) -> World:
    """desk started `child` (idle, its turn done) and `old` (archived); `other` is the owner's."""
    created = desk.ok("create_session", relay="this", text="hello child", wait_seconds=30)
    assert created["status"] == "done", created
    child = created["session"]
    old = desk.ok("create_session", relay="this", text="old work", wait_seconds=30)
    assert old["status"] == "done", old
    assert desk.ok("archive", relay="this", session=old["session"])["archived"] is True
    other = relay.conversation("other")
    gone = relay.conversation("gone")
    relay.owner.request("DELETE", f"/api/v1/owner/sessions/{gone.session_id}")
    messages = relay.owner.get(f"/api/v1/owner/sessions/{child}")["messages"]
    reply = next(m["id"] for m in messages if m["role"] == "assistant")
    work = relay.config.data_dir / "work"
    refs = {
        "<child>": child,
        "<child4>": child[:4],
        "<own>": desk.session_id,
        "<own8>": desk.session_id[:8],
        "<desk>": desk.session_id,
        "<other>": other.session_id,
        "<archived>": old["session"],
        "<prompt>": created["message_id"],
        "<reply>": reply,
        "<archived_prompt>": old["message_id"],
        "<workdir>": str(work),
        "<missing_dir>": str(work / "does-not-exist"),
        "<gone_token>": gone.token,
        "<owner_token>": relay.owner.token,
    }
    refs.update(_tasks(relay, child, other.session_id))
    return World(relay=relay, desk=desk, nested=relay.agent_for(child), refs=refs)


def _tasks(relay: Relay, child: str, other: str) -> dict[str, str]:
    """Ended tasks, as a worker leaves them: one in child, one in other, one in child that
    ended two hours ago (its output is no longer readable)."""
    folder = relay.config.data_dir / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    refs = {}
    for name, session, ended_ago in (("<task>", child, 0), ("<other_task>", other, 0), ("<expired_task>", child, 120)):
        task_id = f"t{len(refs)}{secrets.token_hex(3)}"
        (folder / f"{task_id}.log").write_text("one\ntwo\n")
        ended = utcnow() - timedelta(minutes=ended_ago)
        with database.connection_context():
            Task.create(
                id=task_id, session=session, description="echo", command="echo", status="completed", exit_code=0,
                output_path=str(folder / f"{task_id}.log"), started_at=ended, ended_at=ended, heartbeat_at=ended,
            )
        refs[name] = task_id
    return refs


def assert_case_refused(world: World, case: Case) -> None:
    """Call as the case says; it is refused as the case says, and nothing changed."""
    agent = world.caller(case)
    heartbeats = not world.heartbeats_move
    before = snapshot(world.relay, heartbeats=heartbeats)
    status, body = agent.call(case.action, **world.fill(case.args))
    assert_refused(status, body, case.code, ends=case.ending, says=world.fill_in(case.says),
                   exact=world.fill_in(case.exact))
    assert snapshot(world.relay, heartbeats=heartbeats) == before


def assert_refused(
    status: int, body: Any, code: str, *, ends: str | None = None, says: str = "", exact: str = ""
) -> None:
    """The failure shape (docs/calling.md): ok false, a code of docs/errors.md with its status, and a sentence."""
    assert isinstance(body, dict), body
    assert body["ok"] is False, body
    assert body["code"] == code, body
    assert status == SPEC_STATUS[code], (status, body)
    error = body["error"]
    assert isinstance(error, str) and error == error.strip() and " " in error, body
    assert error.endswith((".", "?")), error
    assert "Traceback" not in error, error
    if ends:
        assert error.endswith(ends), error
    if says:
        assert says in error, error
    if exact:
        assert error == exact, error
