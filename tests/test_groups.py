"""Session groups (docs/sessions.md#groups, docs/owner-api.md): joining, leaving, heads, listings."""

from __future__ import annotations

import re
from typing import Any

from tests.support.clients import Agent, denied_by_owner
from tests.support.relays import Relay


def owner_group(relay: Relay, name: str) -> dict[str, Any]:
    return relay.owner.post("/api/v1/owner/groups", {"name": name})["group"]


def owner_groups(relay: Relay) -> list[dict[str, Any]]:
    return relay.owner.get("/api/v1/owner/groups")["groups"]


def move(relay: Relay, session_id: str, group_id: str) -> dict[str, Any]:
    return relay.owner.patch(f"/api/v1/owner/sessions/{session_id}", {"group_id": group_id})["session"]


def owner_session(relay: Relay, title: str) -> str:
    return relay.owner.post("/api/v1/owner/sessions", {"title": title})["session"]["id"]


def listed(agent: Agent, session_id: str) -> dict[str, Any]:
    sessions = agent.ok("list_sessions", relay="this", scope="all", limit=100)["sessions"]
    return next(s for s in sessions if s["id"] == session_id)


def group_of(agent: Agent, session_id: str) -> dict[str, Any] | None:
    return listed(agent, session_id).get("group")


def relay_groups(agent: Agent) -> dict[str, Any]:
    return agent.ok("relay_info", relay="this")


def session_ids(relay: Relay) -> list[str]:
    return sorted(s["id"] for s in relay.owner.get("/api/v1/owner/sessions")["sessions"])


# create_session -------------------------------------------------------------------------


def test_without_group_the_caller_becomes_head_of_a_new_group(relay: Relay, desk: Agent) -> None:
    first = desk.ok("create_session", relay="this", text="first", wait_seconds=0)
    group = first["group"]
    assert group == {"id": group["id"], "name": "desk", "role": "member"}
    assert re.fullmatch(r"grp_[A-Za-z0-9_-]+", group["id"])
    assert group_of(desk, desk.session_id) == {"id": group["id"], "name": "desk", "role": "head"}
    assert group_of(desk, first["session"]) == {"id": group["id"], "name": "desk", "role": "member"}
    second = desk.ok("create_session", relay="this", text="second", wait_seconds=0)
    assert second["group"] == {"id": group["id"], "name": "desk", "role": "member"}
    info = relay_groups(desk)
    assert info["groups"] == [{"id": group["id"], "name": "desk", "memberCount": 3}]
    assert "groupsTotal" not in info
    # An agent group: not the owner's.
    assert owner_groups(relay) == [
        {"id": group["id"], "name": "desk", "ownerCreated": False, "memberCount": 3, "empty": False, "position": 0}
    ]


def test_without_group_a_session_joins_the_callers_existing_group(relay: Relay, desk: Agent) -> None:
    release = owner_group(relay, "Release 2.4")
    move(relay, desk.session_id, release["id"])
    body = desk.ok("create_session", relay="this", text="build it", wait_seconds=0)
    assert body["group"] == {"id": release["id"], "name": "Release 2.4", "role": "member"}
    assert group_of(desk, desk.session_id) == {"id": release["id"], "name": "Release 2.4", "role": "head"}
    assert [g["id"] for g in owner_groups(relay)] == [release["id"]]  # no second group


def test_with_a_group_name_in_any_case_or_id_it_joins_that_group(relay: Relay, desk: Agent) -> None:
    release = owner_group(relay, "Release 2.4")
    by_name = desk.ok("create_session", relay="this", text="one", group="release 2.4", wait_seconds=0)
    # The first session to join an owner group without a head becomes its head.
    assert by_name["group"] == {"id": release["id"], "name": "Release 2.4", "role": "head"}
    by_id = desk.ok("create_session", relay="this", text="two", group=release["id"], wait_seconds=0)
    assert by_id["group"] == {"id": release["id"], "name": "Release 2.4", "role": "member"}
    # The caller itself joined nothing.
    assert group_of(desk, desk.session_id) is None
    info = relay_groups(desk)
    assert info["groups"] == [{"id": release["id"], "name": "Release 2.4", "memberCount": 2}]


