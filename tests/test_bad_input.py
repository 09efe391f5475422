"""Bad input is refused in the SPEC shape and changes nothing (SPEC §3, §4, §5, §7, §14, §16).

One table of cases over every action, run against the real relay (HTTP server, RQ workers,
Redis, database). Every refused case compares a snapshot of the database and of the owner
API's views taken before the call with one taken after: a refused call changes nothing.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from oar.actions.catalog import load_actions
from oar.core.db import database
from oar.core.models import MODELS
from tests.conftest import Agent, Relay

# SPEC §14: the HTTP status of each code these tests expect. Written out here on purpose,
# so that the tests check oar.errors against the SPEC rather than against itself.
SPEC_STATUS = {
    "REMOTE_RELAY_INVALID_INPUT": 400,
    "REMOTE_RELAY_UNKNOWN_ACTION": 400,
    "REMOTE_RELAY_UNKNOWN": 404,
    "REMOTE_RELAY_PERMISSION": 403,
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

# The actions this table covers (SPEC §5; the ones registered today).
COVERED = (
    "list_relays", "relay_info", "usage", "list_sessions", "read_session", "create_session", "send",
    "update_session", "wait", "stop", "archive", "read_task_output",
)
# What every refusal of a write action ends with (SPEC §3).
NOTHING = {
    "send": "Nothing was sent.",
    "create_session": "Nothing was created.",
    "update_session": "Nothing was changed.",
    "stop": "Nothing was stopped.",
    "archive": "Nothing was archived.",
}
SESSION_ACTIONS = ("read_session", "send", "update_session", "wait", "stop", "archive", "read_task_output")
NOT_OWN_ACTIONS = ("send", "update_session", "wait", "stop", "archive")

CREATE_ARGUMENTS = (
    "Its arguments: relay, text, provider, model, cwd, repo, branch, mode, effort, title, group, wait_seconds."
)
UPDATE_ARGUMENTS = (
    "Its arguments: relay, session, model, effort, mode, title, group, cwd, thinking_enabled, "
    "thinking_display, auto_compact_window."
)
OWNER_ONLY = "Whether a session may start sessions is the owner's setting alone."


# The world every case runs in ------------------------------------------------------------


@dataclass
class World:
    relay: Relay
    desk: Agent  # the owner's conversation "desk" and its agent
    nested: Agent  # the agent of `child`, a session desk's agent started
    refs: dict[str, str] = field(default_factory=dict)

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


@pytest.fixture
def world(relay: Relay, desk: Agent) -> World:
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
    from datetime import timedelta

    from oar.core.models import Task
    from oar.core.timeutil import utcnow

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


def snapshot(relay: Relay) -> dict[str, Any]:
    """Every row of every table, plus what the owner API shows: equal before and after = nothing changed."""
    owner = relay.owner
    with database.connection_context():
        rows = {
            model.__name__: sorted(repr(sorted(row.items())) for row in model.select().dicts()) for model in MODELS
        }
    listed = owner.get("/api/v1/owner/sessions")["sessions"]
    return {
        "counts": {name: len(entries) for name, entries in rows.items()},
        "settings": owner.get("/api/v1/owner/settings")["settings"],
        "groups": owner.get("/api/v1/owner/groups")["groups"],
        "sessions": listed,
        "details": {entry["id"]: owner.get(f"/api/v1/owner/sessions/{entry['id']}") for entry in listed},
        "rows": rows,
    }


def assert_refused(
    status: int, body: Any, code: str, *, ends: str | None = None, says: str = "", exact: str = ""
) -> None:
    """The SPEC §3 failure shape: ok false, a §14 code with its status, and a sentence."""
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


# The table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    action: str
    args: dict[str, Any]
    code: str
    says: str = ""
    exact: str = ""
    ends: str | None = None  # default: the action's "Nothing was …" sentence
    caller: str = "desk"  # or "nested": the agent of a session desk's agent started

    @property
    def ending(self) -> str | None:
        return self.ends if self.ends is not None else NOTHING.get(self.action)


# Arguments that make each action succeed; each case spoils one thing.
VALID = {
    "list_relays": {},
    "relay_info": {"relay": "this"},
    "usage": {"relay": "this"},
    "list_sessions": {"relay": "this"},
    "read_session": {"relay": "this", "session": "<child>"},
    "create_session": {"relay": "this", "text": "a new task", "wait_seconds": 0},
    "send": {"relay": "this", "session": "<child>", "text": "one more thing", "wait_seconds": 0},
    "update_session": {"relay": "this", "session": "<child>", "title": "renamed"},
    "wait": {"relay": "this", "session": "<child>", "message_id": "<prompt>", "wait_seconds": 0},
    "stop": {"relay": "this", "session": "<child>"},
    "archive": {"relay": "this", "session": "<child>"},
    "read_task_output": {"relay": "this", "session": "<child>", "task_id": "<task>", "lines": 10},
}

_REMOVE = object()


def case(action: str, name: str, code: str, changes: dict[str, Any], **options: Any) -> Case:
    """A case: the action's valid arguments with `changes` applied (_REMOVE drops one)."""
    args = dict(VALID[action])
    for key, value in changes.items():
        if value is _REMOVE:
            args.pop(key, None)
        else:
            args[key] = value
    return Case(id=f"{action}-{name}", action=action, args=args, code=code, **options)


def _relay_cases() -> list[Case]:
    cases = []
    for action in COVERED:
        if action == "list_relays":
            continue
        cases += [
            case(action, "relay-missing", INVALID, {"relay": _REMOVE}, says=f"{action} needs relay"),
            case(action, "relay-empty-string-is-absent", INVALID, {"relay": ""}, says=f"{action} needs relay"),
            case(action, "relay-null-is-absent", INVALID, {"relay": None}, says=f"{action} needs relay"),
            case(action, "relay-number", INVALID, {"relay": 7}, says="relay must be text"),
            case(action, "relay-list", INVALID, {"relay": ["this"]}, says="relay must be text"),
            case(action, "relay-too-long", INVALID, {"relay": "r" * 201}, says="the limit is 200"),
            case(action, "relay-unknown", "REMOTE_RELAY_UNKNOWN", {"relay": "build-box"},
                 says='No relay is named "build-box"'),
        ]
    return cases


