"""Deciding from a notification (docs/notifications.md#deciding-from-a-notification): the link a
JSON webhook and an ntfy endpoint on loopback receive, opened in headless Chromium without
signing in; ntfy's buttons pressed as the ntfy app presses them; a Web Push notification's
actions clicked in the relay's own service worker; used, expired, withdrawn and forged tokens;
per-channel opt-in, the kinds the owner lets be decided, the audit, and the rate limit. In each
case the agent's waiting call is answered (or, for a dead token, still waits and is answered by
a live one).

One relay for the module (its own Redis, web in this process, workers and clock), with a short
merge window; the receivers and the push service are real HTTP servers on loopback.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from playwright.sync_api import Browser, Page, expect

from oar.approvals.cards import PRIORITY
from oar.core import defaults, keys
from oar.core.db import database
from oar.core.models import Card, Message, Question
from oar.core.timeutil import utcnow
from oar.notifications.models import DecisionLink
from tests.support.browser import TIMEOUT_MS, signed_in_tab
from tests.support.clients import Agent, poll
from tests.support.conversations import write
from tests.support.push import BrowserKeys, PushService
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay
from tests.support.service_worker import needs_node, pushed_and_clicked
from tests.support.snapshots import reset_database, snapshot

pytestmark = pytest.mark.stack

TIMES = {**FAST_TIMES, "NOTIFY_MERGE_SECONDS": "1", "NOTIFY_RETRY_SECONDS": "0.3"}
LINK = re.compile(r"https?://\S+/decide/oar_d_[A-Za-z0-9_-]+")
FORGED = "oar_d_" + "A" * 32


class Receiver:
    """A loopback HTTP server that records what it is sent: a JSON webhook (`json://…/<path>`) and
    an ntfy server (`ntfy://…/<topic>`, which posts JSON to `/` and its buttons as X-Actions)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.received.append((self.path, {k.lower(): v for k, v in self.headers.items()},
                                              json.loads(body or b"{}")))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"

    def at(self, path: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        with self.lock:
            return [(headers, body) for seen, headers, body in self.received if seen == path]

    def clear(self) -> None:
        with self.lock:
            self.received.clear()


class Waiting:
    """An agent's call over HTTP that waits on its approval card, in a thread of its own."""

    def __init__(self, agent: Agent, action: str, **args: Any) -> None:
        self.answer: dict[str, Any] = {}
        self.thread = threading.Thread(
            target=lambda: self.answer.update(zip(("status", "body"), agent.call(action, **args), strict=True)))
        self.thread.start()

    def result(self) -> tuple[int, dict[str, Any]]:
        self.thread.join(60)
        assert not self.thread.is_alive() and self.answer, "the waiting call was not answered"
        return self.answer["status"], self.answer["body"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.server.shutdown()


@pytest.fixture(scope="module")
def deciding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    with own_relay(tmp_path_factory.mktemp("decide"), TIMES, clock=True) as stack:
        yield stack


@pytest.fixture
def relay(deciding: RelayStack, receiver: Receiver) -> Iterator[Relay]:
    """The module's relay, emptied, its receiver cleared and this address's decision requests forgotten."""
    relay = deciding.relay
    assert relay is not None and relay.runtime is not None
    reset_database()
    receiver.clear()
    relay.owner.open_for_agents()
    forget = keys.decision_requests(relay.config.namespace, "127.0.0.1")
    relay.runtime.redis.delete(forget)
    yield relay
    relay.runtime.redis.delete(forget)


@pytest.fixture
def visitor(chromium: Browser, relay: Relay) -> Iterator[Page]:
    """A tab of a browser that never signed in to the relay: a phone opening a notification's link."""
    context = chromium.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def channel(relay: Relay, name: str, **body: Any) -> dict[str, Any]:
    status, answer = relay.owner.request("PUT", f"/api/v1/owner/notifications/{name}", body)
    assert status == 200, answer
    return answer["channel"]


def link_in(message: str) -> str:
    found = LINK.search(message)
    assert found, message
    return found.group(0)


def token_of(link: str) -> str:
    return link.rsplit("/", 1)[1]


def topic(receiver: Receiver, name: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """What an ntfy topic received (every topic is posted to the server's root)."""
    return [(headers, body) for headers, body in receiver.at("/") if body.get("topic") == name]


def press(relay: Relay, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST /api/v1/decide as a notification's button does."""
    response = requests.post(f"{relay.url}/api/v1/decide", json=body, timeout=30)
    return response.status_code, response.json()


def press_ntfy_button(button: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """What the ntfy app does for an `http` action: its method, URL, headers and body, as given."""
    assert button["action"] == "http"
    response = requests.request(button["method"], button["url"], headers=button.get("headers") or {},
                                data=button.get("body", "").encode(), timeout=30)
    return response.status_code, response.json()


def inbox_decided(relay: Relay, subject_id: str) -> dict[str, Any]:
    return next(entry for entry in relay.owner.get("/api/v1/owner/inbox")["decided"] if entry["id"] == subject_id)


def reply_to(relay: Relay, asking: Agent, prompt: str) -> dict[str, Any]:
    """The turn that asked, once it goes on: another conversation's agent waits for its reply."""
    return relay.conversation("watcher").ok("wait", relay="this", session=asking.session_id, message_id=prompt,
                                             wait_seconds=30)


def turn_status(message_id: str) -> str:
    with database.connection_context():
        return str(Message.get(Message.id == message_id).status)


def dead_answer(relay: Relay) -> tuple[int, dict[str, Any]]:
    """What a forged token gets: every token that cannot decide gets exactly this."""
    return press(relay, {"token": FORGED, "decision": "allow"})


# Links in Chromium --------------------------------------------------------------------------


def test_a_webhooks_link_shows_the_card_without_sign_in_and_allow_once_answers_the_waiting_call(
    relay: Relay, receiver: Receiver, visitor: Page, chromium: Browser,
) -> None:
    assert channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook", decisions=True)["decisions"] is True
    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "create_session", relay="this", text="Build the docs site")
    [(_, sent)] = poll("the webhook's card", lambda: receiver.at("/hook"))
    link = link_in(sent["message"])
    assert link.startswith(f"{relay.url}/decide/oar_d_") and f"{relay.url}/inbox" in sent["message"]

    visitor.goto(link)
    card = visitor.locator("article.card.approval")
    expect(card.locator(".card-text")).to_contain_text("This agent wants to start sessions on this relay")
    expect(card.locator(".excerpt")).to_have_text("Build the docs site")
    expect(card).to_contain_text("the agent of “ops” asks")
    buttons = visitor.locator("form button")
    expect(buttons).to_have_text(["Allow once", "Allow and remember", "Deny"])
    # Opening the page decided nothing (a link preview or a scanner opens links).
    [pending] = relay.owner.get("/api/v1/owner/inbox")["cards"]
    visitor.get_by_role("button", name="Allow once").click()
    expect(visitor.locator("h1")).to_have_text("Allowed")

    status, body = call.result()
    assert status == 200 and body["ok"] is True, body
    decided = inbox_decided(relay, pending["id"])
    assert (decided["status"], decided["decidedVia"], decided["decidedChannel"]) == ("allowed", "link", "hook")
    assert relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]["approvals"] == []  # once

    visitor.goto(link)  # the link is used up, and says how the card was decided
    expect(visitor.locator("main")).to_contain_text("This link was used: allowed from a decision link sent to channel “hook”")
    assert press(relay, {"token": token_of(link), "decision": "allow"}) == dead_answer(relay)
    with signed_in_tab(chromium, relay) as owner_tab:
        owner_tab.goto("/inbox")
        expect(owner_tab.locator(f'[data-decided="{pending["id"]}"] .decided-how')).to_contain_text(
            "allowed from a decision link sent to channel “hook”")


def test_an_ntfy_link_denies_in_chromium_and_its_used_button_changes_nothing(
    relay: Relay, receiver: Receiver, visitor: Page,
) -> None:
    assert channel(relay, "phone", type="url", url=f"ntfy://{receiver.host}/relay-topic")["decisions"] is True
    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "subscribe", sessions=["all"])
    [(headers, sent)] = poll("ntfy's card", lambda: receiver.at("/"))
    assert sent["topic"] == "relay-topic" and sent["title"] == "An approval card waits · ops"
    link = link_in(sent["message"])
    assert headers["x-click"] == link
    buttons = json.loads(headers["x-actions"])
    assert [(b["action"], b["label"], b["method"]) for b in buttons] == [("http", "Allow", "POST"), ("http", "Deny", "POST")]
    assert [json.loads(b["body"]) for b in buttons] == [
        {"token": token_of(link), "decision": "allow_once"}, {"token": token_of(link), "decision": "deny"}]
    assert all(b["url"] == f"{relay.url}/api/v1/decide" for b in buttons)

    visitor.goto(headers["x-click"])
    expect(visitor.locator(".card-text")).to_contain_text("This agent wants to watch sessions")
    visitor.get_by_role("button", name="Deny").click()
    expect(visitor.locator("h1")).to_have_text("Denied")
    status, body = call.result()
    assert status == 403 and body["code"] == "REMOTE_RELAY_APPROVAL_DENIED", body
    assert ops.ok("list_subscriptions")["subscriptions"] == []

    # The notification's Allow button still on the phone: the same answer as a forged token.
    card_id = relay.owner.get("/api/v1/owner/inbox")["decided"][0]["id"]
    assert press_ntfy_button(buttons[0]) == dead_answer(relay)
    assert dead_answer(relay)[0] == 404 and dead_answer(relay)[1]["code"] == "REMOTE_RELAY_NOT_FOUND"
    with database.connection_context():
        assert Card.get_by_id(card_id).status == "denied"


def test_an_ntfy_button_allows_and_a_question_is_answered_by_its_option_button(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "phone", type="url", url=f"ntfy://{receiver.host}/relay-topic")
    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "create_session", relay="this", text="hi")
    [(headers, _)] = poll("ntfy's card", lambda: receiver.at("/"))
    allow, _deny = json.loads(headers["x-actions"])
    status, body = press_ntfy_button(allow)
    assert (status, body["outcome"]["status"], body["outcome"]["via"], body["outcome"]["channel"]) == (
        200, "allowed", "action", "phone")
    assert call.result()[1]["ok"] is True

    desk = relay.conversation("desk")
    prompt = write(relay, desk.session_id, "!ask Which colour? | red | blue")
    [(headers, sent)] = poll("ntfy's question", lambda: receiver.at("/")[1:])
    assert sent["title"] == "A question waits for your answer · desk"
    red, blue = json.loads(headers["x-actions"])
    assert (red["label"], blue["label"]) == ("red", "blue") and json.loads(blue["body"])["option"] == 1
    assert press_ntfy_button(blue)[0] == 200
    done = reply_to(relay, desk, prompt)
    assert done["reply"]["text"].endswith("answer: blue")
    question = relay.owner.get("/api/v1/owner/inbox")["decided"][0]  # the newest
    assert (question["status"], question["answer"], question["decidedVia"]) == ("answered", "blue", "action")


def test_a_question_is_answered_on_the_links_page_by_an_option_and_in_free_text(
    relay: Relay, receiver: Receiver, visitor: Page,
) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook", decisions=True)
    desk = relay.conversation("desk")
    prompt = write(relay, desk.session_id, "!ask Which colour? | red | blue")
    [(_, sent)] = poll("the webhook's question", lambda: receiver.at("/hook"))
    visitor.goto(link_in(sent["message"]))
    expect(visitor.locator(".card-text")).to_have_text("Which colour?")
    expect(visitor.locator(".card-kind")).to_contain_text("The agent of “desk” waits for your answer")
    visitor.get_by_role("button", name="blue").click()
    expect(visitor.locator("h1")).to_have_text("Answered")
    done = reply_to(relay, desk, prompt)
    assert done["reply"]["text"].endswith("answer: blue")

    prompt = write(relay, desk.session_id, "!ask Name the release?")
    [(_, sent)] = poll("the second question", lambda: receiver.at("/hook")[1:])
    visitor.goto(link_in(sent["message"]))
    visitor.get_by_label("Your answer").fill("Aurora <b>borealis</b>")
    visitor.get_by_role("button", name="Send answer").click()
    expect(visitor.locator(".flash.ok")).to_contain_text("Your answer: “Aurora <b>borealis</b>”.")
    done = reply_to(relay, desk, prompt)
    assert done["reply"]["text"].endswith("answer: Aurora <b>borealis</b>")
    entry = relay.owner.get("/api/v1/owner/inbox")["decided"][0]
    assert (entry["answer"], entry["decidedVia"], entry["decidedChannel"]) == ("Aurora <b>borealis</b>", "link", "hook")


# Tokens that cannot decide ------------------------------------------------------------------


def test_forged_used_and_otherwise_decided_tokens_get_one_answer_and_change_nothing(
    relay: Relay, receiver: Receiver, visitor: Page,
) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook", decisions=True)
    status, forged = dead_answer(relay)
    assert status == 404 and forged == {
        "ok": False, "code": "REMOTE_RELAY_NOT_FOUND",
        "error": "This decision link decides nothing: it is unknown, used or expired, or what it was for was decided "
                 "already. Nothing was changed.",
    }
    for token in ("nonsense", "oar_d_", FORGED + "x", "oar_d_" + "é" * 20):
        assert press(relay, {"token": token, "decision": "deny"}) == (status, forged), token
    visitor.goto(f"{relay.url}/decide/{FORGED}")
    expect(visitor.locator("h1")).to_have_text("This link decides nothing")

    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "create_session", relay="this", text="hi")
    [(_, sent)] = poll("the card", lambda: receiver.at("/hook"))
    token = token_of(link_in(sent["message"]))
    # Bad input for a live link says what was wrong, and leaves the link as it was.
    for body, says in (({"token": token}, "one of decision"), ({"token": token, "decision": "maybe"}, "decision must be"),
                       ({"token": token, "option": 0}, "is for an approval card"),
                       ({"token": token, "decision": "allow", "option": 0}, "one of decision"),
                       ({"token": token, "decision": "allow", "colour": "red"}, "does not take: colour")):
        status, answer = press(relay, body)
        assert status == 400 and answer["code"] == "REMOTE_RELAY_INVALID_INPUT" and says in answer["error"], answer
    response = requests.post(f"{relay.url}/api/v1/decide", data=b"[1, 2]", timeout=30)
    assert response.status_code == 400 and response.json()["code"] == "REMOTE_RELAY_INVALID_INPUT"
    # The forged token did not answer the waiting call; the live one does, once.
    assert call.thread.is_alive()
    assert press(relay, {"token": token, "decision": "deny"})[0] == 200
    assert call.result()[1]["code"] == "REMOTE_RELAY_APPROVAL_DENIED"
    before = snapshot(relay)
    assert press(relay, {"token": token, "decision": "allow"}) == (404, forged)  # used
    assert press(relay, {"token": FORGED, "option": 0}) == (404, forged)
    assert snapshot(relay) == before

    # A card decided another way (the owner API) kills its links.
    call = Waiting(ops, "create_session", relay="this", text="again")
    [(_, sent)] = poll("the second card", lambda: receiver.at("/hook")[1:])
    link = link_in(sent["message"])
    [card] = relay.owner.get("/api/v1/owner/inbox")["cards"]
    relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    assert call.result()[1]["ok"] is True
    assert press(relay, {"token": token_of(link), "decision": "deny"}) == (404, forged)
    visitor.goto(link)
    expect(visitor.locator("main")).to_contain_text("Already decided: allowed through the owner API")
    assert relay.owner.get(f"/api/v1/owner/sessions/{ops.session_id}")["session"]["approvals"] == ["create_sessions"]