def test_an_unknown_group_lists_the_groups_there_and_creates_nothing(relay: Relay, desk: Agent) -> None:
    release = owner_group(relay, "Release 2.4")
    member = owner_session(relay, "planning")
    move(relay, member, release["id"])
    helper = desk.ok("create_session", relay="this", text="helper", wait_seconds=0)  # desk's own group, newer
    desk_group = helper["group"]["id"]
    before = session_ids(relay)
    body = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", text="hi", group="Relase")
    assert body["error"] == (
        f'Relay "desk" has no session group "Relase". Groups there: desk ({desk_group}), '
        f"Release 2.4 ({release['id']}). No session was created."
    )
    assert body["groups"] == [
        {"id": desk_group, "name": "desk", "memberCount": 2},
        {"id": release["id"], "name": "Release 2.4", "memberCount": 1},
    ]
    assert body["groupsTotal"] == 2
    assert session_ids(relay) == before
    # An unknown id is refused the same way.
    body = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", text="hi", group="grp_nope")
    assert body["error"].startswith('Relay "desk" has no session group "grp_nope". Groups there: ')
    assert session_ids(relay) == before


def test_an_unknown_group_lists_at_most_20_groups_with_the_total(relay: Relay, desk: Agent) -> None:
    for number in range(23):
        group = owner_group(relay, f"Team {number:02}")
        move(relay, owner_session(relay, f"s{number}"), group["id"])
    body = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", text="hi", group="Team 99")
    assert len(body["groups"]) == 20
    assert body["groupsTotal"] == 23
    assert body["error"].count("(grp_") == 20
    assert body["error"].endswith(". No session was created.")


def test_a_name_matching_two_groups_asks_for_the_id(relay: Relay, desk: Agent) -> None:
    first = owner_group(relay, "Nightly")
    second = owner_group(relay, "nightly")
    before = session_ids(relay)
    body = desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", text="hi", group="NIGHTLY")
    assert "Pass the id." in body["error"]
    assert body["error"].endswith("No session was created.")
    assert first["id"] in body["error"] and second["id"] in body["error"]
    assert sorted(g["id"] for g in body["groups"]) == sorted([first["id"], second["id"]])
    assert body["groupsTotal"] == 2
    assert session_ids(relay) == before
    chosen = desk.ok("create_session", relay="this", text="hi", group=second["id"], wait_seconds=0)
    assert chosen["group"]["id"] == second["id"]


# update_session -------------------------------------------------------------------------


def test_update_session_group_none_leaves_the_group(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)
    session, group = created["session"], created["group"]["id"]
    left = desk.ok("update_session", relay="this", session=session, group="None")
    assert left["changed"] == ["group"]
    assert left["settings"]["group"] is None
    assert group_of(desk, session) is None
    # desk is still in its group, so the group stays.
    assert relay_groups(desk)["groups"] == [{"id": group, "name": "desk", "memberCount": 1}]
    again = desk.ok("update_session", relay="this", session=session, group="none")
    assert again["changed"] == []


def test_update_session_with_a_new_name_creates_an_agent_group(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)["session"]
    body = desk.ok("update_session", relay="this", session=session, group="Docs sweep")
    assert body["changed"] == ["group"]
    created = body["groupCreated"]
    assert created == {"id": created["id"], "name": "Docs sweep"} and created["id"].startswith("grp_")
    assert body["settings"]["group"] == {"id": created["id"], "name": "Docs sweep", "role": "head"}
    assert group_of(desk, session) == {"id": created["id"], "name": "Docs sweep", "role": "head"}
    entry = next(g for g in owner_groups(relay) if g["id"] == created["id"])
    assert entry["ownerCreated"] is False
    # The same name again (any case) joins it rather than creating another.
    other = desk.ok("create_session", relay="this", text="other", wait_seconds=0)["session"]
    joined = desk.ok("update_session", relay="this", session=other, group="docs SWEEP")
    assert "groupCreated" not in joined
    assert joined["settings"]["group"] == {"id": created["id"], "name": "Docs sweep", "role": "member"}