def _session_cases() -> list[Case]:
    cases = []
    for action in SESSION_ACTIONS:
        cases += [
            case(action, "session-missing", INVALID, {"session": _REMOVE}, says=f"{action} needs session"),
            case(action, "session-empty-string-is-absent", INVALID, {"session": ""}, says="needs session"),
            case(action, "session-empty-list-is-absent", INVALID, {"session": []}, says="needs session"),
            case(action, "session-number", INVALID, {"session": 12345678}, says="session must be text"),
            case(action, "session-bool", INVALID, {"session": True}, says="session must be text"),
            case(action, "session-object", INVALID, {"session": {"id": "<child>"}}, says="session must be text"),
            case(action, "session-list", INVALID, {"session": ["<child>"]}, says="session must be text"),
            case(action, "session-too-long", INVALID, {"session": "s" * 65}, says="the limit is 64"),
            case(action, "session-unknown", NOT_FOUND, {"session": "nosuchsession"},
                 says='Relay "desk" has no session "nosuchsession".'),
            case(action, "session-prefix-too-short", NOT_FOUND, {"session": "<child4>"}, says="has no session"),
        ]
    for action in NOT_OWN_ACTIONS:
        cases += [
            case(action, "own-session", OWN, {"session": "<own>"},
                 says=f"{action} cannot target this agent's own conversation."),
            case(action, "own-session-by-prefix", OWN, {"session": "<own8>"},
                 says=f"{action} cannot target this agent's own conversation."),
        ]
    return cases


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _action_cases() -> list[Case]:
    ls, rs, cs, sd, us, wt = "list_sessions", "read_session", "create_session", "send", "update_session", "wait"
    rt = "read_task_output"
    return [
        # list_sessions (SPEC §5.4): scope, limit 1–100, query, cursor.
        case(ls, "scope-unknown", INVALID, {"scope": "everything"}, says="scope must be one of"),
        case(ls, "scope-number", INVALID, {"scope": 1}, says="scope must be"),
        case(ls, "limit-0", INVALID, {"limit": 0}, says="limit must be a whole number from 1 to 100"),
        case(ls, "limit-101", INVALID, {"limit": 101}, says="limit must be a whole number from 1 to 100"),
        case(ls, "limit-negative", INVALID, {"limit": -5}, says="limit must be"),
        case(ls, "limit-string", INVALID, {"limit": "10"}, says="limit must be"),
        case(ls, "limit-fraction", INVALID, {"limit": 2.5}, says="limit must be"),
        case(ls, "limit-true", INVALID, {"limit": True}, says="limit must be"),
        case(ls, "limit-list", INVALID, {"limit": [5]}, says="limit must be"),
        case(ls, "limit-huge", INVALID, {"limit": 10**30}, says="limit must be"),
        case(ls, "query-too-long", INVALID, {"query": "q" * 201}, says="the limit is 200"),
        case(ls, "query-number", INVALID, {"query": 5}, says="query must be text"),
        case(ls, "cursor-garbage", INVALID, {"cursor": "not a cursor"}, says="cursor is not one this relay gave out"),
        case(ls, "cursor-wrong-shape", INVALID, {"cursor": _cursor(b"[1]")}, says="cursor is not one"),
        case(ls, "cursor-bad-date", INVALID, {"cursor": _cursor(b'["yesterday", "x"]')}, says="cursor is not one"),
        case(ls, "cursor-not-text", INVALID, {"cursor": _cursor(b'[5, "x"]')}, says="cursor is not one"),
        case(ls, "cursor-binary", INVALID, {"cursor": _cursor(b"\xff\xfe\xfd\x00")}, says="cursor is not one"),
        case(ls, "cursor-non-ascii", INVALID, {"cursor": "ünïcödé"}, says="cursor is not one"),
        case(ls, "cursor-number", INVALID, {"cursor": 5}, says="cursor must be text"),
        case(ls, "cursor-too-long", INVALID, {"cursor": "A" * 501}, says="the limit is 500"),
        # read_session (SPEC §5.4): last 1–50, max_chars 500–50,000, before, include_activity.
        case(rs, "last-0", INVALID, {"last": 0}, says="last must be a whole number from 1 to 50"),
        case(rs, "last-51", INVALID, {"last": 51}, says="last must be a whole number from 1 to 50"),
        case(rs, "last-string", INVALID, {"last": "5"}, says="last must be"),
        case(rs, "last-fraction", INVALID, {"last": 1.5}, says="last must be"),
        case(rs, "max_chars-499", INVALID, {"max_chars": 499}, says="max_chars must be a whole number from 500 to 50,000"),
        case(rs, "max_chars-50001", INVALID, {"max_chars": 50_001}, says="from 500 to 50,000"),
        case(rs, "max_chars-string", INVALID, {"max_chars": "big"}, says="max_chars must be"),
        case(rs, "include_activity-string", INVALID, {"include_activity": "yes"}, says="include_activity must be true or false"),
        case(rs, "include_activity-number", INVALID, {"include_activity": 1}, says="include_activity must be true or false"),
        case(rs, "before-unknown", NOT_FOUND, {"before": "nosuchmessage"}, says='has no message "nosuchmessage"'),
        case(rs, "before-message-of-another-session", NOT_FOUND, {"before": "<archived_prompt>"}, says="has no message"),
        case(rs, "before-too-long", INVALID, {"before": "m" * 65}, says="the limit is 64"),
        case(rs, "before-number", INVALID, {"before": 5}, says="before must be text"),
        # create_session (SPEC §3, §5.7, §5.8).
        case(cs, "text-missing", INVALID, {"text": _REMOVE}, says="create_session needs text"),
        case(cs, "text-empty-string-is-absent", INVALID, {"text": ""}, says="create_session needs text"),
        case(cs, "text-null-is-absent", INVALID, {"text": None}, says="create_session needs text"),
        case(cs, "text-list", INVALID, {"text": ["a"]}, says="text must be text"),
        case(cs, "text-number", INVALID, {"text": 42}, says="text must be text"),
        case(cs, "text-100001-chars", INVALID, {"text": "x" * 100_001},
             says="text is 100,001 characters; the limit is 100,000."),
        case(cs, "unknown-argument-session", INVALID, {"session": "<child>"},
             exact=f"create_session does not take: session. {CREATE_ARGUMENTS} Nothing was created."),
        case(cs, "unknown-arguments-two", INVALID, {"session": "<child>", "colour": 3},
             exact=f"create_session does not take: session, colour. {CREATE_ARGUMENTS} Nothing was created."),
        case(cs, "unknown-argument-among-empty-ones", INVALID,
             {"session": "<child>", "a": None, "b": "", "c": [], "d": {}, "e": False},
             exact=f"create_session does not take: session. {CREATE_ARGUMENTS} Nothing was created."),
        case(cs, "unknown-argument-may_create_sessions", INVALID, {"may_create_sessions": True},
             says="create_session does not take: may_create_sessions."),
        case(cs, "mode-fast", INVALID, {"mode": "fast"}, says='mode must be one of "agent", "ask", "plan"'),
        case(cs, "mode-number", INVALID, {"mode": 1}, says="mode must be"),
        case(cs, "wait_seconds-negative", INVALID, {"wait_seconds": -1}, says="wait_seconds must be"),
        case(cs, "wait_seconds-string", INVALID, {"wait_seconds": "10"}, says="wait_seconds must be"),
        case(cs, "wait_seconds-fraction", INVALID, {"wait_seconds": 1.5}, says="wait_seconds must be"),
        case(cs, "wait_seconds-too-big", INVALID, {"wait_seconds": 86_401}, says="wait_seconds must be"),
        case(cs, "provider-unknown", "REMOTE_RELAY_PROVIDER_UNAVAILABLE", {"provider": "nope"},
             says='Provider "nope" is not configured on relay "desk".'),
        case(cs, "model-unknown", "REMOTE_RELAY_UNKNOWN_MODEL", {"model": "gpt-9"}, says="Unknown model 'gpt-9'"),
        case(cs, "model-number", INVALID, {"model": 9}, says="model must be text"),
        case(cs, "effort-unknown", INVALID, {"effort": "extreme"}, says="Unknown effort 'extreme'"),
        case(cs, "cwd-outside-allowed-roots", INVALID, {"cwd": "/etc"}, says='The relay may not use folder "/etc".'),
        case(cs, "cwd-relative", INVALID, {"cwd": "work/here"}, says="may not use folder"),
        case(cs, "cwd-does-not-exist", INVALID, {"cwd": "<missing_dir>"}, says="does not exist on this relay"),
        case(cs, "cwd-number", INVALID, {"cwd": 5}, says="cwd must be text"),
        case(cs, "repo-for-a-folder-provider", INVALID, {"repo": "org/app"}, says="works in folders"),
        case(cs, "branch-for-a-folder-provider", INVALID, {"branch": "main"}, says="works in folders"),
        case(cs, "group-unknown-id", "REMOTE_RELAY_UNKNOWN_GROUP", {"group": "grp_nosuch"},
             says='Relay "desk" has no session group "grp_nosuch".', ends="No session was created."),
        case(cs, "group-unknown-name", "REMOTE_RELAY_UNKNOWN_GROUP", {"group": "Relase"},
             says='no session group "Relase"', ends="No session was created."),
        case(cs, "title-too-long", INVALID, {"title": "t" * 201}, says="the limit is 200"),
        case(cs, "title-number", INVALID, {"title": 5}, says="title must be text"),
        case(cs, "by-an-agent-started-session", "REMOTE_RELAY_NESTED_SESSION", {},
             says="A session that an agent created cannot create sessions.", caller="nested"),
        # send (SPEC §5.6, §7).
        case(sd, "text-missing", INVALID, {"text": _REMOVE}, says="send needs text"),
        case(sd, "text-empty-string-is-absent", INVALID, {"text": ""}, says="send needs text"),
        case(sd, "text-object", INVALID, {"text": {"a": 1}}, says="text must be text"),
        case(sd, "text-100001-chars", INVALID, {"text": "x" * 100_001},
             says="text is 100,001 characters; the limit is 100,000."),
        case(sd, "mode-fast", INVALID, {"mode": "fast"}, says='mode must be one of "agent", "ask", "plan"'),
        case(sd, "if_busy-maybe", INVALID, {"if_busy": "maybe"}, says='if_busy must be one of "queue", "fail"'),
        case(sd, "if_busy-number", INVALID, {"if_busy": 1}, says="if_busy must be"),
        case(sd, "wait_seconds-negative", INVALID, {"wait_seconds": -1}, says="wait_seconds must be"),
        case(sd, "wait_seconds-too-big", INVALID, {"wait_seconds": 86_401}, says="wait_seconds must be"),
        case(sd, "wait_seconds-true", INVALID, {"wait_seconds": True}, says="wait_seconds must be"),
        case(sd, "model-unknown", "REMOTE_RELAY_UNKNOWN_MODEL", {"model": "gpt-9"}, says="Unknown model 'gpt-9'"),
        case(sd, "effort-unknown", INVALID, {"effort": "extreme"}, says="Unknown effort 'extreme'"),
        case(sd, "session-archived", NOT_FOUND, {"session": "<archived>"}, says="is archived. Nothing was sent."),
        # update_session (SPEC §3, §4, §5.9).
        case(us, "no-setting", INVALID, {"title": _REMOVE}, says="at least one setting"),
        case(us, "only-empty-settings", INVALID,
             {"title": "", "model": None, "effort": [], "group": {}, "mode": ""}, says="at least one setting"),
        case(us, "may_create_sessions", INVALID, {"title": _REMOVE, "may_create_sessions": True}, says=OWNER_ONLY),
        case(us, "may_create_sessions-with-a-valid-title", INVALID, {"may_create_sessions": True}, says=OWNER_ONLY),
        case(us, "unknown-argument-text", INVALID, {"text": "hello"},
             exact=f"update_session does not take: text. {UPDATE_ARGUMENTS} Nothing was changed."),
        case(us, "unknown-argument-provider", INVALID, {"provider": "echo"},
             exact=f"update_session does not take: provider. {UPDATE_ARGUMENTS} Nothing was changed."),
        case(us, "mode-fast", INVALID, {"mode": "fast"}, says='mode must be one of "agent", "ask", "plan"'),
        case(us, "thinking_enabled-string", INVALID, {"thinking_enabled": "yes"}, says="must be true or false"),
        case(us, "thinking_enabled-number", INVALID, {"thinking_enabled": 1}, says="must be true or false"),
        case(us, "thinking_display-verbose", INVALID, {"thinking_display": "verbose"}, says="thinking_display must be"),
        case(us, "auto_compact_window-too-small", INVALID, {"auto_compact_window": 5}, says="auto_compact_window must be"),
        case(us, "auto_compact_window-too-big", INVALID, {"auto_compact_window": 10**12}, says="auto_compact_window"),
        case(us, "auto_compact_window-word", INVALID, {"auto_compact_window": "big"}, says="auto_compact_window"),
        case(us, "auto_compact_window-fraction", INVALID, {"auto_compact_window": 2500.5}, says="auto_compact_window"),
        case(us, "auto_compact_window-true", INVALID, {"auto_compact_window": True}, says="auto_compact_window"),
        case(us, "auto_compact_window-list", INVALID, {"auto_compact_window": [2000]}, says="auto_compact_window"),
        case(us, "title-blank", INVALID, {"title": "   "}, says="update_session needs at least one setting"),
        case(us, "title-too-long", INVALID, {"title": "t" * 201}, says="the limit is 200"),
        case(us, "model-unknown", "REMOTE_RELAY_UNKNOWN_MODEL", {"model": "gpt-9"}, says="Unknown model 'gpt-9'"),
        case(us, "effort-unknown", INVALID, {"effort": "extreme"}, says="Unknown effort 'extreme'"),
        case(us, "group-unknown-id", "REMOTE_RELAY_UNKNOWN_GROUP", {"group": "grp_nosuch"},
             says='no session group "grp_nosuch"'),
        case(us, "cwd-outside-allowed-roots", INVALID, {"cwd": "/etc"}, says='The relay may not use folder "/etc".'),
        case(us, "cwd-relative", INVALID, {"cwd": "work/here"}, says="may not use folder"),
        case(us, "cwd-does-not-exist", INVALID, {"cwd": "<missing_dir>"}, says="does not exist on this relay"),
        case(us, "valid-title-with-bad-mode", INVALID, {"mode": "fast"}, says="mode must be"),
        case(us, "valid-title-with-unknown-model", "REMOTE_RELAY_UNKNOWN_MODEL", {"model": "gpt-9"}, says="Unknown model"),
        case(us, "valid-title-with-unknown-group", "REMOTE_RELAY_UNKNOWN_GROUP",
             {"group": "grp_nosuch", "effort": "high"}, says="no session group"),
        case(us, "valid-title-with-bad-window", INVALID, {"auto_compact_window": "huge", "thinking_enabled": True},
             says="auto_compact_window"),
        case(us, "valid-title-with-bad-folder", INVALID, {"cwd": "/etc", "mode": "plan"}, says="may not use folder"),
        # wait (SPEC §5.10, §7).
        case(wt, "message_id-missing", INVALID, {"message_id": _REMOVE}, says="wait needs message_id"),
        case(wt, "message_id-empty-string-is-absent", INVALID, {"message_id": ""}, says="wait needs message_id"),
        case(wt, "message_id-number", INVALID, {"message_id": 7}, says="message_id must be text"),
        case(wt, "message_id-too-long", INVALID, {"message_id": "m" * 65}, says="the limit is 64"),
        case(wt, "message_id-unknown", NOT_FOUND, {"message_id": "nosuchmessage"},
             says='has no prompt with message_id "nosuchmessage"'),
        case(wt, "message_id-of-another-session", NOT_FOUND, {"message_id": "<archived_prompt>"},
             says="has no prompt with message_id"),
        case(wt, "message_id-of-a-reply", NOT_FOUND, {"message_id": "<reply>"}, says="has no prompt with message_id"),
        case(wt, "wait_seconds-negative", INVALID, {"wait_seconds": -1}, says="wait_seconds must be"),
        case(wt, "wait_seconds-string", INVALID, {"wait_seconds": "soon"}, says="wait_seconds must be"),
        # read_task_output (SPEC §5.5): task_id, lines 1–500, readable for an hour after the end.
        case(rt, "task_id-missing", INVALID, {"task_id": _REMOVE}, says="read_task_output needs task_id"),
        case(rt, "task_id-number", INVALID, {"task_id": 5}, says="task_id must be text"),
        case(rt, "task_id-too-long", INVALID, {"task_id": "t" * 65}, says="the limit is 64"),
        case(rt, "task_id-unknown", NOT_FOUND, {"task_id": "nosuchtask"}, says='has no task "nosuchtask"'),
        case(rt, "task_id-of-another-session", NOT_FOUND, {"task_id": "<other_task>"}, says="has no task"),
        case(rt, "task-ended-over-an-hour-ago", NOT_FOUND, {"task_id": "<expired_task>"},
             says="is kept for 60 minutes after a task ends"),
        case(rt, "lines-0", INVALID, {"lines": 0}, says="lines must be a whole number from 1 to 500"),
        case(rt, "lines-501", INVALID, {"lines": 501}, says="lines must be a whole number from 1 to 500"),
        case(rt, "lines-string", INVALID, {"lines": "all"}, says="lines must be"),
        case(rt, "lines-fraction", INVALID, {"lines": 2.5}, says="lines must be"),
    ]


