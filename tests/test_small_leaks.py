"""What the review found leaking in small ways, closed: an archived session's agent token stops working
(docs/sessions.md#archive); titles are one line at every surface that sets one (docs/sessions.md); a
task's description, its command unless the agent gave one, is masked like its output wherever it is
shown (docs/tasks.md#read_task_output)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from oar.core.models import Event, Session
from oar.watching.event_lines import event_line
from tests.support.bad_input.world import INVALID, World, assert_refused
from tests.support.clients import Agent, poll
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

UNAUTHORIZED = "REMOTE_RELAY_UNAUTHORIZED"
# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators, written out here.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# Archived sessions' tokens ------------------------------------------------------------------------------


def refused_everywhere(relay: Relay, agent: Agent) -> None:
    """The token is refused on relay_tool, the tasks API, an external agent's poll and MCP, in the
    error shape, saying the session is archived."""
    before = snapshot(relay)
    answers = [
        agent.call("list_relays"),
        agent.request("POST", "/api/v1/tasks", {"command": "echo hi"}),
        agent.request("GET", "/api/v1/external/next?wait_seconds=0"),
        agent.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Accept": "application/json, text/event-stream"}),
    ]
    for status, body in answers:
        assert_refused(status, body, UNAUTHORIZED, says="which is archived: its tokens no longer work")
    assert snapshot(relay) == before


def test_an_archived_sessions_agent_token_is_refused_like_a_revoked_one(relay: Relay, desk: Agent) -> None:
    by_owner = relay.conversation("archived by the owner")
    assert by_owner.ok("list_relays")["ok"] is True
    relay.owner.post(f"/api/v1/owner/sessions/{by_owner.session_id}/archive")
    refused_everywhere(relay, by_owner)
    # A new token for it would not work either: none is given.
    status, body = relay.owner.request("POST", f"/api/v1/owner/sessions/{by_owner.session_id}/tokens")
    assert status == 404 and body["code"] == "REMOTE_RELAY_NOT_FOUND" and "is archived" in body["error"], body

    # A session an agent started and then archived: its own agent's token stops working too.
    child = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    child_agent = relay.agent_for(child)
    assert child_agent.ok("list_relays")["ok"] is True
    desk.ok("archive", relay="this", session=child)
    refused_everywhere(relay, child_agent)
    assert desk.ok("list_relays")["ok"] is True  # the archiving conversation's own token still works


# Titles ---------------------------------------------------------------------------------------------------

BROKEN_TITLES = ["two\r\nlines", "new\nline", "carriage\rreturn", "a\ttab", "escape\x1b[31m", "next\x85line",
                 "line\u2028separator"]


def title_calls(world: World, title: str) -> list[tuple[str, Any]]:
    """Every surface that sets a title, with `title`: (what, a call answering (status, body))."""
    desk, owner, child = world.desk, world.relay.owner, world.fill("<child>")
    return [
        ("create_session", lambda: desk.call("create_session", relay="this", text="hi", title=title, wait_seconds=0)),
        ("update_session", lambda: desk.call("update_session", relay="this", session=child, title=title)),
        ("schedule", lambda: desk.call("schedule", relay="this", session=child, text="later", title=title,
                                       at="2099-01-01T00:00:00Z")),
        ("owner new session", lambda: owner.request("POST", "/api/v1/owner/sessions", {"title": title})),
        ("owner change", lambda: owner.request("PATCH", f"/api/v1/owner/sessions/{child}", {"title": title})),
    ]


@pytest.mark.parametrize("title", BROKEN_TITLES, ids=repr)
def test_a_title_with_a_line_break_or_control_character_is_refused_everywhere(world: World, title: str) -> None:
    page = signed_in_page(world.relay)  # (a sign-in is recorded: before the snapshot)
    before = snapshot(world.relay)
    for what, call in title_calls(world, title):
        status, body = call()
        assert_refused(status, body, INVALID, says="title must be one line of text without line breaks"), what
    form = page.get(world.relay.url + "/", timeout=30).text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf
    answer = page.post(world.relay.url + "/sessions/new", data={"csrf_token": csrf[1], "title": title, "text": "hi"},
                       timeout=30)
    assert answer.status_code == 400 and "title must be one line" in answer.text, answer.text[:500]
    assert snapshot(world.relay) == before


def test_the_relays_name_is_one_line_too(world: World) -> None:
    """It goes into other relays' prompt headers (docs/relays.md#provenance)."""
    before = snapshot(world.relay)
    status, body = world.relay.owner.request("PATCH", "/api/v1/owner/settings", {"relay_name": "desk\r\n[owner]"})
    assert_refused(status, body, INVALID, says="relay_name must be a name of 1 to 100 characters on one line")
    assert snapshot(world.relay) == before