def test_update_session_refuses_an_unknown_group_id_and_changes_nothing(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)
    session = created["session"]
    body = desk.refused(
        "update_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", session=session, group="grp_missing0000",
        title="Renamed",
    )
    assert body["error"] == (
        f'Relay "desk" has no session group "grp_missing0000". Groups there: desk ({created["group"]["id"]}). '
        "Nothing was changed."
    )
    assert body["groupsTotal"] == 1
    entry = listed(desk, session)
    assert entry["title"] == "hi"
    assert entry["group"]["id"] == created["group"]["id"]
    assert [g["id"] for g in owner_groups(relay)] == [created["group"]["id"]]


def test_update_session_refuses_a_name_matching_two_groups(relay: Relay, desk: Agent) -> None:
    owner_group(relay, "Ops")
    owner_group(relay, "OPS")
    session = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)["session"]
    body = desk.refused("update_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", session=session, group="ops",
                        mode="plan")
    assert "Pass the id." in body["error"] and body["error"].endswith("Nothing was changed.")
    assert listed(desk, session)["group"]["name"] == "desk"
    assert desk.ok("read_session", relay="this", session=session)["session"]["settings"]["mode"] == "agent"


def test_agent_groups_vanish_when_their_last_session_leaves(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)["session"]
    group = desk.ok("update_session", relay="this", session=session, group="Solo")["groupCreated"]["id"]
    assert any(g["id"] == group for g in relay_groups(desk)["groups"])
    desk.ok("update_session", relay="this", session=session, group="none")
    assert all(g["id"] != group for g in relay_groups(desk)["groups"])
    assert all(g["id"] != group for g in owner_groups(relay))
    other = desk.ok("create_session", relay="this", text="other", wait_seconds=0)["session"]
    desk.refused("update_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", session=other, group=group)


def test_agent_groups_vanish_when_their_last_session_moves_or_is_deleted(relay: Relay, desk: Agent) -> None:
    first = desk.ok("create_session", relay="this", text="first", wait_seconds=0)["session"]
    second = desk.ok("create_session", relay="this", text="second", wait_seconds=0)["session"]
    solo = desk.ok("update_session", relay="this", session=first, group="Solo")["groupCreated"]["id"]
    pair = desk.ok("update_session", relay="this", session=second, group="Pair")["groupCreated"]["id"]
    # Moving the only member into another group empties and removes the old one.
    desk.ok("update_session", relay="this", session=first, group=pair)
    assert solo not in {g["id"] for g in owner_groups(relay)}
    # Deleting the members removes the group.
    relay.owner.request("DELETE", f"/api/v1/owner/sessions/{first}")
    assert pair in {g["id"] for g in owner_groups(relay)}
    relay.owner.request("DELETE", f"/api/v1/owner/sessions/{second}")
    assert pair not in {g["id"] for g in owner_groups(relay)}


def test_owner_groups_stay_when_emptied(relay: Relay, desk: Agent) -> None:
    release = owner_group(relay, "Release 2.4")
    session = desk.ok("create_session", relay="this", text="hi", group="Release 2.4", wait_seconds=0)["session"]
    left = desk.ok("update_session", relay="this", session=session, group="none")
    assert left["changed"] == ["group"]
    kept = next(g for g in owner_groups(relay) if g["id"] == release["id"])
    assert kept == {**kept, "ownerCreated": True, "memberCount": 0, "empty": True, "name": "Release 2.4"}
    # Empty groups are not listed by relay_info, but can still be joined.
    assert release["id"] not in {g["id"] for g in relay_groups(desk)["groups"]}
    back = desk.ok("update_session", relay="this", session=session, group=release["id"])
    assert back["settings"]["group"]["id"] == release["id"]


