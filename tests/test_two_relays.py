"""Two relays on one machine (the `two_relays` fixture): each answers as itself and keeps its
own sessions. The ground paired relays will stand on; nothing pairs them yet."""

from __future__ import annotations

import requests

from tests.support.relays import Relay


def test_two_relays_answer_with_their_own_names_and_keep_their_own_sessions(two_relays: dict[str, Relay]) -> None:
    desk, build_box = two_relays["desk"], two_relays["build-box"]
    assert desk.url != build_box.url and desk.config.namespace != build_box.config.namespace
    assert desk.config.data_dir != build_box.config.data_dir
    for name, relay in two_relays.items():
        health = requests.get(f"{relay.url}/healthz", timeout=10)
        assert health.status_code == 200
        assert health.json() == {"ok": True, "version": health.json()["version"], "relay": name}

    agent = desk.conversation("desk")
    created = agent.ok("create_session", relay="this", text="hello desk", wait_seconds=60)
    assert created["status"] == "done" and created["reply"]["text"] == "echo: hello desk", created
    session = created["session"]
    assert desk.owner.get(f"/api/v1/owner/sessions/{session}")["session"]["id"] == session

    status, body = build_box.owner.request("GET", f"/api/v1/owner/sessions/{session}")
    assert status == 404 and body["code"] == "REMOTE_RELAY_NOT_FOUND", body
    assert session not in [s["id"] for s in build_box.owner.get("/api/v1/owner/sessions")["sessions"]]
    # Each owner's token is its relay's alone.
    status, _body = build_box.owner.request("GET", "/api/v1/owner/settings")
    assert status == 200
    assert requests.get(f"{build_box.url}/api/v1/owner/settings", timeout=10,
                        headers={"Authorization": f"Bearer {desk.owner.token}"}).status_code == 401
    # And build-box's agents run their own turns, on their own worker.
    other = build_box.conversation("build")
    done = other.ok("create_session", relay="this", text="hello build-box", wait_seconds=60)
    assert done["status"] == "done" and done["reply"]["text"] == "echo: hello build-box", done
    assert agent.ok("relay_info", relay="this")["name"] == "desk"
    assert other.ok("relay_info", relay="this")["name"] == "build-box"
