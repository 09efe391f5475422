"""Rules for agents on this relay (docs/rules.md#loop-protection): one level, 4 at work, rate limits, loop protection."""

from __future__ import annotations

import time
from typing import Any

import pytest

from oar.core.ratelimit import retry_after
from tests.support.clients import Agent, denied_by_owner
from tests.support.relays import Relay


def owner_sessions(relay: Relay) -> list[str]:
    return sorted(s["id"] for s in relay.owner.get("/api/v1/owner/sessions")["sessions"])


def message_count(relay: Relay, session_id: str) -> int:
    return len(relay.owner.get(f"/api/v1/owner/sessions/{session_id}")["messages"])


def listed(agent: Agent, session_id: str) -> dict[str, Any]:
    sessions = agent.ok("list_sessions", relay="this", scope="all", limit=100)["sessions"]
    return next(s for s in sessions if s["id"] == session_id)


# One level ------------------------------------------------------------------------------


def test_a_session_an_agent_created_cannot_create_sessions(relay: Relay, desk: Agent) -> None:
    child_id = desk.ok("create_session", relay="this", text="child")["session"]
    child = relay.agent_for(child_id)
    before = owner_sessions(relay)
    body = child.refused("create_session", "REMOTE_RELAY_NESTED_SESSION", relay="this", text="grandchild")
    assert body["error"] == "A session that an agent created cannot create sessions. Nothing was created."
    # It comes before the model check (check order: docs/calling.md#check-order).
    child.refused("create_session", "REMOTE_RELAY_NESTED_SESSION", relay="this", text="x", model="nope")
    assert owner_sessions(relay) == before
    assert "mayCreateSessions" not in listed(desk, child_id)
    # The owner's own conversations may always create sessions.
    assert "mayCreateSessions" not in listed(desk, desk.session_id)


def test_the_owner_lets_an_agent_created_session_start_sessions(relay: Relay, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", text="child")
    child_id = created["session"]
    switched = relay.owner.patch(
        f"/api/v1/owner/sessions/{child_id}", {"may_create_sessions": True, "approvals": ["create_sessions"]}
    )
    assert switched["session"]["mayCreateSessions"] is True
    assert listed(desk, child_id)["mayCreateSessions"] is True
    assert desk.ok("read_session", relay="this", session=child_id)["session"]["mayCreateSessions"] is True
    child = relay.agent_for(child_id)
    grandchild = child.ok("create_session", relay="this", text="grandchild")
    assert grandchild["status"] == "done"
    assert listed(desk, grandchild["session"])["viaAgent"] == "child"
    # It joined the child's group, which is desk's group.
    assert grandchild["group"]["id"] == created["group"]["id"]
    # The grandchild itself is again one level down.
    relay.agent_for(grandchild["session"]).refused(
        "create_session", "REMOTE_RELAY_NESTED_SESSION", relay="this", text="deeper"
    )
    # Switched off again, the child is refused again.
    relay.owner.patch(f"/api/v1/owner/sessions/{child_id}", {"may_create_sessions": False})
    child.refused("create_session", "REMOTE_RELAY_NESTED_SESSION", relay="this", text="again")
    assert "mayCreateSessions" not in listed(desk, child_id)


def test_no_agent_can_set_may_create_sessions(relay: Relay, desk: Agent) -> None:
    child_id = desk.ok("create_session", relay="this", text="child")["session"]
    body = desk.refused("update_session", "REMOTE_RELAY_INVALID_INPUT", relay="this", session=child_id,
                        may_create_sessions=True, title="x")
    assert body["error"] == "Whether a session may start sessions is the owner's setting alone. Nothing was changed."
    entry = listed(desk, child_id)
    assert "mayCreateSessions" not in entry and entry["title"] == "child"


# Not itself -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "args"),
    [
        ("send", {"text": "hi"}),
        ("wait", {"message_id": "m_x"}),
        ("stop", {}),
        ("archive", {}),
        ("update_session", {"title": "me"}),
    ],
)
def test_an_agent_cannot_act_on_its_own_conversation(relay: Relay, desk: Agent, action: str, args: dict[str, Any]) -> None:
    body = desk.refused(action, "REMOTE_RELAY_OWN_SESSION", relay="this", session=desk.session_id, **args)
    assert body["error"].startswith(f"{action} cannot target this agent's own conversation.")
    # A unique 8-character prefix names it too.
    desk.refused(action, "REMOTE_RELAY_OWN_SESSION", relay="this", session=desk.session_id[:8], **args)
    view = relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")
    assert view["messages"] == [] and view["session"]["archived"] is False and view["session"]["title"] == "desk"


# At most 4 at work ----------------------------------------------------------------------