def test_an_expired_card_is_denied_by_default_and_an_expired_question_link_decides_nothing(
    relay: Relay, receiver: Receiver, visitor: Page,
) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook", decisions=True)
    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "create_session", relay="this", text="hi")
    [(_, sent)] = poll("the card", lambda: receiver.at("/hook"))
    link = link_in(sent["message"])
    with database.connection_context():
        link_row = DecisionLink.get(DecisionLink.subject.startswith("card_"))
        card = Card.get_by_id(link_row.subject)
        assert link_row.expires_at == card.expires_at  # a link lives as long as its card
        Card.update(expires_at=utcnow() - timedelta(seconds=1)).where(Card.id == card.id).execute()
    status, body = call.result()
    assert status == 403 and body["error"].startswith(f"Nobody decided the approval card {card.id} before it expired")
    assert press(relay, {"token": token_of(link), "decision": "allow"}) == dead_answer(relay)
    visitor.goto(link)
    expect(visitor.locator("main")).to_contain_text("Already decided: expired: nobody decided it in time")

    desk = relay.conversation("desk")
    asked = desk.ok("ask", question="Ship it?")["question_id"]
    [(_, sent)] = poll("the question", lambda: receiver.at("/hook")[1:])
    link = link_in(sent["message"])
    with database.connection_context():
        row = DecisionLink.get(DecisionLink.subject == asked)
        assert timedelta(hours=23) < row.expires_at - row.created_at <= timedelta(seconds=defaults.DECISION_LINK_MAX_SECONDS)
        DecisionLink.update(expires_at=utcnow() - timedelta(seconds=1)).where(DecisionLink.subject == asked).execute()
    visitor.goto(link)
    expect(visitor.locator("main")).to_contain_text("This link expired")
    assert press(relay, {"token": token_of(link), "answer": "yes"}) == dead_answer(relay)
    with database.connection_context():
        assert Question.get_by_id(asked).status == "pending"