CASES = _relay_cases() + _session_cases() + _action_cases()


def test_the_table_covers_every_action() -> None:
    registered = set(load_actions())
    assert set(COVERED) <= registered
    assert {c.action for c in CASES} | {"list_relays"} == set(COVERED)
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"


# Every action registered now or later: a relay that is not text is refused before anything else.
TAKING_RELAY = sorted(name for name, spec in load_actions().items() if "relay" in spec.params)


@pytest.mark.parametrize("action", TAKING_RELAY)
def test_every_registered_action_refuses_arguments_of_the_wrong_type(world: World, action: str) -> None:
    spec = load_actions()[action]
    before = snapshot(world.relay)
    status, body = world.desk.call(action, relay=["this"])
    assert_refused(status, body, INVALID, ends=spec.nothing or None)
    assert snapshot(world.relay) == before


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_arguments_are_refused_and_change_nothing(world: World, bad: Case) -> None:
    agent = world.desk if bad.caller == "desk" else world.nested
    before = snapshot(world.relay)
    status, body = agent.call(bad.action, **world.fill(bad.args))
    assert_refused(status, body, bad.code, ends=bad.ending, says=world.fill(bad.says), exact=world.fill(bad.exact))
    assert snapshot(world.relay) == before


def test_the_valid_arguments_of_the_table_do_succeed(world: World) -> None:
    """The table's cases spoil one thing each: without it, every action succeeds."""
    for action in ("list_relays", "relay_info", "usage", "list_sessions", "read_session", "update_session", "read_task_output"):
        world.desk.ok(action, **world.fill(VALID[action]))
    world.desk.ok("wait", **world.fill(VALID["wait"]))
    sent = world.desk.ok("send", **world.fill(VALID["send"]))
    world.desk.ok("wait", relay="this", session=sent["session"], message_id=sent["message_id"], wait_seconds=30)
    world.desk.ok("stop", **world.fill(VALID["stop"]))
    created = world.desk.ok("create_session", **world.fill(VALID["create_session"]))
    world.desk.ok("wait", relay="this", session=created["session"], message_id=created["message_id"], wait_seconds=30)
    assert world.desk.ok("archive", **world.fill(VALID["archive"]))["archived"] is True