def test_a_fifth_busy_session_is_refused(relay: Relay, desk: Agent) -> None:
    idle = desk.ok("create_session", relay="this", text="idle one")["session"]
    busy: list[str] = []
    others: list[str] = []
    try:
        for number in range(4):
            busy.append(desk.ok("create_session", relay="this", text=f"!sleep 30\nworker {number}", wait_seconds=0)["session"])
        before = owner_sessions(relay)
        body = desk.refused("create_session", "REMOTE_RELAY_SESSION_LIMIT", relay="this", text="fifth")
        assert body["error"] == "4 sessions you started are still working; wait for one to finish. Nothing was created."
        assert body["sessions"] == [{"id": s, "title": f"worker {n}"} for n, s in enumerate(busy)]
        assert owner_sessions(relay) == before
        # A send that would make the idle one a 5th busy one is refused too, and sends nothing.
        count = message_count(relay, idle)
        body = desk.refused("send", "REMOTE_RELAY_SESSION_LIMIT", relay="this", session=idle, text="more")
        assert body["error"] == "4 sessions you started are still working; wait for one to finish. Nothing was sent."
        assert message_count(relay, idle) == count
        # Prompts to an already-busy one just queue.
        queued = desk.ok("send", relay="this", session=busy[0], text="after that", wait_seconds=0)
        assert queued["status"] in ("queued", "running")
        # Sessions the caller did not start are not limited by its count.
        theirs = relay.conversation("theirs").session_id
        others.append(theirs)
        desk.ok("send", relay="this", session=theirs, text="hello", wait_seconds=0)
        # Another conversation has its own count.
        other = relay.conversation("other")
        others.append(other.ok("create_session", relay="this", text="its own", wait_seconds=0)["session"])
        # Archived sessions do not count: archiving one frees a place.
        desk.ok("archive", relay="this", session=busy[3])
        freed = desk.ok("send", relay="this", session=idle, text="now it fits", wait_seconds=0)
        assert freed["status"] in ("queued", "running", "done")
    finally:
        for session in busy + [idle] + others:
            relay.owner.post(f"/api/v1/owner/sessions/{session}/archive")


def test_a_turn_that_ends_frees_its_place(relay: Relay, desk: Agent) -> None:
    started: list[dict[str, Any]] = []
    try:
        for number in range(4):
            started.append(desk.ok("create_session", relay="this", text=f"!sleep 30\nworker {number}", wait_seconds=0))
        desk.refused("create_session", "REMOTE_RELAY_SESSION_LIMIT", relay="this", text="fifth")
        # Find one whose turn a worker is running (the others are queued behind it) and stop it.
        running = None
        deadline = time.monotonic() + 30
        while running is None and time.monotonic() < deadline:
            for entry in started:
                if desk.ok("read_session", relay="this", session=entry["session"])["inFlight"]:
                    running = entry
                    break
            else:
                time.sleep(0.1)
        assert running is not None, "no worker picked up a turn"
        assert desk.ok("stop", relay="this", session=running["session"])["stopRequested"] is True
        ended = desk.ok("wait", relay="this", session=running["session"], message_id=running["message_id"],
                        wait_seconds=30)
        assert ended["status"] == "stopped"
        fifth = desk.ok("create_session", relay="this", text="!sleep 30\nfits now", wait_seconds=0)
        started.append(fifth)
        desk.refused("create_session", "REMOTE_RELAY_SESSION_LIMIT", relay="this", text="sixth")
    finally:
        for entry in started:
            relay.owner.post(f"/api/v1/owner/sessions/{entry['session']}/archive")


# Rate limits ----------------------------------------------------------------------------


def test_calls_over_the_per_minute_limit_are_refused(relay: Relay, desk: Agent) -> None:
    relay.settings(rate_calls_per_minute=3)
    # list_relays answers before the rate check (check order: docs/calling.md#check-order): not counted.
    for _ in range(5):
        desk.ok("list_relays")
    for _ in range(3):
        desk.ok("relay_info", relay="this")
    body = desk.refused("relay_info", "REMOTE_RELAY_RATE_LIMITED", relay="this")
    assert 1 <= body["retryAfterSeconds"] <= 60
    assert f"Try again in {body['retryAfterSeconds']} s." in body["error"]
    # Per conversation: another one still has its calls.
    relay.conversation("other").ok("relay_info", relay="this")
    # 0 means no limit.
    relay.settings(rate_calls_per_minute=0)
    desk.ok("relay_info", relay="this")


def test_writes_over_the_per_minute_limit_are_refused_and_change_nothing(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="target")["session"]
    relay.settings(rate_writes_per_minute=2)
    desk.ok("update_session", relay="this", session=session, title="one")
    desk.ok("update_session", relay="this", session=session, title="two")
    body = desk.refused("update_session", "REMOTE_RELAY_RATE_LIMITED", relay="this", session=session, title="three")
    assert 1 <= body["retryAfterSeconds"] <= 60
    assert body["error"].endswith("Nothing was changed.")
    count = message_count(relay, session)
    sent = desk.refused("send", "REMOTE_RELAY_RATE_LIMITED", relay="this", session=session, text="hi")
    assert sent["error"].endswith("Nothing was sent.")
    assert message_count(relay, session) == count
    # Reads are not writes.
    assert desk.ok("read_session", relay="this", session=session)["session"]["title"] == "two"


