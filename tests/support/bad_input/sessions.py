"""The bad-input table of the session actions (docs/calling.md, docs/rules.md, docs/calling.md#check-order, docs/waiting.md): list_relays, relay_info,
usage, list_sessions, read_session, create_session, send, update_session, wait, stop, archive
and read_task_output, whose `relay` is required."""

from __future__ import annotations

import base64
from typing import Any

from tests.support.bad_input.world import INVALID, NOT_FOUND, OWN, REMOVE, Case, spoil

# The actions this table covers (docs/calling.md#check-order; the ones registered today).
COVERED = (
    "list_relays", "relay_info", "usage", "list_sessions", "read_session", "create_session", "send",
    "update_session", "wait", "stop", "archive", "read_task_output",
)
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


def case(action: str, name: str, code: str, changes: dict[str, Any], **options: Any) -> Case:
    """A case: the action's valid arguments with `changes` applied (REMOVE drops one)."""
    return Case(id=f"{action}-{name}", action=action, args=spoil(VALID[action], changes), code=code, **options)


def _relay_cases() -> list[Case]:
    cases = []
    for action in COVERED:
        if action == "list_relays":
            continue
        cases += [
            case(action, "relay-missing", INVALID, {"relay": REMOVE}, says=f"{action} needs relay"),
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
            case(action, "session-missing", INVALID, {"session": REMOVE}, says=f"{action} needs session"),
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
        # list_sessions (docs/sessions.md#list_sessions): scope, limit 1–100, query, cursor.
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
        # read_session (docs/sessions.md#list_sessions): last 1–50, max_chars 500–50,000, before, include_activity.
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
        # create_session (docs/calling.md, docs/sessions.md#create_session, docs/sessions.md#model-checks).
        case(cs, "text-missing", INVALID, {"text": REMOVE}, says="create_session needs text"),
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
        # send (docs/sessions.md#send, docs/waiting.md).
        case(sd, "text-missing", INVALID, {"text": REMOVE}, says="send needs text"),
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
        # update_session (docs/calling.md, docs/rules.md, docs/sessions.md#update_session).
        case(us, "no-setting", INVALID, {"title": REMOVE}, says="at least one setting"),
        case(us, "only-empty-settings", INVALID,
             {"title": "", "model": None, "effort": [], "group": {}, "mode": ""}, says="at least one setting"),
        case(us, "may_create_sessions", INVALID, {"title": REMOVE, "may_create_sessions": True}, says=OWNER_ONLY),
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
        # wait (docs/waiting.md#the-wait-action, docs/waiting.md).
        case(wt, "message_id-missing", INVALID, {"message_id": REMOVE}, says="wait needs message_id"),
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
        # read_task_output (docs/tasks.md#read_task_output): task_id, lines 1–500, readable for an hour after the end.
        case(rt, "task_id-missing", INVALID, {"task_id": REMOVE}, says="read_task_output needs task_id"),
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


def _list_relays_cases() -> list[Case]:
    """list_relays takes no arguments (others are ignored): what is wrong is who calls."""
    unauthorized = "REMOTE_RELAY_UNAUTHORIZED"
    return [
        case("list_relays", "by-a-deleted-session", unauthorized, {}, caller="gone"),
        case("list_relays", "with-the-owner-token", unauthorized, {}, caller="owner"),
    ]


CASES = _relay_cases() + _session_cases() + _action_cases() + _list_relays_cases()