# Calls that are not action calls ------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    id: str
    body: bytes | None
    code: str
    says: str = ""
    auth: str | None = "agent"  # agent | none | a literal header value | "<placeholder>" token
    content_type: str = "application/json"


def _list_sessions(limit: str) -> bytes:
    return ('{"action": "list_sessions", "relay": "this", "limit": ' + limit + "}").encode()


RAW_CASES = [
    # Bodies that are not JSON, or not an object (SPEC §3).
    Raw("body-not-json", b"list_relays please", INVALID, says="must be a JSON object"),
    Raw("body-truncated-json", b'{"action": "list_relays", ', INVALID, says="must be a JSON object"),
    Raw("body-empty", b"", INVALID, says="must be a JSON object"),
    Raw("body-json-array", b'["list_relays"]', INVALID, says="must be a JSON object"),
    Raw("body-json-string", b'"list_relays"', INVALID, says="must be a JSON object"),
    Raw("body-json-number", b"42", INVALID, says="must be a JSON object"),
    Raw("body-json-null", b"null", INVALID, says="must be a JSON object"),
    Raw("body-json-true", b"true", INVALID, says="must be a JSON object"),
    Raw("body-not-utf8", b'{"action": "list_relays\xff\xfe"}', INVALID),
    Raw("body-form-encoded", b"action=list_relays", INVALID, content_type="application/x-www-form-urlencoded"),
    Raw("body-deeply-nested", b'{"action": "list_relays", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", INVALID),
    Raw("body-integer-with-5000-digits", _list_sessions("1" + "0" * 5000), INVALID),
    # JSON as Python reads it also has NaN and Infinity; they are not numbers an argument takes.
    Raw("limit-NaN", _list_sessions("NaN"), INVALID, says="limit must be"),
    Raw("limit-Infinity", _list_sessions("Infinity"), INVALID, says="limit must be"),
    Raw("limit-minus-Infinity", _list_sessions("-Infinity"), INVALID, says="limit must be"),
    Raw("limit-1e400", _list_sessions("1e400"), INVALID, says="limit must be"),
    # Text that is not Unicode (a lone surrogate) cannot be stored or shown.
    Raw("session-lone-surrogate", b'{"action": "read_session", "relay": "this", "session": "\\ud800"}', INVALID),
    Raw("action-lone-surrogate", b'{"action": "fly\\udc00"}', INVALID),
    Raw("argument-name-lone-surrogate", b'{"action": "list_relays", "x\\ud800": 1}', INVALID),
    Raw("title-lone-surrogate",
        b'{"action": "create_session", "relay": "this", "text": "hi", "title": "a\\udfffb", "wait_seconds": 0}', INVALID),
    Raw("cwd-null-character",
        b'{"action": "create_session", "relay": "this", "text": "hi", "cwd": "/tmp/a\\u0000b", "wait_seconds": 0}',
        INVALID, says="Nothing was created."),
    Raw("cwd-null-character-after-tilde",
        b'{"action": "create_session", "relay": "this", "text": "hi", "cwd": "~\\u0000", "wait_seconds": 0}',
        INVALID, says="Nothing was created."),
    # The action itself (SPEC §5, §14).
    Raw("action-missing", b'{"relay": "this"}', INVALID, says="Give action"),
    Raw("action-empty", b'{"action": ""}', INVALID, says="Give action"),
    Raw("action-blank", b'{"action": "   "}', INVALID, says="Give action"),
    Raw("action-null", b'{"action": null}', INVALID, says="Give action"),
    Raw("action-number", b'{"action": 5}', INVALID, says="Give action"),
    Raw("action-list", b'{"action": ["list_relays"]}', INVALID, says="Give action"),
    Raw("action-unknown", b'{"action": "fly"}', "REMOTE_RELAY_UNKNOWN_ACTION", says='There is no action "fly".'),
    Raw("action-unknown-case", b'{"action": "List_Relays", "relay": "this"}', "REMOTE_RELAY_UNKNOWN_ACTION",
        says='There is no action "List_Relays".'),
    Raw("action-legacy-tool-name", b'{"action": "remote_relay"}', "REMOTE_RELAY_UNKNOWN_ACTION"),
    Raw("action-very-long", b'{"action": "' + b"x" * 10_000 + b'"}', "REMOTE_RELAY_UNKNOWN_ACTION"),
    # No or invalid token (SPEC §3: 401 in the same shape), whatever the body.
    Raw("token-missing", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="none"),
    Raw("token-missing-and-body-not-json", b"nonsense", "REMOTE_RELAY_UNAUTHORIZED", auth="none"),
    Raw("token-empty", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="Bearer "),
    Raw("token-wrong", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="Bearer oar_s_nope"),
    Raw("token-not-bearer", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="Basic b2FyOm9hcg=="),
    Raw("token-of-the-owner", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="<owner_token>"),
    Raw("token-of-a-deleted-session", b'{"action": "list_relays"}', "REMOTE_RELAY_UNAUTHORIZED", auth="<gone_token>"),
]


def _headers(world: World, raw: Raw) -> dict[str, str]:
    headers = {"Content-Type": raw.content_type}
    if raw.auth == "agent":
        headers["Authorization"] = f"Bearer {world.desk.token}"
    elif raw.auth and raw.auth.startswith("<"):
        headers["Authorization"] = f"Bearer {world.fill(raw.auth)}"
    elif raw.auth and raw.auth != "none":
        headers["Authorization"] = raw.auth
    return headers


@pytest.mark.parametrize("raw", RAW_CASES, ids=lambda r: r.id)
def test_bodies_actions_and_tokens_that_are_wrong_are_refused(world: World, raw: Raw) -> None:
    before = snapshot(world.relay)
    response = requests.post(
        world.relay.url + "/api/v1/relay_tool", data=raw.body, headers=_headers(world, raw), timeout=60
    )
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
    body = response.json()
    assert_refused(response.status_code, body, raw.code, says=raw.says)
    if raw.code == "REMOTE_RELAY_UNKNOWN_ACTION":
        assert "list_relays" in body["actions"] and "create_session" in body["actions"]
    assert snapshot(world.relay) == before


# Agent sessions off (SPEC §4) -----------------------------------------------------------------


@pytest.mark.parametrize("action", [a for a in COVERED if a not in ("list_relays", "relay_info")])
def test_with_agent_sessions_off_actions_are_refused_and_change_nothing(world: World, action: str) -> None:
    world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(world.relay)
    status, body = world.desk.call(action, **world.fill(VALID[action]))
    assert_refused(status, body, "REMOTE_RELAY_LOCAL_DISABLED", ends=NOTHING.get(action, "Nothing was done."),
                   says="Agents may start and use sessions on this relay")
    assert snapshot(world.relay) == before


def test_with_agent_sessions_off_list_relays_and_relay_info_still_work(world: World) -> None:
    world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(world.relay)
    listed = world.desk.ok("list_relays")
    assert listed["relays"] == [] and listed["self"] == {"name": "desk"}
    assert world.desk.ok("relay_info", relay="this")["name"] == "desk"
    assert snapshot(world.relay) == before


def test_with_agent_sessions_off_arguments_and_relay_are_checked_first(world: World) -> None:
    """Check order (SPEC §5): validate arguments → resolve relay → LOCAL_DISABLED."""
    world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(world.relay)
    status, body = world.desk.call("send", relay="this", session=world.fill("<child>"), text="x", mode="fast")
    assert_refused(status, body, INVALID, ends="Nothing was sent.", says="mode must be")
    status, body = world.desk.call("create_session", relay="build-box", text="x")
    assert_refused(status, body, "REMOTE_RELAY_UNKNOWN", ends="Nothing was created.")
    status, body = world.desk.call("fly")
    assert_refused(status, body, "REMOTE_RELAY_UNKNOWN_ACTION")
    assert snapshot(world.relay) == before


# Empty values count as absent (SPEC §3) --------------------------------------------------------

EMPTY_EXTRAS = {"extra_null": None, "extra_empty": "", "extra_list": [], "extra_object": {}, "extra_false": False}
NON_EMPTY_EXTRAS = {"colour": "blue", "count": 3, "deep": {"a": [1]}, "flag": True, "tags": ["x"]}


@pytest.mark.parametrize("action", COVERED)
def test_empty_unknown_arguments_are_neither_rejected_nor_listed(world: World, action: str) -> None:
    body = world.desk.ok(action, **world.fill(VALID[action]), **EMPTY_EXTRAS)
    assert "ignored" not in body, body


@pytest.mark.parametrize("action", [a for a in COVERED if a not in ("create_session", "update_session")])
def test_non_strict_actions_list_unknown_arguments_in_ignored(world: World, action: str) -> None:
    body = world.desk.ok(action, **world.fill(VALID[action]), **NON_EMPTY_EXTRAS, **EMPTY_EXTRAS)
    assert body["ignored"] == list(NON_EMPTY_EXTRAS), body


def test_ignored_lists_at_most_20_arguments(world: World) -> None:
    body = world.desk.ok("list_relays", **{f"extra{i:02d}": i + 1 for i in range(25)})
    assert body["ignored"] == [f"extra{i:02d}" for i in range(20)]


def test_empty_values_of_taken_arguments_mean_not_given(world: World) -> None:
    listed = world.desk.ok("list_sessions", relay="this", scope="", limit=None, query=[], cursor={})
    assert len(listed["sessions"]) == 3  # desk, child, other: not the archived or deleted ones
    read = world.desk.ok("read_session", relay="this", session=world.fill("<child>"),
                         last=None, before="", include_activity=[], max_chars={})
    assert [m["role"] for m in read["messages"]] == ["user", "assistant"]
    sent = world.desk.ok("send", relay="this", session=world.fill("<child>"), text="again",
                         mode="", if_busy=None, model=[], effort={}, provider="", wait_seconds=30)
    assert sent["status"] == "done" and sent["reply"]["text"] == "echo: again"


def test_false_is_a_real_value_for_boolean_arguments(world: World) -> None:
    """thinking_enabled: false is a setting, so update_session has one (SPEC §3)."""
    body = world.desk.ok("update_session", relay="this", session=world.fill("<child>"), thinking_enabled=False)
    assert body["settings"]["thinking_enabled"] is False


def test_read_session_may_read_the_callers_own_conversation(world: World) -> None:
    body = world.desk.ok("read_session", relay="this", session=world.desk.session_id)
    assert body["session"]["id"] == world.desk.session_id


# Refusals while a turn runs (SPEC §7 if_busy, §5.9 folder) --------------------------------------


def test_busy_refusals_queue_nothing_and_change_nothing(world: World) -> None:
    child = world.fill("<child>")
    elsewhere = world.relay.config.data_dir / "work" / "elsewhere"
    elsewhere.mkdir(parents=True, exist_ok=True)
    running = world.desk.ok("send", relay="this", session=child, text="!sleep 30\nworking", wait_seconds=0)
    try:
        def state() -> tuple[Any, ...]:
            detail = world.relay.owner.get(f"/api/v1/owner/sessions/{child}")
            return detail["session"]["settings"], [m["id"] for m in detail["messages"]]

        before = state()
        status, body = world.desk.call("send", relay="this", session=child, text="now", if_busy="fail", wait_seconds=0)
        assert_refused(status, body, "REMOTE_RELAY_BUSY", ends="Nothing was sent.", says="is busy")
        assert body["progress"]["turnMessageId"] == running["message_id"]
        status, body = world.desk.call("update_session", relay="this", session=child, cwd=str(elsewhere), title="moved")
        assert_refused(status, body, "REMOTE_RELAY_BUSY", ends="Nothing was changed.",
                       says="The session cannot move to another folder now")
        assert state() == before
    finally:
        world.desk.ok("stop", relay="this", session=child)
    stopped = world.desk.ok("wait", relay="this", session=child, message_id=running["message_id"], wait_seconds=30)
    assert stopped["status"] == "stopped"


# The owner API (SPEC §16) -----------------------------------------------------------------------


@dataclass(frozen=True)
class OwnerCase:
    id: str
    method: str
    path: str
    body: Any = None  # JSON, or bytes sent as they are
    code: str = INVALID
    says: str = ""
    auth: str = "owner"  # owner | none | wrong | agent

    def send(self, world: World) -> requests.Response:
        headers = {"Content-Type": "application/json"}
        token = {"owner": world.relay.owner.token, "wrong": "oar_o_wrong", "agent": world.desk.token}.get(self.auth)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = self.body if isinstance(self.body, bytes) else None
        if self.body is not None and data is None:
            data = json.dumps(world.fill(self.body)).encode()
        return requests.request(self.method, world.relay.url + world.fill_in(self.path), data=data, headers=headers,
                                timeout=60)


SETTINGS = "/api/v1/owner/settings"
SESSIONS = "/api/v1/owner/sessions"
CHILD = "/api/v1/owner/sessions/<child>"

OWNER_CASES = [
    OwnerCase("settings-unknown-key", "PATCH", SETTINGS, {"bogus": 1}, says="Unknown settings: bogus."),
    OwnerCase("settings-unknown-key-with-a-valid-one", "PATCH", SETTINGS, {"max_turn_seconds": 120, "bogus": 1},
              says="Unknown settings: bogus."),
    OwnerCase("settings-empty-object", "PATCH", SETTINGS, {}, says="Give one or more settings"),
    OwnerCase("settings-array", "PATCH", SETTINGS, [1], says="must be a JSON object"),
    OwnerCase("settings-string", "PATCH", SETTINGS, "agent_sessions_enabled", says="must be a JSON object"),
    OwnerCase("settings-not-json", "PATCH", SETTINGS, b"max_wait_seconds=600", says="must be a JSON object"),
    OwnerCase("settings-max_wait_seconds-119", "PATCH", SETTINGS, {"max_wait_seconds": 119},
              says="from 120 to 3600"),
    OwnerCase("settings-max_wait_seconds-3601", "PATCH", SETTINGS, {"max_wait_seconds": 3601},
              says="from 120 to 3600"),
    OwnerCase("settings-max_wait_seconds-string", "PATCH", SETTINGS, {"max_wait_seconds": "600"}),
    OwnerCase("settings-valid-then-out-of-range", "PATCH", SETTINGS, {"max_turn_seconds": 120, "max_wait_seconds": 5}),
    OwnerCase("settings-enabled-string", "PATCH", SETTINGS, {"agent_sessions_enabled": "yes"},
              says="must be true or false"),
    OwnerCase("settings-rate-negative", "PATCH", SETTINGS, {"rate_calls_per_minute": -1}),
    OwnerCase("settings-rate-fraction", "PATCH", SETTINGS, {"rate_writes_per_minute": 2.5}),
    OwnerCase("settings-relay_name-empty", "PATCH", SETTINGS, {"relay_name": ""}),
    OwnerCase("settings-relay_name-too-long", "PATCH", SETTINGS, {"relay_name": "n" * 101}),
    OwnerCase("settings-allowed_roots-relative", "PATCH", SETTINGS, {"allowed_roots": ["relative/dir"]},
              says="is not an absolute path"),
    OwnerCase("settings-allowed_roots-not-a-list", "PATCH", SETTINGS, {"allowed_roots": "/tmp"}),
    OwnerCase("settings-allowed_roots-null-character", "PATCH", SETTINGS, {"allowed_roots": ["/tmp/a\u0000b"]}),
    OwnerCase("settings-NaN", "PATCH", SETTINGS, b'{"max_wait_seconds": NaN}'),
    OwnerCase("new-session-unknown-field", "POST", SESSIONS, {"bogus": 1}, says="does not take: bogus"),
    OwnerCase("new-session-may_create_sessions", "POST", SESSIONS, {"title": "x", "may_create_sessions": True},
              says="does not take: may_create_sessions"),
    OwnerCase("new-session-mode-fast", "POST", SESSIONS, {"mode": "fast"}, says="mode must be"),
    OwnerCase("new-session-text-number", "POST", SESSIONS, {"text": 5}, says="text must be text"),
    OwnerCase("new-session-text-too-long", "POST", SESSIONS, {"text": "x" * 100_001}, says="the limit is 100,000"),
    OwnerCase("new-session-provider-unknown", "POST", SESSIONS, {"provider": "nope"},
              code="REMOTE_RELAY_PROVIDER_UNAVAILABLE"),
    OwnerCase("new-session-model-unknown", "POST", SESSIONS, {"model": "gpt-9"}, code="REMOTE_RELAY_UNKNOWN_MODEL"),
    OwnerCase("new-session-cwd-outside", "POST", SESSIONS, {"cwd": "/etc"}, says="may not use folder"),
    OwnerCase("new-session-array", "POST", SESSIONS, [{"title": "x"}], says="must be a JSON object"),
    OwnerCase("new-session-not-json", "POST", SESSIONS, b"title=x", says="must be a JSON object"),
    OwnerCase("change-session-unknown-field", "PATCH", CHILD, {"bogus": 1}, says="does not take: bogus"),
    OwnerCase("change-session-mode-fast", "PATCH", CHILD, {"mode": "fast"}, says="mode must be"),
    OwnerCase("change-session-may_create_sessions-string", "PATCH", CHILD, {"may_create_sessions": "yes"},
              says="must be true or false"),
    OwnerCase("change-session-title-with-unknown-group", "PATCH", CHILD, {"title": "x", "group_id": "grp_nosuch"},
              code="REMOTE_RELAY_UNKNOWN_GROUP"),
    OwnerCase("change-session-unknown-session", "PATCH", f"{SESSIONS}/nosuchsession", {"title": "x"}, code=NOT_FOUND),
    OwnerCase("change-session-array", "PATCH", CHILD, ["title"], says="must be a JSON object"),
    OwnerCase("read-session-unknown", "GET", f"{SESSIONS}/nosuchsession", code=NOT_FOUND),
    OwnerCase("message-without-text", "POST", f"{CHILD}/messages", {}, says="needs text"),
    OwnerCase("message-text-number", "POST", f"{CHILD}/messages", {"text": 5}, says="text must be text"),
    OwnerCase("message-unknown-field", "POST", f"{CHILD}/messages", {"text": "hi", "bogus": 1},
              says="does not take: bogus"),
    OwnerCase("message-to-unknown-session", "POST", f"{SESSIONS}/nosuchsession/messages", {"text": "hi"},
              code=NOT_FOUND),
    OwnerCase("message-to-archived-session", "POST", f"{SESSIONS}/<archived>/messages", {"text": "hi"},
              code=NOT_FOUND, says="is archived"),
    OwnerCase("token-for-unknown-session", "POST", f"{SESSIONS}/nosuchsession/tokens", code=NOT_FOUND),
    OwnerCase("archive-unknown-session", "POST", f"{SESSIONS}/nosuchsession/archive", code=NOT_FOUND),
    OwnerCase("delete-unknown-session", "DELETE", f"{SESSIONS}/nosuchsession", code=NOT_FOUND),
    OwnerCase("new-group-without-name", "POST", "/api/v1/owner/groups", {}, says="needs name"),
    OwnerCase("new-group-name-number", "POST", "/api/v1/owner/groups", {"name": 5}, says="name must be text"),
    OwnerCase("provider-unknown", "GET", "/api/v1/owner/providers/nope", code=NOT_FOUND),
    OwnerCase("no-token", "PATCH", SETTINGS, {"max_wait_seconds": 120}, code="REMOTE_RELAY_UNAUTHORIZED", auth="none"),
    OwnerCase("wrong-token", "PATCH", SETTINGS, {"max_wait_seconds": 120}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="wrong"),
    OwnerCase("agent-token", "PATCH", SETTINGS, {"agent_sessions_enabled": False}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="agent"),
    OwnerCase("agent-token-creating-a-session", "POST", SESSIONS, {"title": "x"}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="agent"),
]


@pytest.mark.parametrize("bad", OWNER_CASES, ids=lambda c: c.id)
def test_owner_api_bad_input_is_refused_and_changes_nothing(world: World, bad: OwnerCase) -> None:
    before = snapshot(world.relay)
    response = bad.send(world)
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
    assert_refused(response.status_code, response.json(), bad.code, says=bad.says)
    assert snapshot(world.relay) == before


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/v1/nope", 404),
        ("POST", "/api/v1/relay_tools", 404),
        ("GET", "/api/v1/owner/nope", 404),
        ("DELETE", "/api/v1/owner/sessions/x/y/z", 404),
        ("GET", "/api/v1/relay_tool", 405),
        ("DELETE", "/api/v1/owner/settings", 405),
    ],
    ids=lambda value: str(value),
)
def test_unknown_routes_answer_json_not_html(world: World, method: str, path: str, status: int) -> None:
    before = snapshot(world.relay)
    for headers in ({}, {"Authorization": f"Bearer {world.relay.owner.token}"}):
        response = requests.request(method, world.relay.url + path, headers=headers, timeout=60)
        assert response.status_code == status
        assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
        assert "<html" not in response.text.lower()
        body = response.json()
        assert body["ok"] is False and isinstance(body["code"], str) and body["error"].endswith("."), body
        if status == 404:
            assert body["code"] == NOT_FOUND
    assert snapshot(world.relay) == before