@pytest.mark.parametrize("name", BROKEN_TITLES, ids=repr)
def test_a_groups_name_and_a_pairing_tokens_label_are_one_line_too(world: World, name: str) -> None:
    """A group's name is shown inside lines (a card, the refusal listing the groups, relay_info), and an
    agent names a new group with update_session's `group`."""
    desk, owner, child = world.desk, world.relay.owner, world.fill("<child>")
    group = owner.post("/api/v1/owner/groups", {"name": "release"})["group"]["id"]
    before = snapshot(world.relay)
    calls = [
        ("update_session", desk.call("update_session", relay="this", session=child, group=name), "group"),
        ("create_session", desk.call("create_session", relay="this", text="hi", group=name, wait_seconds=0), "group"),
        ("owner new group", owner.request("POST", "/api/v1/owner/groups", {"name": name}), "name"),
        ("owner rename", owner.request("PATCH", f"/api/v1/owner/groups/{group}", {"name": name}), "name"),
        ("pairing token", owner.request("POST", "/api/v1/owner/pairing-tokens", {"label": name}), "label"),
    ]
    for what, (status, body), field in calls:
        assert_refused(status, body, INVALID, says=f"{field} must be one line of text without line breaks"), what
    assert snapshot(world.relay) == before


def test_a_title_taken_from_the_first_line_of_a_prompt_is_one_line(world: World) -> None:
    created = world.desk.ok("create_session", relay="this", text="\x1b[31mred\x07 alert\r\nsecond line", wait_seconds=0)
    assert created["title"] == "[31mred  alert" and not CONTROL.search(created["title"]), created
    started = world.relay.owner.post("/api/v1/owner/sessions", {"text": "\tindented\x0bfirst\nsecond"})
    assert started["session"]["title"] == "indented", started["session"]


def signed_in_page(relay: Relay) -> requests.Session:
    browser = requests.Session()
    token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get(relay.url + "/", timeout=30).text)
    assert token
    signed = browser.post(relay.url + "/", data={"csrf_token": token[1], "token": relay.owner.token}, timeout=30)
    assert signed.status_code == 200 and "Sign out" in signed.text, signed.text[:300]
    return browser


# Task descriptions ------------------------------------------------------------------------------------------

COMMAND = "echo deploy --password Sup3rS3cretPw with OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
SECRETS = ("Sup3rS3cretPw", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z")


def masked(description: str) -> bool:
    return "****" in description and not any(secret in description for secret in SECRETS)


def test_a_tasks_description_is_masked_wherever_it_is_shown(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True, tasks_without_sandbox=True)
    started = desk.post("/api/v1/tasks", {"command": COMMAND})["task"]
    assert masked(started["description"]), started
    task_id = started["taskId"]
    read = poll("the task's output", lambda: (lambda body: body if body["tail"] else None)(
        desk.ok("read_task_output", relay="this", session=desk.session_id, task_id=task_id)))
    assert masked(read["task"]["description"]) and masked(" ".join(read["tail"])), read
    shown = desk.ok("read_session", relay="this", session=desk.session_id)["tasks"]
    assert [masked(t["description"]) for t in shown if t["taskId"] == task_id] == [True], shown
    listed = desk.ok("list_sessions", relay="this", scope="all")["sessions"]
    tasks = [t for s in listed for t in s.get("tasks", []) if t["taskId"] == task_id]
    assert tasks and all(masked(t["description"]) for t in tasks), listed


def test_a_tasks_description_is_masked_in_its_event_lines() -> None:
    session = Session(id="3f9c0000aaaabbbb", title="deploys")
    for kind in ("task_started", "task_finished", "subagent_finished"):
        line = event_line(Event(kind=kind, payload={"taskId": "b7k2m9q4", "description": COMMAND}), session)
        assert "b7k2m9q4" in line and masked(line), line
    stalled = Event(kind="stalled", payload={"taskId": "b7k2m9q4", "description": COMMAND, "stalledMinutes": 10})
    assert masked(event_line(stalled, session))