def test_a_withdrawn_cards_link_decides_nothing_and_the_call_is_told(relay: Relay, receiver: Receiver, visitor: Page) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook", decisions=True)
    ops = relay.conversation("ops", approvals=())
    running = write(relay, ops.session_id, "!sleep 60")
    poll("the turn runs", lambda: turn_status(running) == "running")
    call = Waiting(ops, "subscribe", sessions=["all"])
    [(_, sent)] = poll("the card", lambda: receiver.at("/hook"))
    link = link_in(sent["message"])
    relay.owner.post(f"/api/v1/owner/sessions/{ops.session_id}/archive")  # ends the turn the card shows in
    status, body = call.result()
    assert status == 403 and "it was withdrawn" in body["error"], body
    assert press(relay, {"token": token_of(link), "decision": "allow"}) == dead_answer(relay)
    visitor.goto(link)
    expect(visitor.locator("main")).to_contain_text("Already decided: withdrawn: the agent stopped waiting")


# Web Push actions ---------------------------------------------------------------------------


@needs_node
def test_a_push_actions_post_from_the_service_worker_decides_and_a_used_one_opens_the_page(relay: Relay) -> None:
    service = PushService()
    try:
        browser = BrowserKeys()
        relay.owner.request("POST", "/api/v1/owner/push-subscriptions", {
            "endpoint": f"{service.origin}/push/phone", "keys": browser.keys(), "label": "phone"})
        assert channel(relay, "push", type="webpush")["decisions"] is True
        ops = relay.conversation("ops", approvals=())
        call = Waiting(ops, "create_session", relay="this", text="hi")
        payload = browser.decrypt(poll("the push", lambda: service.at("/push/phone"))[0])
        token = payload["token"]
        assert payload["link"] == f"{relay.url}/decide/{token}" and token.startswith("oar_d_")
        assert payload["actions"] == [{"action": "allow_once", "title": "Allow"}, {"action": "deny", "title": "Deny"}]

        clicked = pushed_and_clicked(f"{relay.url}/", payload, "allow_once")
        assert clicked["shown"][0]["options"]["actions"] == payload["actions"]
        [post] = clicked["posted"]
        assert (post["url"], post["method"], json.loads(post["body"]), post["status"]) == (
            f"{relay.url}/api/v1/decide", "POST", {"token": token, "decision": "allow_once"}, 200)
        assert clicked["opened"] == [] and clicked["shown"][1]["options"]["body"] == "Allowed."
        assert call.result()[1]["ok"] is True
        decided = relay.owner.get("/api/v1/owner/inbox")["decided"][0]
        assert (decided["decidedVia"], decided["decidedChannel"]) == ("action", "push")

        # Clicked again (the token is used): nothing changes, the worker opens the decision page.
        again = pushed_and_clicked(f"{relay.url}/", payload, "deny")
        assert again["posted"][0]["status"] == 404 and again["opened"] == [payload["link"]]

        # A question's options as actions: on a platform showing two, the first and "More…".
        desk = relay.conversation("desk")
        prompt = write(relay, desk.session_id, "!ask Which colour? | red | green | blue")
        payload = browser.decrypt(poll("the question's push", lambda: service.at("/push/phone")[1:])[0])
        assert [a["title"] for a in payload["actions"]] == ["red", "green", "blue"] and payload["more"] is False
        clicked = pushed_and_clicked(f"{relay.url}/", payload, "option:0")
        assert [a["title"] for a in clicked["shown"][0]["options"]["actions"]] == ["red", "More…"]
        assert json.loads(clicked["posted"][0]["body"]) == {"token": payload["token"], "option": 0}
        done = reply_to(relay, desk, prompt)
        assert done["reply"]["text"].endswith("answer: red")
    finally:
        service.server.shutdown()