def test_the_head_hands_over_when_it_leaves(relay: Relay, desk: Agent) -> None:
    first = desk.ok("create_session", relay="this", text="Alpha", wait_seconds=0)["session"]
    second = desk.ok("create_session", relay="this", text="Beta", wait_seconds=0)["session"]
    group = group_of(desk, desk.session_id)
    assert group and group["role"] == "head"
    move(relay, desk.session_id, "none")
    assert group_of(desk, desk.session_id) is None
    # The oldest remaining member is the head now; an agent group is named after its head.
    assert group_of(desk, first) == {"id": group["id"], "name": "Alpha", "role": "head"}
    assert group_of(desk, second) == {"id": group["id"], "name": "Alpha", "role": "member"}
    assert relay_groups(desk)["groups"] == [{"id": group["id"], "name": "Alpha", "memberCount": 2}]
    # The new head leaving hands over again.
    desk.ok("update_session", relay="this", session=first, group="none")
    assert group_of(desk, second) == {"id": group["id"], "name": "Beta", "role": "head"}


def test_update_session_group_of_a_session_the_caller_did_not_start_needs_the_owner(relay: Relay) -> None:
    release = owner_group(relay, "Release 2.4")
    theirs = owner_session(relay, "theirs")
    caller = relay.conversation("caller", approvals=())  # no Allow yet: its waiting call asks, the owner denies
    body = denied_by_owner(relay.owner, caller, "update_session", relay="this", session=theirs, group=release["id"])[1]
    assert body["error"].endswith("Nothing was changed.")
    assert group_of(caller, theirs) is None
    assert next(g for g in owner_groups(relay) if g["id"] == release["id"])["memberCount"] == 0


# relay_info, list_sessions, read_session ------------------------------------------------


def test_relay_info_lists_groups_most_recently_active_first(relay: Relay, desk: Agent) -> None:
    made = []
    for name in ("One", "Two", "Three"):
        group = owner_group(relay, name)
        session = owner_session(relay, f"{name} session")
        move(relay, session, group["id"])
        made.append((group["id"], session))
    info = relay_groups(desk)
    assert [g["name"] for g in info["groups"]] == ["Three", "Two", "One"]
    for entry in info["groups"]:
        assert set(entry) == {"id", "name", "memberCount"}  # never members' ids or titles
    # Activity in the oldest one's session moves its group to the front.
    relay.owner.post(f"/api/v1/owner/sessions/{made[0][1]}/messages", {"text": "wake up"})
    assert [g["name"] for g in relay_groups(desk)["groups"]] == ["One", "Three", "Two"]


def test_relay_info_lists_at_most_50_groups_and_the_total(relay: Relay, desk: Agent) -> None:
    for number in range(52):
        group = owner_group(relay, f"G{number:02}")
        move(relay, owner_session(relay, f"member {number}"), group["id"])
    owner_group(relay, "Empty one")  # no session: not counted
    info = relay_groups(desk)
    assert len(info["groups"]) == 50
    assert info["groupsTotal"] == 52
    assert info["groups"][0]["name"] == "G51"


def test_relay_info_names_a_group_by_the_owners_name_or_the_heads_title(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="Worker", wait_seconds=0)
    group = created["group"]["id"]
    info = relay_groups(desk)
    assert info["groups"] == [{"id": group, "name": "desk", "memberCount": 2}]
    assert "Worker" not in str(info["groups"]) and created["session"] not in str(info["groups"])
    relay.owner.patch(f"/api/v1/owner/groups/{group}", {"name": "Release crew"})
    assert relay_groups(desk)["groups"] == [{"id": group, "name": "Release crew", "memberCount": 2}]
    assert group_of(desk, created["session"]) == {"id": group, "name": "Release crew", "role": "member"}


