"""Bad input is refused in the documented shape and changes nothing (docs/calling.md, docs/rules.md, docs/calling.md#check-order, docs/waiting.md, docs/errors.md, docs/owner-api.md).

Tables of cases over every registered action (tests/support/bad_input/), run in-process
against the real relay's app (its database, Redis, and the world its workers built): each case
through the dispatcher, or through the app's test client when it is refused at the HTTP edge,
with the database's write counts equal before and after (tests/support/write_counts.py): a
refused call changes nothing. A few cases of each table run over real HTTP as well, comparing a
snapshot of every table and of the owner API's views taken before the call with one taken
after. This module runs the session actions' table and checks that every action the registry
holds has cases in some table; the schedule, subscription and question tables run in their own
modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from oar.actions.catalog import load_actions
from tests.support import write_counts
from tests.support.bad_input.in_process import (
    WorldKeeper,
    assert_case_refused_in_process,
    assert_refused_by_app,
    call,
)
from tests.support.bad_input.outside import CASES as OUTSIDE_CASES
from tests.support.bad_input.registry import ALL_CASES, TABLES, cases_per_action
from tests.support.bad_input.sessions import CASES, COVERED, VALID
from tests.support.bad_input.world import (
    INVALID,
    NOT_FOUND,
    NOTHING,
    Case,
    World,
    assert_case_refused,
    assert_refused,
)
from tests.support.snapshots import snapshot


@pytest.mark.parametrize("action", sorted(load_actions()))
def test_every_registered_action_has_bad_input_cases(action: str) -> None:
    """A new action fails here until a table in tests/support/bad_input/ has cases for it."""
    assert cases_per_action()[action] > 0, f"no bad-input cases for {action!r}: add them to a table in tests/support/bad_input/"


def test_the_tables_name_only_registered_actions_and_unique_cases() -> None:
    registered = set(load_actions())
    assert {c.action for c in ALL_CASES} <= registered
    assert set(COVERED) <= registered
    assert {c.action for c in CASES} == set(COVERED)
    assert len({c.id for c in ALL_CASES}) == len(ALL_CASES), "case ids must be unique across the tables"
    assert all(TABLES.values())


# Every action registered now or later: a relay that is not text is refused before anything else.
TAKING_RELAY = sorted(name for name, spec in load_actions().items() if "relay" in spec.params)


# The cases that run over real HTTP as well as in-process: the edge stays covered.
WRONG_TYPE_OVER_HTTP = ("send",)
OVER_HTTP = ("send-own-session", "update_session-session-unknown", "list_sessions-cursor-garbage")
RAW_OVER_HTTP = ("body-not-json", "body-deeply-nested", "action-unknown", "token-of-a-deleted-session")
OWNER_OVER_HTTP = ("settings-unknown-key", "new-session-not-json", "message-to-archived-session", "tasks-command-nul",
                   "agent-token")


@pytest.fixture
def tables_world(kept_worlds: WorldKeeper) -> World:
    """The tables' world, kept from case to case while nothing writes (in-process cases)."""
    return kept_worlds.get("tables")


@pytest.mark.parametrize("action", TAKING_RELAY)
def test_every_registered_action_refuses_arguments_of_the_wrong_type(tables_world: World, action: str) -> None:
    world = tables_world
    assert world.app is not None
    spec = load_actions()[action]
    before = write_counts.fingerprint()
    status, body = call(world.app, world.desk.token, action, {"relay": ["this"]})
    assert_refused(status, body, INVALID, ends=spec.nothing or None)
    assert write_counts.fingerprint() == before


@pytest.mark.parametrize("action", WRONG_TYPE_OVER_HTTP)
def test_over_http_an_action_refuses_arguments_of_the_wrong_type(world: World, action: str) -> None:
    spec = load_actions()[action]
    before = snapshot(world.relay)
    status, body = world.desk.call(action, relay=["this"])
    assert_refused(status, body, INVALID, ends=spec.nothing or None)
    assert snapshot(world.relay) == before


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_arguments_are_refused_and_change_nothing(tables_world: World, bad: Case) -> None:
    assert_case_refused_in_process(tables_world, bad)