# What the owner chooses ---------------------------------------------------------------------


def test_channels_carry_links_by_type_unless_told_and_the_owner_chooses_the_kinds(
    relay: Relay, receiver: Receiver, visitor: Page,
) -> None:
    assert channel(relay, "push", type="webpush")["decisions"] is True
    assert channel(relay, "room", type="url", url=f"json://{receiver.host}/room")["decisions"] is False
    assert channel(relay, "phone", type="url", url=f"ntfy://{receiver.host}/topic")["decisions"] is True
    assert channel(relay, "quiet-phone", type="url", url=f"ntfy://{receiver.host}/quiet", decisions=False)["decisions"] is False
    status, answer = relay.owner.request("PUT", "/api/v1/owner/notifications/tab", {"type": "page", "decisions": True})
    assert status == 400 and "decisions is for url and webpush channels" in answer["error"]
    relay.owner.request("DELETE", "/api/v1/owner/notifications/push")  # no browser subscribed: not part of this test
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["notify_decide_kinds"] == [
        kind for kind in defaults.NOTIFY_DECIDE_KINDS if kind != "transfer"]
    status, answer = relay.owner.request("PATCH", "/api/v1/owner/settings", {"notify_decide_kinds": ["questions", "all"]})
    assert status == 400 and "unknown all" in answer["error"]

    ops = relay.conversation("ops", approvals=())
    call = Waiting(ops, "create_session", relay="this", text="hi")
    [(_, room)] = poll("the room's card", lambda: receiver.at("/room"))
    [(headers, phone)] = poll("the phone's card", lambda: topic(receiver, "topic"))
    assert "/decide/" not in room["message"] and f"{relay.url}/inbox" in room["message"]  # a shared room: no link
    link = link_in(phone["message"])
    assert "x-actions" in headers
    # Links already sent die when their channel stops sending them (and live again when it starts).
    channel(relay, "phone", type="url", decisions=False)
    visitor.goto(link)
    expect(visitor.locator("main")).to_contain_text("This link no longer decides anything")
    assert press(relay, {"token": token_of(link), "decision": "allow"}) == dead_answer(relay)
    channel(relay, "phone", type="url", decisions=True)
    relay.settings(notify_decide_kinds=["questions"])  # cards wait for the Inbox
    assert press(relay, {"token": token_of(link), "decision": "allow"}) == dead_answer(relay)
    relay.settings(notify_decide_kinds=list(defaults.NOTIFY_DECIDE_KINDS_DEFAULT))
    assert press(relay, {"token": token_of(link), "decision": "allow"})[0] == 200
    assert call.result()[1]["ok"] is True

    # A card of a kind left to the Inbox is sent with no link and no buttons.
    relay.settings(notify_decide_kinds=["questions"])
    other = relay.conversation("other", approvals=())
    call = Waiting(other, "create_session", relay="this", text="hi")
    [(headers, phone)] = poll("the phone's second card", lambda: topic(receiver, "topic")[1:])
    assert "/decide/" not in phone["message"] and "x-actions" not in headers and "x-click" not in headers
    [card] = relay.owner.get("/api/v1/owner/inbox")["cards"]
    relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "deny"})
    assert call.result()[0] == 403


