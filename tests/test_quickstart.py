"""The README's Quick start works verbatim: its curl commands, read from README.md, run in order against a
relay with the same methods, paths and bodies (curl's `-d` sends them as a form, the relay reads JSON
anyway); the first `create_session` waits for its card while the owner allows it from another terminal."""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import dataclass
from typing import Any

import requests

from tests.support.clients import poll
from tests.support.processes import PROJECT
from tests.support.relays import Relay

README = PROJECT / "README.md"


@dataclass(frozen=True)
class Curl:
    method: str
    url: str
    headers: dict[str, str]
    body: str | None


def quick_start_commands() -> list[Curl]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    # Indented code lines; a trailing backslash continues a command on the next line.
    code = "\n".join(line[4:] for line in section.splitlines() if line.startswith("    "))
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        if not line.startswith("curl "):
            continue
        words = shlex.split(line, comments=True)
        method, headers, body, url = "GET", {}, None, ""
        words = iter(words[1:])
        for word in words:
            if word == "-X":
                method = next(words)
            elif word == "-H":
                name, value = next(words).split(": ", 1)
                headers[name] = value
            elif word == "-d":
                body = next(words)
                method = "POST" if method == "GET" else method
            elif not word.startswith("-"):
                url = word
        commands.append(Curl(method, url, headers, body))
    return commands


def run(relay: Relay, curl: Curl, values: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """One README command as curl sends it: `$OWNER` and the `…` placeholders filled in from earlier answers."""

    def fill(text: str) -> str:
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        return text

    url = fill(curl.url).replace("localhost:8080", relay.url.removeprefix("http://"))
    headers = {name: fill(value) for name, value in curl.headers.items()}
    if curl.body is not None:
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")  # what curl -d sends
    response = requests.request(curl.method, "http://" + url.removeprefix("http://"), headers=headers,
                                data=fill(curl.body).encode() if curl.body is not None else None, timeout=120)
    return response.status_code, response.json()


def test_the_readme_quick_start_works_verbatim(relay: Relay) -> None:
    relay.owner.settings(agent_sessions_enabled=False)  # as a fresh relay starts
    commands = quick_start_commands()
    assert [(c.method, c.url.split("localhost:8080", 1)[1]) for c in commands] == [
        ("PATCH", "/api/v1/owner/settings"),
        ("POST", "/api/v1/owner/sessions"),
        ("POST", "/api/v1/relay_tool"),
        ("GET", "/api/v1/owner/inbox"),
        ("POST", "/api/v1/owner/cards/card_…"),
    ]
    settings, conversation, create, inbox, allow = commands
    assert relay.config.owner_token
    values = {"$OWNER": relay.config.owner_token}

    status, body = run(relay, settings, values)
    assert status == 200 and body["settings"]["agent_sessions_enabled"] is True, body
    status, body = run(relay, conversation, values)
    assert status == 201 and body["session"]["title"] == "desk" and body["token"].startswith("oar_s_"), body
    values["oar_s_…"] = body["token"]

    answer: dict[str, Any] = {}
    waiting = threading.Thread(target=lambda: answer.update(zip(("status", "body"), run(relay, create, values), strict=True)))
    waiting.start()
    try:
        # The owner, in a second terminal, finds the card in the Inbox while create_session waits.
        def card_shown() -> dict[str, Any] | None:
            status, body = run(relay, inbox, values)
            assert status == 200 and set(body) >= {"cards", "questions"}, body
            return (body["cards"] or [None])[0]

        card = poll("the create_session card", card_shown)
        assert card["reason"] == "create_sessions" and card["session"]["title"] == "desk"
        assert not answer, "create_session answered before the owner's Allow"
        values["card_…"] = card["id"]
        status, body = run(relay, allow, values)
        assert status == 200 and body["card"]["status"] == "allowed", body
    finally:
        waiting.join(60)
    assert answer["status"] == 200, answer
    created = answer["body"]
    assert created["ok"] is True and created["status"] == "done", created
    assert created["reply"]["text"] == "echo: hello"
