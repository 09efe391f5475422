"""update_session (docs/sessions.md#folders): settings, changed, notes, folders, permissions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import Agent, denied_by_owner, poll
from tests.support.conversations import decide, pending_card, relay_line, write
from tests.support.relays import Relay


@pytest.fixture
def mine(desk: Agent) -> str:
    """A session the desk conversation started (its first turn is done)."""
    return desk.ok("create_session", relay="this", text="hello")["session"]


def settings_of(relay: Relay, session_id: str) -> dict[str, Any]:
    return relay.owner.get(f"/api/v1/owner/sessions/{session_id}")["session"]["settings"]


def work_folder(relay: Relay, name: str) -> Path:
    folder = relay.config.data_dir / "work" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()


def test_it_changes_every_setting_the_provider_uses_in_one_call(relay: Relay, desk: Agent, mine: str) -> None:
    folder = work_folder(relay, "project")
    body = desk.ok(
        "update_session", relay="this", session=mine,
        model="echo-2", effort="high", mode="plan", title="Nightly build", group="Builds", cwd=str(folder),
    )
    assert sorted(body["changed"]) == ["cwd", "effort", "group", "mode", "model", "title"]
    group = body["groupCreated"]
    assert body["settings"] == {
        "provider": "echo",
        "model": "echo-2",
        "effort": "high",
        "mode": "plan",
        "title": "Nightly build",
        "cwd": str(folder),
        "group": {"id": group["id"], "name": "Builds", "role": "head"},
        "thinking_enabled": None,
        "thinking_display": None,
        "auto_compact_window": None,
    }
    assert body["relaunched"] is False
    assert "new folder" in body["note"]
    assert body["summary"] == f"update_session → desk session {mine[:8]}: changed {', '.join(body['changed'])}"
    assert settings_of(relay, mine) == body["settings"]


def test_a_call_that_changes_nothing_returns_an_empty_changed(relay: Relay, desk: Agent, mine: str) -> None:
    current = settings_of(relay, mine)
    body = desk.ok(
        "update_session", relay="this", session=mine,
        model=current["model"], mode=current["mode"], title=current["title"], cwd=current["cwd"] + "/",
    )
    assert body["changed"] == []
    assert body["settings"] == current
    assert "relaunched" not in body and "groupCreated" not in body
    assert body["summary"].endswith("nothing to change")


def test_echo_stores_thinking_and_window_but_says_it_ignores_them(relay: Relay, desk: Agent, mine: str) -> None:
    body = desk.ok(
        "update_session", relay="this", session=mine,
        thinking_enabled=False, thinking_display="full", auto_compact_window="AUTO",
    )
    assert body["changed"] == []
    assert body["settings"]["thinking_enabled"] is False
    assert body["settings"]["thinking_display"] == "full"
    assert body["settings"]["auto_compact_window"] == "auto"
    assert "thinking_enabled, thinking_display, auto_compact_window stored" in body["note"]
    assert "echo does not use them" in body["note"]
    # Stored: read back, and setting the same again is no change at all.
    assert settings_of(relay, mine)["thinking_display"] == "full"
    again = desk.ok("update_session", relay="this", session=mine, thinking_enabled=False, thinking_display="full")
    assert again["changed"] == [] and "note" not in again


def test_auto_compact_window_takes_a_token_count(relay: Relay, desk: Agent, mine: str) -> None:
    body = desk.ok("update_session", relay="this", session=mine, auto_compact_window=120_000, title="Renamed")
    assert body["changed"] == ["title"]
    assert body["settings"]["auto_compact_window"] == 120_000
    assert "auto_compact_window stored" in body["note"] and "echo does not use it" in body["note"]
    assert settings_of(relay, mine)["auto_compact_window"] == 120_000
    for bad in ("huge", 12, True, 1.5, [1000]):
        refused = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                               auto_compact_window=bad, title="Changed")
        assert refused["error"].endswith("Nothing was changed.")
    assert settings_of(relay, mine)["title"] == "Renamed"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"thinking_display": "verbose"}, "thinking_display must be one of"),
        ({"thinking_enabled": "yes"}, "thinking_enabled must be true or false"),
        ({"mode": "yolo"}, "mode must be one of"),
        ({"effort": "extreme"}, "Unknown effort 'extreme' for echo on relay \"desk\". Efforts: low, medium, high."),
    ],
)
def test_bad_values_are_refused_and_nothing_changes(
    relay: Relay, desk: Agent, mine: str, args: dict[str, Any], fragment: str
) -> None:
    before = settings_of(relay, mine)
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                        model="echo-2", **args)
    assert fragment in body["error"]
    assert body["error"].endswith("Nothing was changed.")
    assert settings_of(relay, mine) == before


def test_at_least_one_setting_and_no_other_argument(relay: Relay, desk: Agent, mine: str) -> None:
    unknown = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                           title="x", text="hello")
    assert unknown["error"] == (
        "update_session does not take: text. Its arguments: relay, session, model, effort, mode, title, group, cwd, "
        "thinking_enabled, thinking_display, auto_compact_window. Nothing was changed."
    )
    assert settings_of(relay, mine)["title"] == "hello"
    none_given = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                              model="", title=None)
    assert none_given["error"].startswith("update_session needs at least one setting: model, effort, mode, title")
    assert none_given["error"].endswith("Nothing was changed.")
    owner_only = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                              may_create_sessions=True)
    assert owner_only["error"].startswith("Whether a session may start sessions is the owner's setting alone.")
    assert "mayCreateSessions" not in desk.ok("read_session", relay="this", session=mine)["session"]


def test_mode_set_by_update_session_lasts(relay: Relay, desk: Agent, mine: str) -> None:
    assert desk.ok("update_session", relay="this", session=mine, mode="ask")["changed"] == ["mode"]
    # The owner writing in the session does not reset it.
    relay.owner.post(f"/api/v1/owner/sessions/{mine}/messages", {"text": "from the owner"})
    assert desk.ok("read_session", relay="this", session=mine)["session"]["settings"]["mode"] == "ask"
    # A caller in ask mode sending without mode keeps it (its send asks the owner's card).
    asker = relay.conversation("asker", mode="ask")
    write(relay, asker.session_id, relay_line({"action": "send", "relay": "this", "session": mine, "text": "hi"}))
    decide(relay, pending_card(relay)["id"], "allow")
    poll("the send from ask mode", lambda: "hi" in [m["text"] for m in relay.owner.get(f"/api/v1/owner/sessions/{mine}")["messages"]])
    assert settings_of(relay, mine)["mode"] == "ask"
    # A send from a caller in another mode passes that mode (docs/sessions.md#update_session).
    desk.ok("send", relay="this", session=mine, text="back to work")
    assert settings_of(relay, mine)["mode"] == "agent"


# Folders --------------------------------------------------------------------------------


def test_a_new_folder_is_saved_for_the_next_start(relay: Relay, desk: Agent, mine: str) -> None:
    folder = work_folder(relay, "next")
    body = desk.ok("update_session", relay="this", session=mine, cwd=str(folder))
    assert body["changed"] == ["cwd"]
    assert body["relaunched"] is False
    assert body["note"] == "The session has no running agent process; the new folder is used from its next turn."
    assert body["settings"]["cwd"] == str(folder)


def test_the_home_folder_is_not_allowed_by_default(relay: Relay, desk: Agent, mine: str) -> None:
    before = settings_of(relay, mine)
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                        cwd=str(Path.home()))
    assert body["error"] == f'The relay may not use folder "{Path.home()}". Nothing was changed.'
    assert settings_of(relay, mine) == before


@pytest.mark.parametrize("folder", ["~", "~/project", "~root", "~root/project"])
def test_a_tilde_folder_is_refused_not_expanded(relay: Relay, desk: Agent, mine: str, folder: str) -> None:
    before = settings_of(relay, mine)
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine, cwd=folder)
    assert body["error"] == (f'Folder "{folder}" starts with "~"; the relay does not expand it: give an absolute '
                             "path. Nothing was changed.")
    assert settings_of(relay, mine) == before


@pytest.mark.parametrize("folder", ["/etc", "relative/path", "WORK/../../.."])
def test_a_folder_outside_the_allowed_roots_is_refused(relay: Relay, desk: Agent, mine: str, folder: str) -> None:
    if folder.startswith("WORK"):
        folder = str(work_folder(relay, "x")) + "/../../.."
    before = settings_of(relay, mine)
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                        cwd=folder, title="Moved")
    assert body["error"] == f'The relay may not use folder "{folder}". Nothing was changed.'
    assert settings_of(relay, mine) == before


def test_a_symlink_out_of_the_allowed_roots_is_refused(relay: Relay, desk: Agent, mine: str) -> None:
    link = relay.config.data_dir / "work" / "escape"
    if not link.is_symlink():
        link.symlink_to("/etc")
    desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine, cwd=str(link))
    assert settings_of(relay, mine)["cwd"] != "/etc"


def test_allowed_roots_is_the_owners_setting(relay: Relay, desk: Agent, mine: str, tmp_path: Path) -> None:
    default_roots = relay.owner.get("/api/v1/owner/settings")["settings"]["allowed_roots"]
    assert default_roots == [str((relay.config.data_dir / "work").resolve())]
    try:
        relay.settings(allowed_roots=[str(tmp_path)])
        (tmp_path / "inside").mkdir()
        moved = desk.ok("update_session", relay="this", session=mine, cwd=str(tmp_path / "inside"))
        assert moved["settings"]["cwd"] == str((tmp_path / "inside").resolve())
        refused = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine,
                               cwd=str(relay.config.data_dir / "work"))
        assert refused["error"] == f'The relay may not use folder "{relay.config.data_dir / "work"}". Nothing was changed.'
    finally:
        relay.settings(allowed_roots=default_roots)


def test_a_missing_folder_is_refused(relay: Relay, desk: Agent, mine: str) -> None:
    missing = relay.config.data_dir / "work" / "does-not-exist"
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=mine, cwd=str(missing))
    assert body["error"].endswith("does not exist on this relay. Nothing was changed.")


def test_a_busy_session_cannot_move_to_another_folder(relay: Relay, desk: Agent) -> None:
    busy = desk.ok("create_session", relay="this", text="!sleep 30", wait_seconds=0)
    session = busy["session"]
    try:
        before = settings_of(relay, session)
        folder = work_folder(relay, "elsewhere")
        body = desk.refused("update_session", "REMOTE_RELAY_BUSY", relay="this", session=session,
                            cwd=str(folder), title="Moved")
        assert body["error"].startswith("The session cannot move to another folder now:")
        assert body["error"].endswith("Nothing was changed.")
        assert settings_of(relay, session) == before
        # Its own folder again is no move; other settings change while it works.
        same = desk.ok("update_session", relay="this", session=session, cwd=before["cwd"], title="Still here")
        assert same["changed"] == ["title"]
    finally:
        desk.ok("stop", relay="this", session=session)
    desk.ok("wait", relay="this", session=session, message_id=busy["message_id"], wait_seconds=30)
    moved = desk.ok("update_session", relay="this", session=session, cwd=str(folder))
    assert moved["changed"] == ["cwd"]


# Who may change what --------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"model": "echo-2"},
        {"title": "Hijacked"},
        {"mode": "plan"},
        {"effort": "low"},
        {"group": "Mine now"},
        {"thinking_enabled": True},
        {"auto_compact_window": 50_000},
    ],
)
def test_changing_a_session_the_caller_did_not_start_needs_the_owner(relay: Relay, change: dict[str, Any]) -> None:
    """Without the owner's remembered Allow the waiting call asks a card; the owner's Deny refuses it.
    (The card itself, Allow and Deny: tests/test_cards.py.)"""
    theirs = relay.conversation("theirs").session_id
    caller = relay.conversation("caller", approvals=())
    before = settings_of(relay, theirs)
    groups_before = relay.owner.get("/api/v1/owner/groups")["groups"]
    body = denied_by_owner(relay.owner, caller, "update_session", relay="this", session=theirs, **change)[1]
    assert body["error"].endswith("Nothing was changed.")
    assert settings_of(relay, theirs) == before
    assert relay.owner.get("/api/v1/owner/groups")["groups"] == groups_before


def test_a_session_another_agent_started_is_not_the_callers(relay: Relay) -> None:
    other = relay.conversation("other")
    caller = relay.conversation("caller", approvals=())
    theirs = other.ok("create_session", relay="this", text="theirs")["session"]
    assert denied_by_owner(relay.owner, caller, "update_session", relay="this", session=theirs, title="Mine")[1]["code"] == (
        "REMOTE_RELAY_PERMISSION"
    )
    # Its starter may.
    assert other.ok("update_session", relay="this", session=theirs, title="Ours")["changed"] == ["title"]


def test_a_no_op_on_a_session_the_caller_did_not_start_asks_no_one(relay: Relay, desk: Agent) -> None:
    theirs = relay.conversation("theirs").session_id
    body = desk.ok("update_session", relay="this", session=theirs, title="theirs", mode="agent")
    assert body["changed"] == []


def test_an_agent_cannot_update_its_own_conversation(relay: Relay, desk: Agent) -> None:
    body = desk.refused("update_session", "REMOTE_RELAY_OWN_SESSION", relay="this", session=desk.session_id,
                        title="Me")
    assert body["error"] == "update_session cannot target this agent's own conversation. Nothing was changed."


def test_an_unknown_session_is_not_found(relay: Relay, desk: Agent) -> None:
    body = desk.refused("update_session", "REMOTE_RELAY_NOT_FOUND", relay="this", session="0123456789abcdef",
                        title="x")
    assert body["error"] == 'Relay "desk" has no session "0123456789abcdef". Nothing was changed.'


def test_it_refuses_to_move_a_session_into_the_relays_own_folders(relay: Relay, desk: Agent) -> None:
    """The data directory, `work/` itself and another session's own folder are never a session's folder."""
    child = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    other = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)["session"]
    work = relay.config.data_dir / "work"
    for folder, says in ((relay.config.data_dir, "may not use folder"), (work, "holds every session's own folder"),
                         (work / other, "a session's own folder")):
        refused = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=child, cwd=str(folder))
        assert says in refused["error"] and refused["error"].endswith("Nothing was changed."), refused
    moved = desk.ok("update_session", relay="this", session=child, cwd=str(work / child))
    assert moved["settings"]["cwd"] == str((work / child).resolve())