def test_retry_after_is_none_while_under_the_limits() -> None:
    now = 1_000.0
    assert retry_after([], [], is_write=True, now=now, calls_per_window=60, writes_per_window=10, window=60) is None
    calls = [now - 50, now - 30]
    assert retry_after(calls, [], is_write=False, now=now, calls_per_window=3, writes_per_window=1, window=60) is None
    # 0 means no limit.
    many = [now - i for i in range(100)]
    assert retry_after(many, many, is_write=True, now=now, calls_per_window=0, writes_per_window=0, window=60) is None


def test_retry_after_waits_for_the_oldest_blocking_call_to_leave_the_window() -> None:
    now = 1_000.0
    calls = [now - 50, now - 30, now - 10]
    assert retry_after(calls, [], is_write=False, now=now, calls_per_window=3, writes_per_window=0, window=60) == 10
    # With a limit of 2 the call at now-30 is the one that keeps it full.
    assert retry_after(calls, [], is_write=False, now=now, calls_per_window=2, writes_per_window=0, window=60) == 30
    # Calls older than the window do not count.
    old = [now - 70, now - 61, now - 5]
    assert retry_after(old, [], is_write=False, now=now, calls_per_window=2, writes_per_window=0, window=60) is None
    # Fractions round up, and the answer is at least 1 s.
    assert retry_after([now - 59.9], [], is_write=False, now=now, calls_per_window=1, writes_per_window=0,
                       window=60) == 1
    assert retry_after([now - 20.5], [], is_write=False, now=now, calls_per_window=1, writes_per_window=0,
                       window=60) == 40


def test_retry_after_counts_writes_only_for_write_calls() -> None:
    now = 1_000.0
    writes = [now - 40, now - 20]
    calls = writes
    assert retry_after(calls, writes, is_write=False, now=now, calls_per_window=10, writes_per_window=2,
                       window=60) is None
    assert retry_after(calls, writes, is_write=True, now=now, calls_per_window=10, writes_per_window=2,
                       window=60) == 20
    # Both limits reached: the longer wait wins.
    assert retry_after(calls, writes, is_write=True, now=now, calls_per_window=1, writes_per_window=2,
                       window=60) == 40


# Loop protection ------------------------------------------------------------------------


def test_the_31st_agent_prompt_needs_the_user(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="prompt 1", wait_seconds=0)["session"]  # counted: 1
    for number in range(2, 30):
        desk.ok("send", relay="this", session=session, text=f"prompt {number}", wait_seconds=0)
        if number % 10 == 0:
            # Not counted: update_session.
            desk.ok("update_session", relay="this", session=session, title=f"after {number}")
    last = desk.ok("send", relay="this", session=session, text="prompt 30", wait_seconds=0)
    desk.ok("wait", relay="this", session=session, message_id=last["message_id"], wait_seconds=60)
    count = message_count(relay, session)
    before = owner_sessions(relay)
    # The 31st needs the owner's card ("keep going?"); over HTTP the waiting call shows it, and the owner denies it.
    card, body = denied_by_owner(relay.owner, desk, "send", relay="this", session=session, text="prompt 32")
    assert card["reason"] == "loop"
    assert body["error"] == f"The owner denied send (card {card['id']}). Nothing was sent."
    created = denied_by_owner(relay.owner, desk, "create_session", relay="this", text="new one")[1]
    assert created["error"].endswith("Nothing was created.")
    assert message_count(relay, session) == count
    assert owner_sessions(relay) == before
    # Still allowed: reads and update_session.
    desk.ok("update_session", relay="this", session=session, title="still allowed")
    desk.ok("read_session", relay="this", session=session)
    # A prompt another agent writes into the conversation is not the user: no reset.
    other = relay.conversation("other")
    assert other.ok("send", relay="this", session=desk.session_id, text="hello desk")["status"] == "done"
    assert denied_by_owner(relay.owner, desk, "send", relay="this", session=session, text="still no")[0]["reason"] == "loop"
    # The owner writing in the conversation resets the count.
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "go on"})
    again = desk.ok("send", relay="this", session=session, text="prompt 1 again")
    assert again["status"] == "done" and again["reply"]["text"] == "echo: prompt 1 again"


def test_the_owner_writing_in_the_target_does_not_reset_the_callers_count(relay: Relay, desk: Agent) -> None:
    session = desk.ok("create_session", relay="this", text="1", wait_seconds=0)["session"]
    for number in range(2, 31):
        desk.ok("send", relay="this", session=session, text=str(number), wait_seconds=0)
    relay.owner.post(f"/api/v1/owner/sessions/{session}/messages", {"text": "owner in the target"})
    assert denied_by_owner(relay.owner, desk, "send", relay="this", session=session, text="31")[0]["reason"] == "loop"
    # The count belongs to the conversation: another conversation still may prompt.
    relay.conversation("other").ok("send", relay="this", session=session, text="from other", wait_seconds=0)