@pytest.mark.parametrize("bad", [c for c in CASES if c.id in OVER_HTTP], ids=lambda c: c.id)
def test_over_http_bad_arguments_are_refused_and_change_nothing(world: World, bad: Case) -> None:
    assert_case_refused(world, bad)


@pytest.mark.parametrize("bad", OUTSIDE_CASES, ids=lambda c: c.id)
def test_bad_take_and_reply_input_is_refused_and_changes_nothing(tables_world: World, bad: Case) -> None:
    """take and reply's table (tests/support/bad_input/outside.py), which no module ran until the
    tables ran in-process."""
    assert_case_refused_in_process(tables_world, bad)


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
    # Bodies that are not JSON, or not an object (docs/calling.md).
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
    # The action itself (docs/calling.md#check-order, docs/errors.md).
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
    # No or invalid token (docs/calling.md: 401 in the same shape), whatever the body.
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
def test_bodies_actions_and_tokens_that_are_wrong_are_refused(tables_world: World, raw: Raw) -> None:
    world = tables_world

    def send(client: FlaskClient) -> TestResponse:
        return client.post("/api/v1/relay_tool", data=raw.body, headers=_headers(world, raw))

    body = assert_refused_by_app(world, send, raw.code, says=raw.says)
    if raw.code == "REMOTE_RELAY_UNKNOWN_ACTION":
        assert "list_relays" in body["actions"] and "create_session" in body["actions"]


@pytest.mark.parametrize("raw", [r for r in RAW_CASES if r.id in RAW_OVER_HTTP], ids=lambda r: r.id)
def test_over_http_bodies_actions_and_tokens_that_are_wrong_are_refused(world: World, raw: Raw) -> None:
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


# Agent sessions off (docs/rules.md#agent-sessions-on-or-off) -----------------------------------------------------------------


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
    """Check order (docs/calling.md#check-order): validate arguments → resolve relay → LOCAL_DISABLED."""
    world.relay.settings(agent_sessions_enabled=False)
    before = snapshot(world.relay)
    status, body = world.desk.call("send", relay="this", session=world.fill("<child>"), text="x", mode="fast")
    assert_refused(status, body, INVALID, ends="Nothing was sent.", says="mode must be")
    status, body = world.desk.call("create_session", relay="build-box", text="x")
    assert_refused(status, body, "REMOTE_RELAY_UNKNOWN", ends="Nothing was created.")
    status, body = world.desk.call("fly")
    assert_refused(status, body, "REMOTE_RELAY_UNKNOWN_ACTION")
    assert snapshot(world.relay) == before


# Empty values count as absent (docs/calling.md) --------------------------------------------------------

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
    """thinking_enabled: false is a setting, so update_session has one (docs/calling.md)."""
    body = world.desk.ok("update_session", relay="this", session=world.fill("<child>"), thinking_enabled=False)
    assert body["settings"]["thinking_enabled"] is False


def test_read_session_may_read_the_callers_own_conversation(world: World) -> None:
    body = world.desk.ok("read_session", relay="this", session=world.desk.session_id)
    assert body["session"]["id"] == world.desk.session_id


# Refusals while a turn runs (docs/waiting.md if_busy, docs/sessions.md#folders folder) --------------------------------------


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


# The owner API (docs/owner-api.md) -----------------------------------------------------------------------


@dataclass(frozen=True)
class OwnerCase:
    id: str
    method: str
    path: str
    body: Any = None  # JSON, or bytes sent as they are
    code: str = INVALID
    says: str = ""
    auth: str = "owner"  # owner | none | wrong | agent

    def headers(self, world: World) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        token = {"owner": world.relay.owner.token, "wrong": "oar_o_wrong", "agent": world.desk.token}.get(self.auth)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def data(self, world: World) -> bytes | None:
        data = self.body if isinstance(self.body, bytes) else None
        if self.body is not None and data is None:
            data = json.dumps(world.fill(self.body)).encode()
        return data

    def send(self, world: World) -> requests.Response:
        return requests.request(self.method, world.relay.url + world.fill_in(self.path), data=self.data(world),
                                headers=self.headers(world), timeout=60)

    def send_in_process(self, world: World, client: FlaskClient) -> TestResponse:
        return client.open(world.fill_in(self.path), method=self.method, data=self.data(world),
                           headers=self.headers(world))


