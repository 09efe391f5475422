"""Paired relays (docs/relays.md), as their owners and agents use them: three real relays on
loopback ("desk", "build-box", "lab"; their own processes, data folders, databases and Redis
namespaces), started once for the module. desk is paired with build-box, build-box with lab, and
lab with build-box (for the hop limit)."""

from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import peewee
import pytest
import requests

from oar.core.errors import STATUS_BY_CODE
from oar.core.models import Question, Subscription
from oar.core.timeutil import utcnow
from oar.federation.models import PeerAsk
from oar.watching.models import RelayOutbox
from tests.support.clients import Agent, Owner, poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay, RelayStack, named_relays, relay_environment
from tests.support.servers import free_port, postgres_database
from tests.test_page import Browser

pytestmark = pytest.mark.stack

# The running relays' processes, for the test that stops one.
STACKS: dict[str, RelayStack] = {}


@pytest.fixture(scope="module")
def relays(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, Relay]]:
    names = ("desk", "build-box", "lab")
    with named_relays(tmp_path_factory.mktemp("paired"), names, redis_url) as stacks:
        # desk's clock checks the asks its agents keep on build-box and fetches their events there.
        # (tests/support/relays.py FAST_TIMES: every 0.3 s, a lost link told after 2 s)
        for stack in stacks.values():
            stack.start_clock()
        STACKS.update(stacks)
        running = {name: stack.relay for name, stack in stacks.items()}
        assert all(running.values())
        yield {name: relay for name, relay in running.items() if relay is not None}


def pairing_token(owner: Owner, label: str | None = None) -> str:
    body = owner.post("/api/v1/owner/pairing-tokens", {"label": label} if label else {})
    assert body["token"].startswith("oar_p_") and body["pairingToken"]["id"].startswith("pt_"), body
    return body["token"]


def pair(a: Relay, b: Relay, **fields: Any) -> dict[str, Any]:
    """a's owner pairs a with b, using a token b's owner created."""
    token = pairing_token(b.owner, f"for {a.name}")
    status, body = a.owner.request("POST", "/api/v1/owner/relays", {"url": b.url, "token": token, **fields})
    assert status == 201, body
    return body["relay"]


@pytest.fixture(scope="module")
def paired(relays: dict[str, Relay]) -> dict[str, Relay]:
    desk, build_box, lab = relays["desk"], relays["build-box"], relays["lab"]
    pair(desk, build_box)
    pair(build_box, lab)
    pair(lab, build_box)
    for relay in relays.values():
        relay.owner.settings(accept_agent_prompts=True)
    return relays


def owner_writes(relay: Relay, agent: Agent, text: str) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{agent.session_id}/messages", {"text": text})