def test_the_decide_kinds_are_the_card_reasons_and_questions() -> None:
    assert set(defaults.NOTIFY_DECIDE_KINDS) == {*PRIORITY, "questions"}
    assert "transfer" not in defaults.NOTIFY_DECIDE_KINDS_DEFAULT


def test_the_decision_endpoints_are_rate_limited_per_address(relay: Relay) -> None:
    for _ in range(defaults.DECISION_REQUESTS_PER_WINDOW):
        assert requests.get(f"{relay.url}/decide/{FORGED}", timeout=30).status_code == 404
    page = requests.get(f"{relay.url}/decide/{FORGED}", timeout=30)
    assert page.status_code == 429 and 0 < int(page.headers["Retry-After"]) <= defaults.DECISION_REQUEST_WINDOW_SECONDS
    assert "Too many requests to decision links from this address" in page.text
    status, answer = press(relay, {"token": FORGED, "decision": "allow"})
    assert status == 429 and answer["code"] == "REMOTE_RELAY_RATE_LIMITED" and answer["retryAfterSeconds"] > 0
    form = requests.post(f"{relay.url}/decide", data={"token": FORGED, "decision": "allow"}, timeout=30)
    assert form.status_code == 429


def test_the_settings_page_sets_a_channels_decisions_and_what_may_be_decided(
    relay: Relay, receiver: Receiver, chromium: Browser,
) -> None:
    with signed_in_tab(chromium, relay) as tab:
        tab.goto("/settings#notifications")
        section = tab.locator("section.notifications")
        section.get_by_label("Name").fill("hook")
        section.get_by_label("Type").select_option("url")
        section.get_by_label("Notification URL").fill(f"json://{receiver.host}/hook")
        section.get_by_label("Decision links and buttons").select_option("on")
        section.get_by_role("button", name="Save channel").click()
        expect(tab.locator(".flash.ok")).to_have_text('Notification channel "hook" saved.')
        expect(tab.locator("#channel-hook .channel-decisions")).to_have_text("Decision links and buttons: on")
        assert relay.owner.get("/api/v1/owner/notifications/hook")["channel"]["decisions"] is True

        kinds = tab.locator("form", has=tab.get_by_role("button", name="Save what notifications may decide"))
        expect(kinds.locator('input[value="transfer"]')).not_to_be_checked()
        kinds.get_by_label("Questions").uncheck()
        kinds.get_by_role("button", name="Save what notifications may decide").click()
        expect(tab.locator(".flash.ok")).to_have_text("Saved what may be decided from a notification.")
        assert relay.owner.get("/api/v1/owner/settings")["settings"]["notify_decide_kinds"] == [
            kind for kind in defaults.NOTIFY_DECIDE_KINDS_DEFAULT if kind != "questions"]