SETTINGS = "/api/v1/owner/settings"
DEEP = b"[" * 100_000 + b"]" * 100_000
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
    OwnerCase("settings-roots-unknown-user", "PATCH", SETTINGS, {"allowed_roots": ["~no-such-user-oar/work"]},
              says="names no home folder"),
    OwnerCase("settings-rate-fraction", "PATCH", SETTINGS, {"rate_writes_per_minute": 2.5}),
    OwnerCase("settings-team-rate-fraction", "PATCH", SETTINGS, {"team_writes_per_minute": 2.5}),
    OwnerCase("settings-team-rate-too-high", "PATCH", SETTINGS, {"team_calls_per_minute": 100_001},
              says="must be a whole number from 0 to 100000"),
    OwnerCase("settings-team-shared-string", "PATCH", SETTINGS, {"team_runs_shared": "yes"}, says="must be true or false"),
    OwnerCase("settings-relay_name-empty", "PATCH", SETTINGS, {"relay_name": ""}),
    OwnerCase("settings-relay_name-too-long", "PATCH", SETTINGS, {"relay_name": "n" * 101}),
    OwnerCase("settings-allowed_roots-relative", "PATCH", SETTINGS, {"allowed_roots": ["relative/dir"]},
              says="is not an absolute path"),
    OwnerCase("settings-allowed_roots-not-a-list", "PATCH", SETTINGS, {"allowed_roots": "/tmp"}),
    OwnerCase("settings-allowed_roots-null-character", "PATCH", SETTINGS, {"allowed_roots": ["/tmp/a\u0000b"]}),
    OwnerCase("settings-NaN", "PATCH", SETTINGS, b'{"max_wait_seconds": NaN}'),
    OwnerCase("settings-max_running_tasks-0", "PATCH", SETTINGS, {"max_running_tasks": 0}, says="from 1 to 200"),
    OwnerCase("settings-max_running_tasks-201", "PATCH", SETTINGS, {"max_running_tasks": 201}, says="from 1 to 200"),
    OwnerCase("settings-max_running_tasks-string", "PATCH", SETTINGS, {"max_running_tasks": "8"}, says="from 1 to 200"),
    OwnerCase("settings-max_running_tasks_per_session-101", "PATCH", SETTINGS, {"max_running_tasks_per_session": 101},
              says="from 1 to 100"),
    OwnerCase("settings-max_running_tasks_per_session-true", "PATCH", SETTINGS, {"max_running_tasks_per_session": True},
              says="from 1 to 100"),
    OwnerCase("settings-max_task_minutes-0", "PATCH", SETTINGS, {"max_task_minutes": 0}, says="from 1 to 10080"),
    OwnerCase("settings-max_task_minutes-fraction", "PATCH", SETTINGS, {"max_task_minutes": 1.5}, says="from 1 to 10080"),
    OwnerCase("settings-max_task_minutes-huge", "PATCH", SETTINGS, b'{"max_task_minutes": 1e400}'),
    OwnerCase("provider-environment-bad-name", "PUT", "/api/v1/owner/providers/coder",
              {"kind": "cli", "command": ["agent"], "environment": {"A B": "x"}}, says="environment variable names"),
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
    # A task's command becomes a process's arguments, which cannot hold a NUL (docs/tasks.md#starting-and-stopping).
    OwnerCase("tasks-command-nul", "POST", "/api/v1/tasks", {"command": "echo a\u0000b"}, auth="agent",
              says="cannot hold a NUL character"),
    OwnerCase("tasks-description-nul", "POST", "/api/v1/tasks", {"command": "true", "description": "a\u0000b"},
              auth="agent", says="cannot hold a NUL character"),
    OwnerCase("tasks-command-lone-surrogate", "POST", "/api/v1/tasks", {"command": "echo \ud800"}, auth="agent",
              says="cannot hold a NUL character or a lone surrogate"),
    # A refusal that quotes what was sent (an unknown field's name) writes a lone surrogate as its escape.
    OwnerCase("tasks-unknown-field-lone-surrogate", "POST", "/api/v1/tasks", {"command": "true", "x\ud800": 1},
              auth="agent", says="does not take: x\ud800"),
    # Nested deeper than the JSON parser goes, on every JSON endpoint.
    OwnerCase("tasks-deeply-nested", "POST", "/api/v1/tasks", b'{"command": ' + DEEP + b"}", auth="agent",
              says="must be a JSON object"),
    OwnerCase("settings-deeply-nested", "PATCH", SETTINGS, b'{"relay_name": ' + DEEP + b"}", says="must be a JSON object"),
    OwnerCase("provider-deeply-nested", "PUT", "/api/v1/owner/providers/lab", b'{"kind": ' + DEEP + b"}",
              says="must be a JSON object"),
    OwnerCase("no-token", "PATCH", SETTINGS, {"max_wait_seconds": 120}, code="REMOTE_RELAY_UNAUTHORIZED", auth="none"),
    OwnerCase("wrong-token", "PATCH", SETTINGS, {"max_wait_seconds": 120}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="wrong"),
    OwnerCase("agent-token", "PATCH", SETTINGS, {"agent_sessions_enabled": False}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="agent"),
    OwnerCase("agent-token-creating-a-session", "POST", SESSIONS, {"title": "x"}, code="REMOTE_RELAY_UNAUTHORIZED",
              auth="agent"),
]