def test_it_pairs_and_lists_the_paired_relay_without_its_token(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    listed = desk.owner.get("/api/v1/owner/relays")["relays"]
    assert [(r["name"], r["url"], r["permission"], r["tokenSet"]) for r in listed] == [
        ("build-box", build_box.url, "full", True)
    ]
    assert "token" not in listed[0] and listed[0]["id"].startswith("peer_")
    # The pairing token is stored hashed on build-box and never listed there either.
    tokens = build_box.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
    assert tokens and all("token" not in t and not t["revoked"] for t in tokens), tokens

    agent = desk.conversation("list")
    relays = agent.ok("list_relays")
    assert relays["relays"][0]["self"] is True
    peer = relays["relays"][1]
    assert {k: peer[k] for k in ("name", "url", "online", "permission", "unlocked")} == {
        "name": "build-box", "url": build_box.url, "online": True, "permission": "full", "unlocked": False,
    }
    assert peer["version"] and relays["summary"] == "list_relays: 2 relays, 1 unlocked"


def test_a_paired_relay_is_locked_until_the_owner_mentions_it_and_levels_limit_actions(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("locks")
    locked = agent.refused("list_sessions", "REMOTE_RELAY_LOCKED", relay="build-box")
    assert "@build-box" in locked["error"]
    # Event and automated lines never count; an owner's message naming the relay does.
    owner_writes(desk, agent, "Please look at @build-box for me")
    listed = agent.ok("list_relays")["relays"][1]
    assert listed["unlocked"] is True and listed["unlockedBy"] == "owner"
    sessions = agent.ok("list_sessions", relay="build-box")
    assert sessions["relay"] == "build-box" and isinstance(sessions["sessions"], list)
    # Named by its host (an IP address here): only with @.
    other = desk.conversation("by host")
    owner_writes(desk, other, "the box at 127.0.0.1 is slow")
    other.refused("relay_info", "REMOTE_RELAY_LOCKED", relay="build-box")
    owner_writes(desk, other, "then try build-box")  # its name written out
    assert other.ok("relay_info", relay="build-box")["name"] == "build-box"

    target = build_box.owner.post("/api/v1/owner/sessions", {"title": "levels"})["session"]["id"]
    try:
        desk.owner.patch("/api/v1/owner/relays/build-box", {"permission": "read"})
        refused = agent.refused("send", "REMOTE_RELAY_FORBIDDEN", relay="build-box", session=target, text="hi")
        assert 'Agents may "read" on relay "build-box"; send needs "prompt"' in refused["error"], refused
        assert agent.ok("read_session", relay="build-box", session=target)["session"]["id"] == target
        desk.owner.patch("/api/v1/owner/relays/build-box", {"permission": "off"})
        off = agent.refused("read_session", "REMOTE_RELAY_FORBIDDEN", relay="build-box", session=target)
        assert 'read_session needs "read"' in off["error"]
        assert agent.ok("list_relays")["relays"][1]["permission"] == "off"  # list_relays needs no level
        desk.owner.patch("/api/v1/owner/relays/build-box", {"permission": "prompt"})
        create = agent.refused("create_session", "REMOTE_RELAY_FORBIDDEN", relay="build-box", text="new")
        assert 'create_session needs "full"' in create["error"]
    finally:
        desk.owner.patch("/api/v1/owner/relays/build-box", {"permission": "full"})
    # Nothing reached build-box while refused.
    messages = build_box.owner.get(f"/api/v1/owner/sessions/{target}")["messages"]
    assert messages == []


def test_an_agent_prompts_and_starts_sessions_on_a_paired_relay_with_its_provenance(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("work")
    owner_writes(desk, agent, "@build-box: run the checks there")
    target = build_box.owner.post("/api/v1/owner/sessions", {"title": "checks"})["session"]["id"]

    sent = agent.ok("send", relay="build-box", session=target, text="hello from desk", wait_seconds=60)
    header = '[Remote prompt from an agent on relay "desk" · session "work" · echo-1 · acting for the user]'
    assert sent["relay"] == "build-box" and sent["status"] == "done", sent
    assert sent["reply"]["text"] == f"echo: {header}\nhello from desk", sent
    assert sent["summary"].startswith(f"send → build-box session {target[:8]}"), sent
    prompt = build_box.owner.get(f"/api/v1/owner/sessions/{target}")["messages"][0]
    assert prompt["text"].startswith(header)
    assert prompt["from"]["badge"] == "↗ from desk · work · echo-1" and prompt["from"]["hops"] == 1, prompt

    # A wait across the link: the peer's own wait, woken by the reply there.
    queued = agent.ok("send", relay="build-box", session=target, text="!sleep 1\nlater", wait_seconds=0)
    assert queued["status"] in ("queued", "running"), queued
    waited = agent.ok("wait", relay="build-box", session=target, message_id=queued["message_id"], wait_seconds=60)
    assert waited["status"] == "done" and waited["reply"]["text"].endswith("later"), waited

    # create_session there: build-box asks its own owner first (its Inbox), as for its own agents.
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(body=agent.call(
        "create_session", relay="build-box", text="start the nightly", title="nightly", wait_seconds=60)))
    call.start()
    card = poll("the card on build-box", lambda: next(iter(build_box.owner.get("/api/v1/owner/inbox")["cards"]), None))
    assert card["action"] == "create_session" and "build-box" in card["text"], card
    build_box.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    call.join(60)
    status, created = answer["body"]
    assert status == 200 and created["ok"] and created["status"] == "done", created
    assert created["relay"] == "build-box" and created["group"] is None, created
    session = build_box.owner.get(f"/api/v1/owner/sessions/{created['session']}")["session"]
    assert session["title"] == "nightly"
    listed = {s["id"]: s for s in agent.ok("list_sessions", relay="build-box")["sessions"]}
    assert listed[created["session"]]["viaAgent"] == "work", listed[created["session"]]
    # A group there, by name (build-box's own groups).
    group = build_box.owner.post("/api/v1/owner/groups", {"name": "Release 2.4"})["group"]
    joined = agent.ok("create_session", relay="build-box", text="join it", group="release 2.4", wait_seconds=0)
    assert joined["group"]["id"] == group["id"] and joined["group"]["name"] == "Release 2.4", joined
    unknown = agent.refused("create_session", "REMOTE_RELAY_UNKNOWN_GROUP", relay="build-box", text="x", group="Relase")
    assert "Release 2.4" in unknown["error"] and unknown["groups"], unknown
    assert agent.ok("relay_info", relay="build-box")["groups"][0]["id"] == group["id"]
    agent.ok("wait", relay="build-box", session=joined["session"], message_id=joined["message_id"], wait_seconds=30)
    # Four at work, counted there for this calling conversation; stop works across too.
    busy = [agent.ok("create_session", relay="build-box", text="!sleep 30\nbusy", wait_seconds=0)["session"]
            for _ in range(4)]
    limited = agent.call("create_session", relay="build-box", text="a fifth", wait_seconds=0)
    assert limited[0] == 409 and limited[1]["code"] == "REMOTE_RELAY_SESSION_LIMIT", limited
    assert sorted(s["id"] for s in limited[1]["sessions"]) == sorted(busy), limited
    for session_id in busy:  # (a turn still queued has nothing to stop yet: asked again once it runs)
        poll("the stop", lambda sid=session_id: agent.ok("stop", relay="build-box", session=sid)["stopRequested"])
    # Its update_session: the session it started there, no card.
    changed = agent.ok("update_session", relay="build-box", session=created["session"], title="nightly 2")
    assert changed["changed"] == ["title"], changed
    # The calling conversation's stand-in on build-box is no session anyone lists or names.
    names = [s["title"] for s in build_box.owner.get("/api/v1/owner/sessions")["sessions"]]
    assert "work" not in names, names

    # Schedules stay on this relay; subscriptions do not move to a conversation on another relay.
    sched = agent.refused("schedule", "REMOTE_RELAY_UNSUPPORTED", relay="build-box", text="x", every_minutes=5)
    assert "Schedules exist only on the relay the agent runs on" in sched["error"]
    moved = agent.refused("transfer_subscriptions", "REMOTE_RELAY_UNSUPPORTED", relay="build-box", **{"from": target})
    assert "moving subscriptions to a conversation on another relay" in moved["error"]
    tokens = build_box.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
    assert any(t["lastUsedBy"] == "desk" and t["lastUsedAt"] for t in tokens), tokens


def test_an_agent_outside_the_relay_takes_and_answers_a_prompt_from_a_paired_relay(paired: dict[str, Relay]) -> None:
    """Two agents outside their relays, on paired relays: one sends, the other takes and replies."""
    desk, build_box = paired["desk"], paired["build-box"]
    sender = desk.conversation("claude on desk", agent_outside=True)
    owner_writes(desk, sender, "@build-box: ask the helper there")
    created = build_box.owner.post("/api/v1/owner/sessions", {"title": "claude on build-box", "agent_outside": True})
    helper = Agent(build_box.url, created["token"], created["session"]["id"])
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(body=sender.ok(
        "send", relay="build-box", session=helper.session_id, text="what is 6 x 7?", wait_seconds=60)))
    call.start()
    [item] = helper.ok("take", wait_seconds=30)["items"]
    assert item["kind"] == "prompt" and item["text"].endswith("what is 6 x 7?") and item["from"]["relay"] == "desk", item
    helper.ok("reply", message_id=item["message_id"], text="42")
    call.join(60)
    assert answer["body"]["relay"] == "build-box" and answer["body"]["status"] == "done", answer
    assert answer["body"]["reply"]["text"] == "42"


def test_the_receiving_relay_may_refuse_other_relays_agents_prompts_but_not_their_reads(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("inbound")
    owner_writes(desk, agent, "@build-box")
    target = build_box.owner.post("/api/v1/owner/sessions", {"title": "inbound"})["session"]["id"]
    build_box.owner.settings(accept_agent_prompts=False)
    try:
        refused = agent.refused("send", "REMOTE_INBOUND_DISABLED", relay="build-box", session=target, text="hi")
        assert "does not accept prompts from other relays' agents" in refused["error"]
        agent.refused("create_session", "REMOTE_INBOUND_DISABLED", relay="build-box", text="hi")
        assert agent.ok("read_session", relay="build-box", session=target)["messages"] == []
        assert agent.ok("relay_info", relay="build-box")["acceptsAgentPrompts"] is False
    finally:
        build_box.owner.settings(accept_agent_prompts=True)
    assert build_box.owner.get(f"/api/v1/owner/sessions/{target}")["messages"] == []


def relay_line(payload: dict[str, Any]) -> str:
    return "!relay " + json.dumps(payload)


def test_a_prompt_crosses_two_relays_but_not_a_third_unless_the_owner_mentions_it(paired: dict[str, Relay]) -> None:
    desk, build_box, lab = paired["desk"], paired["build-box"], paired["lab"]
    agent = desk.conversation("hops")
    owner_writes(desk, agent, "@build-box")
    on_box = build_box.owner.conversation("hop 1")
    owner_writes(build_box, on_box, "you may use @lab")  # its own turn; build-box's owner unlocks lab there
    on_lab = lab.owner.post("/api/v1/owner/sessions", {"title": "hop 2"})["session"]["id"]
    back_on_box = build_box.owner.post("/api/v1/owner/sessions", {"title": "hop 3"})["session"]["id"]

    third = {"action": "send", "relay": "build-box", "session": back_on_box, "text": "third crossing", "wait_seconds": 30}
    second = {"action": "send", "relay": "lab", "session": on_lab, "text": relay_line(third), "wait_seconds": 60}
    sent = agent.ok("send", relay="build-box", session=on_box.session_id, text=relay_line(second), wait_seconds=90)
    assert sent["status"] == "done", sent
    lab_turn = lab.owner.get(f"/api/v1/owner/sessions/{on_lab}")["messages"]
    assert lab_turn[0]["from"]["hops"] == 2 and lab_turn[0]["from"]["relay"] == "build-box", lab_turn[0]
    result = json.loads(lab_turn[1]["text"].split("relay: ", 1)[1])
    assert result["code"] == "REMOTE_RELAY_HOP_LIMIT", result
    assert 'already crossed 2 relays and is not passed on to relay "build-box"' in result["error"]
    assert build_box.owner.get(f"/api/v1/owner/sessions/{back_on_box}")["messages"] == []
    # The prompt from build-box's agent unlocked build-box in that conversation on lab (by an agent).
    on_lab_agent = lab.agent_for(on_lab)
    seen = next(r for r in on_lab_agent.ok("list_relays")["relays"] if r["name"] == "build-box")
    assert seen["unlocked"] is True and seen["unlockedBy"] == "agent", seen
    # Reads are never hop-limited.
    reads = {"action": "read_session", "relay": "build-box", "session": back_on_box}
    second_read = {**second, "text": relay_line(reads)}
    agent.ok("send", relay="build-box", session=on_box.session_id, text=relay_line(second_read), wait_seconds=90)
    read = json.loads(lab.owner.get(f"/api/v1/owner/sessions/{on_lab}")["messages"][-1]["text"].split("relay: ", 1)[1])
    assert read["ok"] is True and read["session"]["id"] == back_on_box, read

    # lab's owner mentions build-box in that conversation: now the third crossing goes through.
    owner_writes(lab, on_lab_agent, "@build-box is fine")
    agent.ok("send", relay="build-box", session=on_box.session_id, text=relay_line(second), wait_seconds=90)
    passed = json.loads(lab.owner.get(f"/api/v1/owner/sessions/{on_lab}")["messages"][-1]["text"].split("relay: ", 1)[1])
    assert passed["ok"] is True and passed["status"] == "done", passed
    arrived = build_box.owner.get(f"/api/v1/owner/sessions/{back_on_box}")["messages"][0]
    assert arrived["from"]["hops"] == 3 and arrived["from"]["relay"] == "lab", arrived


def test_bad_pairings_are_refused_clearly_and_change_nothing(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    before = desk.owner.get("/api/v1/owner/relays")["relays"]
    good = pairing_token(build_box.owner)
    dead = f"http://127.0.0.1:{free_port()}"
    cases: list[tuple[Any, int, str, str]] = [
        ({}, 400, "REMOTE_RELAY_INVALID_INPUT", "url"),
        ({"url": build_box.url}, 400, "REMOTE_RELAY_INVALID_INPUT", "token"),
        ({"url": "ftp://127.0.0.1", "token": good}, 400, "REMOTE_RELAY_INVALID_INPUT", "must start with https://"),
        ({"url": "http://example.com", "token": good}, 400, "REMOTE_RELAY_INVALID_INPUT", "Plain http://"),
        ({"url": "https://u:p@127.0.0.1", "token": good}, 400, "REMOTE_RELAY_INVALID_INPUT", "user name or password"),
        ({"url": build_box.url, "token": good, "level": "full"}, 400, "REMOTE_RELAY_INVALID_INPUT", "does not take: level"),
        ({"url": build_box.url, "token": good}, 400, "REMOTE_RELAY_INVALID_INPUT", "already paired"),
        ({"url": build_box.url + "/", "token": "oar_p_wrong"}, 400, "REMOTE_RELAY_INVALID_INPUT", "already paired"),
        ({"url": dead, "token": good}, 502, "REMOTE_RELAY_OFFLINE", "is not answering"),
        ({"url": paired["lab"].url, "token": "oar_p_wrong"}, 502, "REMOTE_RELAY_UNAUTHORIZED", "rejected"),
        ({"url": paired["lab"].url, "token": pairing_token(paired["lab"].owner), "name": "desk"}, 400,
         "REMOTE_RELAY_INVALID_INPUT", "names this relay"),
        ({"url": paired["lab"].url, "token": pairing_token(paired["lab"].owner), "name": "build-box"}, 400,
         "REMOTE_RELAY_INVALID_INPUT", "already named"),
        ({"url": paired["lab"].url, "token": pairing_token(paired["lab"].owner), "name": "has space"}, 400,
         "REMOTE_RELAY_INVALID_INPUT", "without spaces"),
        (["not", "an", "object"], 400, "REMOTE_RELAY_INVALID_INPUT", "JSON object"),
    ]
    for payload, status, code, says in cases:
        got, body = desk.owner.request("POST", "/api/v1/owner/relays", payload)
        assert (got, body["code"]) == (status, code) and says in body["error"], (payload, body)
        assert good not in json.dumps(body)
    for method, path, payload, status in [
        ("PATCH", "/api/v1/owner/relays/nope", {"permission": "read"}, 404),
        ("PATCH", "/api/v1/owner/relays/build-box", {"permission": "everything"}, 400),
        ("PATCH", "/api/v1/owner/relays/build-box", {"url": "https://elsewhere"}, 400),
        ("DELETE", "/api/v1/owner/relays/nope", None, 404),
        ("DELETE", "/api/v1/owner/pairing-tokens/pt_nope", None, 404),
        ("POST", "/api/v1/owner/pairing-tokens", {"label": 5}, 400),
        ("POST", "/api/v1/owner/pairing-tokens", {"expires": "never"}, 400),
    ]:
        got, body = desk.owner.request(method, path, payload)
        assert got == status and body["ok"] is False and body["code"] in STATUS_BY_CODE, (path, body)
    assert desk.owner.get("/api/v1/owner/relays")["relays"] == before
    # Without the owner token: refused.
    assert requests.get(f"{desk.url}/api/v1/owner/relays", timeout=10).status_code == 401


def test_the_peer_api_takes_only_live_pairing_tokens_and_provenance(paired: dict[str, Relay]) -> None:
    build_box = paired["build-box"]
    token = pairing_token(build_box.owner, "probe")
    call = f"{build_box.url}/api/peer/v1/call"
    provenance = {"X-OAR-Origin-Relay": "desk", "X-OAR-Origin-Session": "0123456789abcdef",
                  "X-OAR-Origin-Title": "probe", "X-OAR-Hops": "1"}
    relay_info = {"action": "relay_info", "relay": "this"}
    for headers, status, says in [
        ({}, 401, "Send a pairing token"),
        ({"Authorization": "Bearer oar_p_nope"}, 401, "not valid on this relay"),
        ({"Authorization": f"Bearer {build_box.owner.token}"}, 401, "not valid on this relay"),
        ({"Authorization": f"Bearer {token}"}, 400, "carries its provenance"),
        ({"Authorization": f"Bearer {token}", **provenance, "X-OAR-Hops": "two"}, 400, "carries its provenance"),
    ]:
        answer = requests.post(call, json=relay_info, headers=headers, timeout=10)
        assert answer.status_code == status and says in answer.json()["error"], answer.text
    good = {"Authorization": f"Bearer {token}", **provenance}
    garbage = requests.post(call, data=b"\xff{not json", headers=good, timeout=10)
    assert garbage.status_code == 400 and garbage.json()["code"] == "REMOTE_RELAY_INVALID_INPUT"
    unknown = requests.post(call, json={"action": "launch"}, headers=good, timeout=10)
    assert unknown.status_code == 400 and unknown.json()["code"] == "REMOTE_RELAY_UNKNOWN_ACTION"
    # A peer names no relays of its own to other relays' agents, nor lists them in the refusal:
    # the same relays list_relays shows them, this one alone.
    onward = requests.post(call, json={"action": "list_sessions", "relay": "lab"}, headers=good, timeout=10)
    assert onward.status_code == 404 and onward.json()["code"] == "REMOTE_RELAY_UNKNOWN", onward.text
    assert onward.json()["relays"] == [{"name": "build-box", "self": True}], onward.text
    assert onward.json()["error"] == (
        'No relay is named "lab". Relays: "build-box" (this relay).'), onward.text
    listed = requests.post(call, json={"action": "list_relays"}, headers=good, timeout=10).json()
    assert [r["name"] for r in listed["relays"]] == ["build-box"], listed
    assert requests.post(call, json=relay_info, headers=good, timeout=10).json()["name"] == "build-box"
    listed = build_box.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
    probe = next(t for t in listed if t["label"] == "probe")
    build_box.owner.request("DELETE", f"/api/v1/owner/pairing-tokens/{probe['id']}")
    revoked = requests.post(call, json=relay_info, headers=good, timeout=10)
    assert revoked.status_code == 401 and revoked.json()["code"] == "REMOTE_RELAY_UNAUTHORIZED"


def test_a_pairing_token_holder_cannot_unlock_another_relay_or_reset_the_hops(paired: dict[str, Relay]) -> None:
    """Provenance comes from the pairing (docs/relays.md#provenance): a holder of one of build-box's
    pairing tokens who says it is lab unlocks nothing in the conversation its prompt reaches, and its
    prompt has crossed at least one relay. lab itself, calling with its own pairing, does unlock lab."""
    build_box, lab = paired["build-box"], paired["lab"]
    holder = pairing_token(build_box.owner, "for a third relay")
    target = build_box.owner.post("/api/v1/owner/sessions", {"title": "forged"})["session"]["id"]
    forged = {"Authorization": f"Bearer {holder}", "X-OAR-Origin-Relay": "lab", "X-OAR-Origin-Session": "feedfacefeedface",
              "X-OAR-Origin-Title": "pretend", "X-OAR-Hops": "0"}
    send = {"action": "send", "relay": "this", "session": target, "text": "hello", "wait_seconds": 30}
    sent = requests.post(f"{build_box.url}/api/peer/v1/call", json=send, headers=forged, timeout=60)
    assert sent.status_code == 200 and sent.json()["status"] == "done", sent.text[:300]
    on_box = build_box.agent_for(target)
    seen = next(r for r in on_box.ok("list_relays")["relays"] if r["name"] == "lab")
    assert seen["unlocked"] is False and seen.get("unlockedBy") is None, seen
    on_box.refused("relay_info", "REMOTE_RELAY_LOCKED", relay="lab")
    prompt = build_box.owner.get(f"/api/v1/owner/sessions/{target}")["messages"][0]
    assert prompt["from"]["relay"] == "lab" and prompt["from"]["hops"] == 1, prompt  # what it said, as text

    # lab does not hold that token (it says so to build-box, which asks with its own pairing for lab).
    hashed = hashlib.sha256(holder.encode()).hexdigest()
    lab_token = pairing_token(lab.owner, "probe from the test")
    asked = requests.get(f"{lab.url}/api/peer/v1/holds", params={"sha256": hashed},
                         headers={"Authorization": f"Bearer {lab_token}"}, timeout=10)
    assert asked.status_code == 200 and asked.json() == {"ok": True, "holds": False}, asked.text
    for bad in ("", "x" * 64, hashed.upper(), hashed + "0"):
        refused = requests.get(f"{lab.url}/api/peer/v1/holds", params={"sha256": bad},
                               headers={"Authorization": f"Bearer {lab_token}"}, timeout=10)
        assert refused.status_code == 400 and refused.json()["code"] == "REMOTE_RELAY_INVALID_INPUT", refused.text

    # An agent on lab prompts the same session: lab is unlocked there, by an agent.
    agent = lab.conversation("from lab")
    owner_writes(lab, agent, "@build-box")
    assert agent.ok("send", relay="build-box", session=target, text="hello from lab", wait_seconds=60)["status"] == "done"
    seen = next(r for r in on_box.ok("list_relays")["relays"] if r["name"] == "lab")
    assert seen["unlocked"] is True and seen["unlockedBy"] == "agent", seen


def test_a_pairing_token_holder_schedules_nothing_on_the_relay_that_gave_it(paired: dict[str, Relay]) -> None:
    """Schedules exist only on the relay the agent runs on (docs/relays.md#schedules). The calling relay
    refuses them, and so does the receiving one when a holder of its pairing token calls its API
    directly: else the holder would schedule prompts into its owner's conversations, prompts from
    other relays' agents turned off or not."""
    build_box = paired["build-box"]
    holder = pairing_token(build_box.owner, "a holder calling directly")
    target = build_box.owner.post("/api/v1/owner/sessions", {"title": "scheduled into"})["session"]["id"]
    headers = {"Authorization": f"Bearer {holder}", "X-OAR-Origin-Relay": "desk", "X-OAR-Origin-Session": "5c4ed01e5c4ed01e",
               "X-OAR-Origin-Title": "scheduler", "X-OAR-Hops": "1"}
    calls = [
        {"action": "schedule", "relay": "this", "session": target, "text": "every minute", "every_minutes": 1},
        {"action": "schedule", "text": "into its own stand-in", "every_minutes": 1},
        {"action": " list_schedules "},
        {"action": "unschedule", "schedule_id": "sch_000000000000"},
    ]
    before = build_box.owner.get("/api/v1/owner/schedules")
    for accepting in (False, True):
        build_box.owner.settings(accept_agent_prompts=accepting)
        for body in calls:
            answer = requests.post(f"{build_box.url}/api/peer/v1/call", json=body, headers=headers, timeout=60)
            assert answer.status_code == 400 and answer.json()["code"] == "REMOTE_RELAY_UNSUPPORTED", answer.text[:300]
            action = body["action"].strip()
            assert answer.json()["error"] == (
                'Schedules exist only on the relay the agent runs on: relay "build-box" takes no '
                f"{action} from another relay's agent. Nothing was done."
            )
    assert build_box.owner.get("/api/v1/owner/schedules") == before
    assert build_box.owner.get(f"/api/v1/owner/sessions/{target}")["messages"] == []
    used = next(t for t in build_box.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
                if t["label"] == "a holder calling directly")
    assert used["lastUsedAt"] is None, used  # refused before the call counts as the pairing's use


def test_a_revoked_token_is_refused_until_the_owner_gives_a_new_one(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("revoked")
    owner_writes(desk, agent, "@build-box")
    assert agent.ok("relay_info", relay="build-box")["name"] == "build-box"
    tokens = build_box.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
    desks = [t for t in tokens if t["label"] == "for desk" and not t["revoked"]]
    assert len(desks) == 1, tokens
    build_box.owner.request("DELETE", f"/api/v1/owner/pairing-tokens/{desks[0]['id']}")
    try:
        status, refused = agent.call("relay_info", relay="build-box")
        assert status == 502 and refused["code"] == "REMOTE_RELAY_UNAUTHORIZED", refused
        assert "rejected this relay's pairing token" in refused["error"]
        shown = agent.ok("list_relays")["relays"][1]
        assert shown["online"] is False
        assert desk.owner.get("/api/v1/owner/relays")["relays"][0]["lastError"] == "REMOTE_RELAY_UNAUTHORIZED"
    finally:
        desk.owner.patch("/api/v1/owner/relays/build-box", {"token": pairing_token(build_box.owner, "for desk")})
    assert agent.ok("relay_info", relay="build-box")["name"] == "build-box"
    assert desk.owner.get("/api/v1/owner/relays")["relays"][0]["online"] is True


class FakePeer(BaseHTTPRequestHandler):
    """A 'relay' on loopback that says hello properly, then answers calls as `mode` says."""

    mode = "html"
    redirected_hits = 0
    calls = 0

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/api/peer/v1/hello":
            # An older relay: it lists its features, and session groups are not among them.
            self._send(200, json.dumps({"ok": True, "name": "odd-box", "version": "0.0.1", "api": 1,
                                        "features": ["actions"]}).encode())
        else:
            FakePeer.redirected_hits += 1
            self._send(200, b'{"ok": true}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        FakePeer.calls += 1
        mode = FakePeer.mode
        if mode == "relay_info":
            self._send(200, json.dumps({"ok": True, "summary": "relay_info → odd-box", "name": "odd-box",
                                        "version": "0.0.1", "providers": []}).encode())
        elif mode == "html":
            self._send(200, b"<html>surprise</html>", "text/html")
        elif mode == "list":
            self._send(200, b"[1, 2, 3]")
        elif mode == "500":
            self._send(500, b"Internal Server Error", "text/plain")
        elif mode == "404":
            self._send(404, b'{"detail": "no"}')
        elif mode == "401":
            self._send(401, b"")
        elif mode == "redirect":
            self._send(307, b"", Location=f"http://127.0.0.1:{self.server.server_address[1]}/elsewhere")
        elif mode == "unknown code":
            self._send(400, b'{"ok": false, "code": "SOMETHING_ELSE", "error": "x"}')
        elif mode == "code with other digits":
            self._send(400, '{"ok": false, "code": "REMOTE_RELAY_HTTP_²²²", "error": "x"}'.encode())


def test_a_peer_answering_garbage_or_not_at_all_gets_clear_errors_never_a_500(paired: dict[str, Relay]) -> None:
    desk = paired["desk"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePeer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert pair_with_url(desk, url, "oar_p_fake")["name"] == "odd-box"
        agent = desk.conversation("garbage")
        owner_writes(desk, agent, "@odd-box")
        for mode, status, code in [
            ("html", 502, "REMOTE_RELAY_OFFLINE"), ("list", 502, "REMOTE_RELAY_OFFLINE"),
            ("500", 502, "REMOTE_RELAY_HTTP_500"), ("404", 404, "REMOTE_RELAY_HTTP_404"),
            ("401", 502, "REMOTE_RELAY_UNAUTHORIZED"), ("redirect", 502, "REMOTE_RELAY_HTTP_307"),
            ("unknown code", 400, "REMOTE_RELAY_HTTP_400"), ("code with other digits", 400, "REMOTE_RELAY_HTTP_400"),
        ]:
            FakePeer.mode = mode
            got, body = agent.call("relay_info", relay="odd-box")
            assert (got, body["ok"], body["code"]) == (status, False, code), (mode, body)
            assert "odd-box" in body["error"], body
        assert FakePeer.redirected_hits == 0  # the redirect was not followed
        # An older relay that cannot list groups: relay_info says so, create_session with group is refused here.
        FakePeer.mode = "relay_info"
        info = agent.ok("relay_info", relay="odd-box")
        assert info["groups"] is None and "cannot list session groups" in info["groupsNote"], info
        sent_before = FakePeer.calls
        grouped = agent.refused("create_session", "REMOTE_RELAY_UNSUPPORTED", relay="odd-box", text="x", group="g")
        assert "doesn't support groups on create_session yet" in grouped["error"] and FakePeer.calls == sent_before
    finally:
        server.shutdown()
        server.server_close()
    got, body = agent.call("relay_info", relay="odd-box")
    assert (got, body["code"]) == (502, "REMOTE_RELAY_OFFLINE") and "is not answering" in body["error"], body
    assert agent.ok("list_relays")["relays"][-1]["online"] is False
    # Unpairing forgets it: its name means nothing any more.
    assert desk.owner.request("DELETE", "/api/v1/owner/relays/odd-box")[0] == 200
    agent.refused("relay_info", "REMOTE_RELAY_UNKNOWN", relay="odd-box")
    assert [r["name"] for r in desk.owner.get("/api/v1/owner/relays")["relays"]] == ["build-box"]


def pair_with_url(relay: Relay, url: str, token: str) -> dict[str, Any]:
    status, body = relay.owner.request("POST", "/api/v1/owner/relays", {"url": url, "token": token})
    assert status == 201, body
    return body["relay"]


def test_the_settings_page_shows_paired_relays_and_pairs_with_csrf_protected_forms(paired: dict[str, Relay]) -> None:
    desk, lab = paired["desk"], paired["lab"]
    page = Browser(desk)
    page.sign_in()
    shown = page.get("/settings")
    assert shown.status_code == 200 and "Paired relays" in shown.text
    relays_part = shown.text.split('id="relays"', 1)[1].split('id="access"', 1)[0]
    assert "build-box" in relays_part and "answering" in relays_part and "last answered" in relays_part
    stored = desk.owner.get("/api/v1/owner/relays")["relays"]
    # Forms without the page's CSRF token change nothing.
    for path, data in [("/settings/pairing-tokens", {}), ("/settings/relays/build-box/permission", {"permission": "off"}),
                       ("/settings/relays/build-box/delete", {})]:
        assert page.post(path, data, csrf="").status_code == 400
    assert desk.owner.get("/api/v1/owner/relays")["relays"] == stored
    # A pairing token is shown once, on the page that made it.
    made = page.post("/settings/pairing-tokens", {"label": "from the page"})
    assert made.status_code == 201
    token = re.search(r'<code class="token">(oar_p_[^<]+)</code>', made.text)
    assert token is not None
    assert token.group(1) not in page.get("/settings").text
    listed = desk.owner.get("/api/v1/owner/pairing-tokens")["pairingTokens"]
    assert any(t["label"] == "from the page" for t in listed)
    # Pairing from the page, and the level.
    bad = page.post("/settings/relays", {"url": "ftp://127.0.0.1", "token": "x"})
    assert bad.status_code == 200 and "must start with https://" in html.unescape(bad.text)
    added = page.post("/settings/relays", {"url": lab.url, "token": pairing_token(lab.owner), "name": "lab-from-page"})
    assert added.status_code == 200 and "Paired with relay" in html.unescape(added.text)
    page.post("/settings/relays/lab-from-page/permission", {"permission": "read"})
    assert {r["name"]: r["permission"] for r in desk.owner.get("/api/v1/owner/relays")["relays"]}["lab-from-page"] == "read"
    removed = page.post("/settings/relays/lab-from-page/delete", {})
    assert removed.status_code == 200 and "Unpaired relay" in html.unescape(removed.text)
    assert [r["name"] for r in desk.owner.get("/api/v1/owner/relays")["relays"]] == ["build-box"]


def oar_pair(relay: Relay, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oar", "pair", *args], cwd=PROJECT, env=relay_environment(relay.config, FAST_TIMES),
        capture_output=True, text=True, timeout=120,
    )


def test_oar_pair_creates_a_token_on_one_relay_and_pairs_the_other_with_it(paired: dict[str, Relay]) -> None:
    lab, desk = paired["lab"], paired["desk"]
    made = oar_pair(lab)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("oar_p_") and "shown only now" in made.stderr
    refused = oar_pair(desk, "http://example.com", token)
    assert refused.returncode == 1 and "Plain http:// is allowed only" in refused.stderr
    half = oar_pair(desk, lab.url)
    assert half.returncode == 2
    done = oar_pair(desk, lab.url, token, "--name", "lab-cli")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f'paired with relay "lab-cli" at {lab.url}') and token not in done.stdout
    assert "lab-cli" in [r["name"] for r in desk.owner.get("/api/v1/owner/relays")["relays"]]
    assert desk.owner.request("DELETE", "/api/v1/owner/relays/lab-cli")[0] == 200


def test_an_ask_about_a_paired_relays_session_is_kept_there_and_its_answer_comes_back(paired: dict[str, Relay]) -> None:
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("asking")
    owner_writes(desk, agent, "@build-box")
    about = build_box.owner.post("/api/v1/owner/sessions", {"title": "deploy"})["session"]["id"]
    asked = agent.ok("ask", relay="build-box", session=about, question="Ship the migration tonight?",
                     options=["Ship", "Wait"])
    assert asked["status"] == "pending" and asked["question_id"].startswith("ask_") and asked["relay"] == "build-box"
    # Kept on build-box: its Inbox shows it, and build-box's owner answers there.
    inbox = build_box.owner.get("/api/v1/owner/inbox")["questions"]
    card = next(q for q in inbox if q["id"] == asked["question_id"])
    assert card["question"] == "Ship the migration tonight?", card
    assert [q for q in desk.owner.get("/api/v1/owner/inbox")["questions"] if q["id"] == asked["question_id"]] == []
    listed = agent.ok("list_questions", relay="build-box")["questions"]
    assert [(q["question_id"], q["status"]) for q in listed] == [(asked["question_id"], "pending")], listed
    build_box.owner.post(f"/api/v1/owner/questions/{asked['question_id']}", {"choices": ["Wait"]})

    def told() -> list[dict[str, Any]]:
        messages = desk.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["messages"]
        return [m for m in messages if m["role"] == "event" and "question_answered" in m["text"]]

    lines = poll("the answer on desk", told)
    assert lines[0]["role"] == "event" and lines[0]["text"].endswith(
        f'[relay event] build-box · question_answered: {asked["question_id"][:7]}… "Ship the migration tonight?" '
        '→ "Wait" (via build-box)'), lines[0]
    # The session it was about hears it on build-box; the caller's stand-in there runs nothing.
    about_messages = build_box.owner.get(f"/api/v1/owner/sessions/{about}")["messages"]
    assert any("question_answered" in m["text"] for m in poll("the line on build-box", lambda: [
        m for m in build_box.owner.get(f"/api/v1/owner/sessions/{about}")["messages"] if "question_answered" in m["text"]
    ])), about_messages
    # Told once, however often the clock looks again.
    later = agent.ok("ask", relay="build-box", session=about, question="And the docs?")
    build_box.owner.post(f"/api/v1/owner/questions/{later['question_id']}", {"dismiss": True})
    poll("the dismissal on desk", lambda: len(told()) == 2)
    assert len(told()) == 2 and told()[1]["text"].endswith("→ dismissed (via build-box)"), told()



def event_messages(relay: Relay, agent: Agent) -> list[str]:
    messages = relay.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["messages"]
    return [m["text"] for m in messages if m["role"] == "event"]


def test_events_of_a_paired_relays_sessions_arrive_and_a_lost_link_replays_them(paired: dict[str, Relay]) -> None:
    """Last in the module: it stops build-box's web for a while."""
    desk, build_box = paired["desk"], paired["build-box"]
    agent = desk.conversation("watching")
    owner_writes(desk, agent, "keep an eye on @build-box")
    target = build_box.owner.conversation("nightly")
    # The first watch there asks build-box's owner (its Inbox), as for its own agents.
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(body=agent.call(
        "subscribe", relay="build-box", sessions=[target.session_id], events=["turn_end"])))
    call.start()
    card = poll("the watch card on build-box", lambda: next(
        (c for c in build_box.owner.get("/api/v1/owner/inbox")["cards"] if c["action"] == "subscribe"), None))
    build_box.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    call.join(60)
    status, subscribed = answer["body"]
    assert status == 200 and subscribed["subscription"]["id"].startswith("sub_"), subscribed
    listed = agent.ok("list_subscriptions", relay="build-box")["subscriptions"]
    assert [s["id"] for s in listed] == [subscribed["subscription"]["id"]], listed

    # The 20 subscriptions a conversation may have count those kept on paired relays.
    here = desk.owner.post("/api/v1/owner/sessions", {"title": "watched here"})["session"]["id"]
    for _ in range(19):
        agent.ok("subscribe", relay="this", sessions=[here])
    agent.refused("subscribe", "REMOTE_RELAY_SUBSCRIPTION_LIMIT", relay="this", sessions=[here])
    agent.refused("subscribe", "REMOTE_RELAY_SUBSCRIPTION_LIMIT", relay="build-box", sessions=[target.session_id])
    assert agent.ok("unsubscribe", relay="this", subscription_id="all")["summary"]
    assert len(agent.ok("list_subscriptions", relay="build-box")["subscriptions"]) == 1

    owner_writes(build_box, target, "first run")
    line = f'[relay event] build-box · session "nightly" ({target.session_id[:4]}…): turn_end (done)'
    poll("the event on desk", lambda: any(line in text for text in event_messages(desk, agent)))
    [delivered] = [text for text in event_messages(desk, agent) if line in text]
    assert delivered.startswith("[relay event · automated message from OAR") and '"echo: first run"' in delivered

    # build-box stops answering: after the (shortened) minute, desk says so, to the conversation
    # and to desk's owner (a notification of kind relay_lost, docs/notifications.md#kinds).
    desk.owner.request("PUT", "/api/v1/owner/notifications/open-page", {"type": "page", "kinds": ["relay_lost"]})
    owner_writes(build_box, target, "!sleep 2\nwhile away")
    away = agent.ok("ask", relay="build-box", session=target.session_id, question="Still answering?")["question_id"]
    STACKS["build-box"].stop("web")
    try:
        # An ask kept there is checked every 0.3 s (the tests' PEER_ASK_POLL_SECONDS) while build-box
        # answers, and every PEER_ASK_RETRY_SECONDS (30 s) once a check found it silent.
        retry = desk.config.time("PEER_ASK_RETRY_SECONDS")
        poll("the ask's check put off while build-box is silent", lambda: (
            _read(desk, PeerAsk, PeerAsk.id == away).next_check_at - utcnow()).total_seconds() > retry / 2)
        poll("link_lost on desk", lambda: any("[relay event] build-box: link_lost (no answer since " in text
                                              for text in event_messages(desk, agent)))
        [told] = poll("the owner told", lambda: desk.owner.get("/api/v1/owner/notifications/open-page")["recent"])
        assert (told["kind"], told["title"]) == ("relay_lost", "A paired relay is lost"), told
        # The turn ends on build-box meanwhile; its event waits there, in its outbox, for desk.
        poll("the kept event on build-box", lambda: _kept_for_another_relay(build_box, "while away"))
    finally:
        STACKS["build-box"].start_web()
    restored = poll("link_restored on desk", lambda: [t for t in event_messages(desk, agent) if "link_restored" in t])
    assert len(restored) == 1, restored
    lines = restored[0].splitlines()
    assert lines[1].startswith("[relay event] build-box · replayed: 1 event (turn_end 1); last: session \"nightly\""), lines
    assert '"echo: while away"' in lines[1]
    assert lines[2].startswith("[relay event] build-box: link_restored after ") and lines[2].endswith(
        "; 1 event replayed, 0 held for later"), lines
    # Nothing twice: the event that was replayed is not delivered again afterwards.
    owner_writes(build_box, target, "third run")
    poll("the next event", lambda: any('"echo: third run"' in t for t in event_messages(desk, agent)))
    texts = event_messages(desk, agent)
    assert sum("while away" in t for t in texts) == 1 and sum("first run" in t for t in texts) == 1, texts

    # desk's worker and clock stop (a deploy): build-box keeps what comes meanwhile, desk gets it once back.
    STACKS["desk"].stop("clock", "worker")
    try:
        owner_writes(build_box, target, "fourth run")
        poll("the kept event on build-box", lambda: _kept_for_another_relay(build_box, "fourth run"))
    finally:
        STACKS["desk"].start_worker()
        STACKS["desk"].start_clock()
    poll("the event after desk's restart", lambda: any('"echo: fourth run"' in t for t in event_messages(desk, agent)))
    owner_writes(build_box, target, "fifth run")
    poll("the next event", lambda: any('"echo: fifth run"' in t for t in event_messages(desk, agent)))
    assert sum("fourth run" in t for t in event_messages(desk, agent)) == 1

    # Unpairing ends what desk's conversations keep there: the subscription (unpaired) and the ask.
    pending = agent.ok("ask", relay="build-box", session=target.session_id, question="Still there?")
    assert desk.owner.request("DELETE", "/api/v1/owner/relays/build-box")[0] == 200
    ended = _read(build_box, Subscription, Subscription.id == subscribed["subscription"]["id"])
    assert (ended.end_reason, ended.ended_at is not None) == ("unpaired", True)
    assert _read(build_box, Question, Question.id == pending["question_id"]).status == "ended"
    assert pending["question_id"] not in [q["id"] for q in build_box.owner.get("/api/v1/owner/inbox")["questions"]]
    agent.refused("list_sessions", "REMOTE_RELAY_UNKNOWN", relay="build-box")


def _read(relay: Relay, model: Any, where: Any) -> Any:
    """One row of the relay's database, read directly."""
    config = relay.config
    db = postgres_database(config.database_url) if config.database_url else peewee.SqliteDatabase(str(config.sqlite_path))
    try:
        with db.bind_ctx([model]):
            return model.get(where)
    finally:
        db.close()


def _kept_for_another_relay(relay: Relay, text: str) -> bool:
    """Whether the relay's outbox holds a delivery with `text` (read from its database directly,
    since its web is down)."""
    config = relay.config
    db = postgres_database(config.database_url) if config.database_url else peewee.SqliteDatabase(str(config.sqlite_path))
    try:
        with db.bind_ctx([RelayOutbox]):
            return RelayOutbox.select().where(RelayOutbox.text.contains(text)).exists()
    finally:
        db.close()