def test_list_sessions_and_read_session_show_the_group(relay: Relay, desk: Agent) -> None:
    first = desk.ok("create_session", relay="this", text="Alpha")["session"]
    second = desk.ok("create_session", relay="this", text="Beta")["session"]
    group = group_of(desk, first)
    assert group is not None and group["role"] == "member"
    read = desk.ok("read_session", relay="this", session=first)["group"]
    assert {k: read[k] for k in ("id", "name", "role")} == group
    assert read["members"] == [
        {"id": desk.session_id, "title": "desk", "role": "head", "state": "idle"},
        {"id": second, "title": "Beta", "role": "member", "state": "idle"},
    ]
    # Archived members stay, marked archived.
    desk.ok("archive", relay="this", session=second)
    read = desk.ok("read_session", relay="this", session=first)["group"]
    assert read["members"][1] == {"id": second, "title": "Beta", "role": "member", "state": "idle", "archived": True}
    assert relay_groups(desk)["groups"][0]["memberCount"] == 3
    assert listed(desk, second)["group"] == {"id": group["id"], "name": "desk", "role": "member"}
    # A session without a group has no group field in lists and null in read_session.
    solo = owner_session(relay, "solo")
    assert "group" not in listed(desk, solo)
    assert desk.ok("read_session", relay="this", session=solo)["group"] is None


def test_read_session_lists_at_most_50_other_members(relay: Relay, desk: Agent) -> None:
    crowd = owner_group(relay, "Crowd")
    members = [owner_session(relay, f"member {number:02}") for number in range(52)]
    for session in members:
        move(relay, session, crowd["id"])
    read = desk.ok("read_session", relay="this", session=members[-1])["group"]
    assert read["role"] == "member"
    assert len(read["members"]) == 50
    assert members[-1] not in {m["id"] for m in read["members"]}
    assert read["members"][0] == {"id": members[0], "title": "member 00", "role": "head", "state": "idle"}
    assert relay_groups(desk)["groups"] == [{"id": crowd["id"], "name": "Crowd", "memberCount": 52}]


def test_read_session_shows_a_busy_member_working(relay: Relay, desk: Agent) -> None:
    busy = desk.ok("create_session", relay="this", text="!sleep 30", wait_seconds=0)["session"]
    try:
        members = desk.ok("read_session", relay="this", session=desk.session_id)["group"]["members"]
        assert members == [{"id": busy, "title": "New session", "role": "member", "state": "running_turn"}]
    finally:
        desk.ok("archive", relay="this", session=busy)


# Owner API ------------------------------------------------------------------------------


def test_the_owner_dissolves_a_group_and_its_members_stay_ungrouped(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="hi", wait_seconds=0)
    group = created["group"]["id"]
    dissolved = relay.owner.request("DELETE", f"/api/v1/owner/groups/{group}")
    assert dissolved == (200, {"ok": True, "dissolved": True, "group": group})
    assert group_of(desk, created["session"]) is None and group_of(desk, desk.session_id) is None
    assert relay_groups(desk)["groups"] == []
    desk.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="this", text="hi", group=group)
    status, body = relay.owner.request("PATCH", f"/api/v1/owner/groups/{group}", {"name": "again"})
    assert status == 400 and body["code"] == "REMOTE_RELAY_UNKNOWN_GROUP"
    # A later create_session starts a new group with the caller as head.
    fresh = desk.ok("create_session", relay="this", text="again", wait_seconds=0)["group"]
    assert fresh["id"] != group and group_of(desk, desk.session_id)["role"] == "head"


def test_the_owner_moves_a_session_by_hand(relay: Relay, desk: Agent) -> None:
    release = owner_group(relay, "Release 2.4")
    session = owner_session(relay, "mine")
    moved = move(relay, session, release["id"])
    assert moved["group"] == {"id": release["id"], "name": "Release 2.4", "role": "head"}
    status, body = relay.owner.request("PATCH", f"/api/v1/owner/sessions/{session}", {"group_id": "grp_unknown"})
    assert status == 400 and body["code"] == "REMOTE_RELAY_UNKNOWN_GROUP"
    assert group_of(desk, session)["id"] == release["id"]
    assert move(relay, session, "none")["group"] is None
    assert next(g for g in owner_groups(relay) if g["id"] == release["id"])["empty"] is True