@pytest.mark.parametrize("bad", OWNER_CASES, ids=lambda c: c.id)
def test_owner_api_bad_input_is_refused_and_changes_nothing(tables_world: World, bad: OwnerCase) -> None:
    assert_refused_by_app(tables_world, lambda client: bad.send_in_process(tables_world, client), bad.code,
                          says=bad.says)


@pytest.mark.parametrize("bad", [c for c in OWNER_CASES if c.id in OWNER_OVER_HTTP], ids=lambda c: c.id)
def test_over_http_owner_api_bad_input_is_refused_and_changes_nothing(world: World, bad: OwnerCase) -> None:
    before = snapshot(world.relay)
    response = bad.send(world)
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
    assert_refused(response.status_code, response.json(), bad.code, says=bad.says)
    assert snapshot(world.relay) == before


UNKNOWN_ROUTES = [
    ("GET", "/api/v1/nope", 404),
    ("POST", "/api/v1/relay_tools", 404),
    ("GET", "/api/v1/owner/nope", 404),
    ("DELETE", "/api/v1/owner/sessions/x/y/z", 404),
    ("GET", "/api/v1/relay_tool", 405),
    ("DELETE", "/api/v1/owner/settings", 405),
]


def _assert_json_not_html(status: int, expected: int, content_type: str, text: str, body: Any) -> None:
    assert status == expected
    assert content_type.startswith("application/json"), text[:300]
    assert "<html" not in text.lower()
    assert body["ok"] is False and isinstance(body["code"], str) and body["error"].endswith("."), body
    if expected == 404:
        assert body["code"] == NOT_FOUND


@pytest.mark.parametrize(("method", "path", "status"), UNKNOWN_ROUTES, ids=lambda value: str(value))
def test_unknown_routes_answer_json_not_html(tables_world: World, method: str, path: str, status: int) -> None:
    world = tables_world
    assert world.app is not None
    before = write_counts.fingerprint()
    for headers in ({}, {"Authorization": f"Bearer {world.relay.owner.token}"}):
        response = world.app.test_client().open(path, method=method, headers=headers)
        text = response.get_data(as_text=True)
        _assert_json_not_html(response.status_code, status, response.headers["Content-Type"], text, response.get_json())
    assert write_counts.fingerprint() == before


@pytest.mark.parametrize(("method", "path", "status"), UNKNOWN_ROUTES[:1], ids=lambda value: str(value))
def test_over_http_unknown_routes_answer_json_not_html(world: World, method: str, path: str, status: int) -> None:
    before = snapshot(world.relay)
    for headers in ({}, {"Authorization": f"Bearer {world.relay.owner.token}"}):
        response = requests.request(method, world.relay.url + path, headers=headers, timeout=60)
        _assert_json_not_html(response.status_code, status, response.headers["Content-Type"], response.text,
                              response.json())
    assert snapshot(world.relay) == before
