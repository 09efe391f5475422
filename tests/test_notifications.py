"""Notifications to the owner (docs/notifications.md): channels in the owner API, a JSON webhook
and an ntfy endpoint on loopback (spoken to through Apprise), merging, retries, quiet hours,
cards answered before sending, and a flushed Redis.

One relay for the module (its own Redis, web in this process, workers and clock), with a short
merge window and short retries; the receivers are real HTTP servers on loopback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oar.core.db import database
from oar.core.models import TokenUsage
from oar.notifications import transports
from oar.notifications.quiet import owner_quiet_hours
from oar.notifications.sending import hold_end
from tests.support.clients import poll
from tests.support.push import BrowserKeys, PushService, unb64url
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay
from tests.support.servers import serve_json_posts
from tests.support.snapshots import reset_database

pytestmark = pytest.mark.stack

# A send waits up to 45 s on a service: longer than any wait of these tests, so that one hanging
# service holding up another channel would fail them.
TIMES = {**FAST_TIMES, "NOTIFY_MERGE_SECONDS": "3", "NOTIFY_RETRY_SECONDS": "0.3", "NOTIFY_SEND_TIMEOUT_SECONDS": "45"}
SECRET = "s3cr3t-hook-token"


class Receiver:
    """A loopback HTTP server that records what it is sent; `/fail<N>/…` paths answer 500 the
    first N times (per path); `/hang/…` paths answer only once `release` is set."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.hanging: list[str] = []
        self.release = threading.Event()
        self.failures: dict[str, int] = {}
        self.lock = threading.Lock()
        self.server = serve_json_posts(lambda path, _headers, body: self.answer(path, body))

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"

    def answer(self, path: str, body: dict[str, Any]) -> int:
        if path.startswith("/hang/"):
            self.hanging.append(path)
            self.release.wait(60)
        with self.lock:
            if path.startswith("/fail"):
                allowed = int(path.split("/")[1].removeprefix("fail"))
                self.failures[path] = self.failures.get(path, 0) + 1
                if self.failures[path] <= allowed:
                    return 500
            self.received.append((path, body))
        return 200

    def at(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for seen, body in self.received if seen == path]

    def clear(self) -> None:
        with self.lock:
            self.received.clear()
            self.failures.clear()
            self.hanging.clear()
            self.release.clear()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.release.set()
    running.server.shutdown()


@pytest.fixture(scope="module")
def notifying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    with own_relay(tmp_path_factory.mktemp("notify"), TIMES, clock=True) as stack:
        yield stack


@pytest.fixture
def relay(notifying: RelayStack, receiver: Receiver) -> Relay:
    assert notifying.relay is not None
    reset_database()
    receiver.clear()
    notifying.relay.owner.open_for_agents()
    return notifying.relay


def channel(relay: Relay, name: str, **body: Any) -> dict[str, Any]:
    status, answer = relay.owner.request("PUT", f"/api/v1/owner/notifications/{name}", body)
    assert status == 200, answer
    return answer["channel"]


def read(relay: Relay, name: str) -> dict[str, Any]:
    return relay.owner.get(f"/api/v1/owner/notifications/{name}")


# Channels in the owner API ------------------------------------------------------------------


@pytest.mark.parametrize(("body", "says"), [
    ({"type": "url", "url": "json://127.0.0.1:9/hook", "kinds": ["card_waiting", "everything"]}, "unknown kinds everything"),
    ({"type": "url", "url": f"nonsense-{SECRET}"}, "is not a notification URL"),
    ({"type": "url", "url": f"http://{SECRET}"}, "is not a notification URL"),
    ({"type": "url", "url": "json://"}, "is not a notification URL"),
    ({"type": "url", "url": "json://127.0.0.1/" + "x" * 2100}, "the limit is 2,000"),
    ({"type": "url"}, "needs url"),
    ({"type": "page", "url": "json://127.0.0.1:9/hook"}, "url is for url channels only"),
    ({"type": "webpush", "url": "json://127.0.0.1:9/hook"}, "url is for url channels only"),
    ({"type": "sms"}, "type must be"),
    ({"type": "url", "url": "json://127.0.0.1:9/hook", "colour": "red"}, "does not take: colour"),
])
def test_it_refuses_a_bad_channel_and_stores_nothing(relay: Relay, body: dict[str, Any], says: str) -> None:
    status, answer = relay.owner.request("PUT", "/api/v1/owner/notifications/phone", body)
    assert status == 400 and answer["code"] == "REMOTE_RELAY_INVALID_INPUT", answer
    assert says in answer["error"] and "Nothing was changed." in answer["error"]
    assert SECRET not in json.dumps(answer)
    assert relay.owner.get("/api/v1/owner/notifications")["channels"] == []


def test_it_refuses_a_bad_name_and_an_unknown_channel(relay: Relay) -> None:
    status, answer = relay.owner.request("PUT", "/api/v1/owner/notifications/-phone", {"type": "page"})
    assert status == 400 and "Channel name" in answer["error"]
    for method, path in (("GET", "phone"), ("DELETE", "phone"), ("POST", "phone/test")):
        status, answer = relay.owner.request(method, f"/api/v1/owner/notifications/{path}")
        assert status == 404 and answer["code"] == "REMOTE_RELAY_NOT_FOUND", (method, path, answer)


def test_it_keeps_the_url_write_only_and_the_test_button_sends(relay: Relay, receiver: Receiver) -> None:
    shown = channel(relay, "hook", type="url", url=f"json://{receiver.host}/{SECRET}")
    assert shown["urlSet"] is True and shown["service"] == "json" and "url" not in shown
    assert shown["kinds"] == ["card_waiting", "question_waiting", "provider_trouble", "relay_lost"]  # reply_ready off
    # A PUT without url keeps the stored one (the owner never sees it to send it back).
    channel(relay, "hook", type="url", kinds=["question_waiting"])
    listed = relay.owner.get("/api/v1/owner/notifications")
    assert SECRET not in json.dumps(listed) and SECRET not in json.dumps(read(relay, "hook"))
    status, answer = relay.owner.request("POST", "/api/v1/owner/notifications/hook/test")
    assert status == 200 and answer["queued"] is True
    [sent] = poll("the test notification", lambda: receiver.at(f"/{SECRET}"))
    assert sent["title"] == "Test notification" and 'channel "hook"' in sent["message"]
    assert f"{relay.url}/settings#notifications" in sent["message"]
    # The receiver records the post before it answers; the relay marks the send once answered.
    poll("the send recorded", lambda: read(relay, "hook")["channel"]["lastSentAt"] is not None)
    status, answer = relay.owner.request("DELETE", "/api/v1/owner/notifications/hook")
    assert status == 200 and answer["deleted"] is True
    assert relay.owner.get("/api/v1/owner/notifications")["channels"] == []


# What the owner hears about ----------------------------------------------------------------


def test_it_tells_a_json_webhook_and_an_ntfy_endpoint_of_a_question_and_a_card(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/hook")
    channel(relay, "ntfy", type="url", url=f"ntfy://{receiver.host}/relay-topic", kinds=["question_waiting"])
    desk = relay.conversation("Release desk", approvals=())
    long_question = "Ship the migration tonight? " + "Because " * 100
    asked = desk.ok("ask", question=long_question)["question_id"]

    [hooked] = poll("the webhook's question", lambda: receiver.at("/hook"))
    assert hooked["title"] == "A question waits for your answer · Release desk"
    assert hooked["message"].startswith("Ship the migration tonight?") and f"{relay.url}/inbox" in hooked["message"]
    assert len(hooked["message"].split("\n")[0]) <= 140  # a short excerpt, never the whole text
    [pushed] = poll("ntfy's question", lambda: receiver.at("/"))
    assert pushed["topic"] == "relay-topic" and pushed["title"] == hooked["title"]
    relay.owner.post(f"/api/v1/owner/questions/{asked}", {"dismiss": True})

    # An approval card (a write call the owner must allow) reaches the webhook while it waits,
    # and not ntfy (which receives questions only).
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(result=desk.call("create_session", relay="this", text="hi")))
    call.start()
    try:
        carded = poll("the card's notification", lambda: [b for b in receiver.at("/hook") if "card" in b["title"]])
        assert carded[0]["title"] == "An approval card waits · Release desk"
        assert "start sessions" in carded[0]["message"] and f"{relay.url}/inbox" in carded[0]["message"]
    finally:
        card = poll("the card", lambda: relay.owner.get("/api/v1/owner/inbox")["cards"])[0]
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
        call.join(60)
    assert answer["result"][0] == 200
    assert len(receiver.at("/")) == 1


def test_it_tells_a_ready_reply_only_when_asked_and_only_of_the_owners_turns(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "replies", type="url", url=f"json://{receiver.host}/replies", kinds=["reply_ready"])
    channel(relay, "default", type="url", url=f"json://{receiver.host}/default")
    desk = relay.conversation("desk")
    other = relay.conversation("other")
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "hello there"})
    [ready] = poll("the reply's notification", lambda: receiver.at("/replies"))
    assert ready["title"] == "A reply is ready · desk" and "echo: hello there" in ready["message"]
    assert f"{relay.url}/sessions/{desk.session_id}" in ready["message"]

    # An agent's prompt into the conversation: its reply is the agent's, not the owner's to hear of.
    other.ok("send", relay="this", session=desk.session_id, text="from another agent", wait_seconds=30)
    # The test button goes through the same queue after it: once it arrived, the reply was looked at.
    relay.owner.post("/api/v1/owner/notifications/replies/test")
    poll("the test after the agent's reply", lambda: [b for b in receiver.at("/replies") if b["title"] == "Test notification"])
    assert len(receiver.at("/replies")) == 2
    assert receiver.at("/default") == []  # reply_ready is off by default


def test_it_merges_notifications_of_one_kind_and_session_within_the_window(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/merge")
    desk = relay.conversation("desk")
    desk.ok("ask", question="First?")
    poll("the first question", lambda: receiver.at("/merge"))
    desk.ok("ask", question="Second?")
    desk.ok("ask", question="Third?")
    merged = poll("the merged questions", lambda: receiver.at("/merge")[1:])
    assert [body["title"] for body in receiver.at("/merge")] == [
        "A question waits for your answer · desk", "2 questions wait for your answer · desk",
    ]
    assert merged[0]["message"].startswith("Third?")
    recent = poll("both rows marked sent", lambda: (r := read(relay, "hook")["recent"]) and all(x["status"] == "sent" for x in r) and r)
    assert [(row["status"], row["count"]) for row in recent] == [("sent", 2), ("sent", 1)]


def test_it_retries_a_failing_receiver_and_sends_once(relay: Relay, receiver: Receiver, notifying: RelayStack) -> None:
    channel(relay, "flaky", type="url", url=f"json://{receiver.host}/fail2/{SECRET}")
    channel(relay, "down", type="url", url=f"json://{receiver.host}/fail99/{SECRET}")
    desk = relay.conversation("desk")
    desk.ok("ask", question="Still there?")
    [sent] = poll("the notification after two failures", lambda: receiver.at(f"/fail2/{SECRET}"), seconds=60)
    assert sent["message"].startswith("Still there?")
    flaky = poll("the sent row", lambda: (seen := read(relay, "flaky"))["recent"][0]["status"] == "sent" and seen)
    assert flaky["channel"]["lastError"] is None and [(r["status"], r["attempts"]) for r in flaky["recent"]] == [("sent", 3)]
    # The channel that keeps failing shows its last error (never its URL), and held up nobody.
    down = poll("the failing channel's error", lambda: read(relay, "down")["channel"]["lastError"])
    assert "500" in down and SECRET not in down
    assert receiver.failures[f"/fail2/{SECRET}"] == 3 and len(receiver.at(f"/fail2/{SECRET}")) == 1
    logs = notifying.log("worker", tail=200_000) + notifying.log("clock", tail=200_000)
    assert "not sent (attempt 1)" in logs and SECRET not in logs  # the failures are logged, the URL never


def test_a_channel_whose_service_hangs_holds_up_no_other_channel(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "slow", type="url", url=f"json://{receiver.host}/hang/slow")
    channel(relay, "fast", type="url", url=f"json://{receiver.host}/fast")
    try:
        relay.conversation("desk").ok("ask", question="Who is first?")
        poll("the fast channel's notification", lambda: receiver.at("/fast"))
        assert receiver.hanging == ["/hang/slow"] and receiver.at("/hang/slow") == []  # still waiting on its service
    finally:
        receiver.release.set()
    poll("the slow channel's notification", lambda: receiver.at("/hang/slow"))


def test_it_drops_a_card_or_question_answered_before_sending_and_survives_a_flushed_redis(
    relay: Relay, receiver: Receiver, notifying: RelayStack,
) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/later")
    desk = relay.conversation("desk")
    notifying.stop("worker")  # nothing is sent; the clock still writes the outbox
    try:
        answered = desk.ok("ask", question="Answered before it went out?")["question_id"]
        desk.ok("ask", question="Still waiting?")  # merged with the first into one row
        poll("the outbox row", lambda: [r for r in read(relay, "hook")["recent"] if r["count"] == 2])
        relay.owner.post(f"/api/v1/owner/questions/{answered}", {"dismiss": True})
        other = relay.conversation("other")
        gone = other.ok("ask", question="Answered too?")["question_id"]
        poll("the second outbox row", lambda: len(read(relay, "hook")["recent"]) == 2)
        relay.owner.post(f"/api/v1/owner/questions/{gone}", {"dismiss": True})
        # A card (its call waits in a web thread) denied before its notification went out.
        asking = relay.conversation("asking", approvals=())
        call = threading.Thread(target=lambda: asking.call("create_session", relay="this", text="hi"))
        call.start()
        poll("the card's outbox row", lambda: len(read(relay, "hook")["recent"]) == 3)
        card = relay.owner.get("/api/v1/owner/inbox")["cards"][0]
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "deny"})
        call.join(60)
        assert notifying.redis_server is not None
        notifying.redis_server.flushall()  # the jobs the pokes enqueued are gone
    finally:
        notifying.start_worker()
    [sent] = poll("the row still to send", lambda: receiver.at("/later"), seconds=60)
    assert sent["title"] == "2 questions wait for your answer · desk"
    settled = ("sent", "dropped", "failed")
    rows = poll("every row settled", lambda: (r := read(relay, "hook")["recent"]) and all(x["status"] in settled for x in r) and r)
    assert sorted((row["kind"], row["status"], row["error"]) for row in rows) == [
        ("card_waiting", "dropped", "answered before it was sent"),
        ("question_waiting", "dropped", "answered before it was sent"), ("question_waiting", "sent", None),
    ]
    assert len(receiver.at("/later")) == 1


def test_it_tells_of_a_provider_at_its_cap_once_and_of_a_failed_turn(relay: Relay, receiver: Receiver) -> None:
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/providers", kinds=["provider_trouble"])
    relay.owner.request("PUT", "/api/v1/owner/providers/metered", {
        "kind": "chat", "base_url": "http://127.0.0.1:9/v1", "models": ["m1"], "monthly_token_cap": 100,
    })
    with database.connection_context():
        TokenUsage.create(provider="metered", model="m1", input_tokens=80, output_tokens=40)
    [capped] = poll("the cap's notification", lambda: receiver.at("/providers"))
    assert capped["title"] == "A provider needs attention"
    assert 'Provider "metered" reached its monthly cap of 100 tokens' in capped["message"]
    assert f"{relay.url}/settings#providers" in capped["message"]

    # A turn that fails (its provider answers nothing on port 9) is told with its error's start.
    failing = relay.conversation("Failing", provider="metered")
    relay.owner.post(f"/api/v1/owner/sessions/{failing.session_id}/messages", {"text": "hello"})
    failed = poll("the failed turn's notification", lambda: receiver.at("/providers")[1:], seconds=60)
    assert failed[0]["title"] == "A provider needs attention · Failing"
    assert failed[0]["message"].startswith('A turn failed (provider "metered")')
    assert len(receiver.at("/providers")) == 2  # the cap once, however often the clock looks


# Web Push ------------------------------------------------------------------------------------


def test_it_pushes_to_a_browser_encrypted_for_its_keys_and_removes_a_gone_one(relay: Relay) -> None:
    service = PushService()
    try:
        browser = BrowserKeys()
        first = relay.owner.get("/api/v1/owner/push-subscriptions")
        assert first["subscriptions"] == [] and first["publicKey"] == relay.owner.get("/api/v1/owner/push-subscriptions")["publicKey"]
        status, added = relay.owner.request("POST", "/api/v1/owner/push-subscriptions", {
            "endpoint": f"{service.origin}/push/phone-123", "keys": browser.keys(), "label": "phone"})
        assert status == 201 and added["subscription"]["pushService"] == "127.0.0.1", added
        assert "phone-123" not in json.dumps(relay.owner.get("/api/v1/owner/push-subscriptions"))
        relay.owner.request("POST", "/api/v1/owner/push-subscriptions", {
            "endpoint": f"{service.origin}/gone/old-laptop", "keys": BrowserKeys().keys()})
        desktop = BrowserKeys()
        relay.owner.request("POST", "/api/v1/owner/push-subscriptions", {
            "endpoint": f"{service.origin}/flaky/desktop", "keys": desktop.keys()})
        channel(relay, "push", type="webpush")

        relay.conversation("desk").ok("ask", question="Push me?")
        pushed = poll("the push", lambda: [p for p in service.pushed if p[0] == "/push/phone-123"])
        _, headers, body = pushed[0]
        assert headers["content-encoding"] == "aes128gcm" and b"Push me?" not in body
        shown = browser.decrypt(body)
        # A Web Push channel carries a decision link (docs/notifications.md#deciding-from-a-notification):
        # a question without options is answered on its page, which the notification opens.
        token = shown.pop("token")
        assert shown == {"title": "A question waits for your answer · desk", "body": "Push me?",
                         "link": f"{relay.url}/decide/{token}", "actions": [], "more": False}
        # Signed with the relay's VAPID key, for this push service's origin.
        vapid = dict(part.strip().split("=", 1) for part in headers["authorization"].removeprefix("vapid ").split(","))
        assert vapid["k"] == first["publicKey"]
        claims = json.loads(unb64url(vapid["t"].split(".")[1]))
        assert claims["aud"] == service.origin

        # The push service said 410 for one: it is removed. Another failed once: the retry pushes
        # to it alone, and the phone that had it already gets it once.
        poll("the gone subscription removed", lambda: len(relay.owner.get("/api/v1/owner/push-subscriptions")["subscriptions"]) == 2)
        rows = poll("the sent row", lambda: [r for r in read(relay, "push")["recent"] if r["status"] == "sent"])
        assert rows[0]["attempts"] == 2 and len([p for p in service.pushed if p[0] == "/push/phone-123"]) == 1
        retried = [body for path, _, body in service.pushed if path == "/flaky/desktop"]
        assert len(retried) == 2 and desktop.decrypt(retried[1])["body"] == "Push me?"
    finally:
        service.server.shutdown()


@pytest.mark.parametrize(("body", "says"), [
    ({"endpoint": "http://push.example.com/x", "keys": {"p256dh": "AAAA", "auth": "AAAA"}}, "https://"),
    ({"endpoint": "https://push.example.com/" + "x" * 2100, "keys": {}}, "the limit is 2,000"),
    ({"endpoint": "https://push.example.com/x"}, "needs keys"),
    ({"endpoint": "https://push.example.com/x", "keys": {"p256dh": "not-a-key", "auth": "AAAAAAAAAAAAAAAAAAAAAA"}}, "P-256 public key"),
    ({"endpoint": "https://push.example.com/x", "keys": {"p256dh": BrowserKeys().keys()["p256dh"], "auth": "AAAA"}}, "keys.auth 16"),
    ({"endpoint": "https://push.example.com/x", "keys": {**BrowserKeys().keys(), "extra": "1"}}, "keys must be"),
    ({"endpoint": "https://push.example.com/x", "keys": BrowserKeys().keys(), "colour": "red"}, "does not take: colour"),
])
def test_it_refuses_a_bad_push_subscription_and_stores_nothing(relay: Relay, body: dict[str, Any], says: str) -> None:
    status, answer = relay.owner.request("POST", "/api/v1/owner/push-subscriptions", body)
    assert status == 400 and says in answer["error"] and "Nothing was changed." in answer["error"], answer
    assert relay.owner.get("/api/v1/owner/push-subscriptions")["subscriptions"] == []


# Quiet hours -----------------------------------------------------------------------------------


def test_it_checks_the_owners_quiet_hours_and_stores_nothing_bad(relay: Relay) -> None:
    for bad, says in (({"from": "22:00", "to": "07:00", "tz": "Berlin"}, 'tz "Berlin" is not an IANA time zone'),
                      ({"from": "25:00", "to": "07:00", "tz": "UTC"}, "times of day"),
                      ({"from": "22:00", "tz": "UTC"}, "needs from, to and tz"),
                      ("at night", "must be")):
        status, answer = relay.owner.request("PATCH", "/api/v1/owner/settings", {"notify_quiet_hours": bad})
        assert status == 400 and says in answer["error"], answer
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["notify_quiet_hours"] is None
    stored = relay.settings(notify_quiet_hours={"from": " 22:00", "to": "07:00", "tz": "Europe/Berlin"})
    assert stored["notify_quiet_hours"] == {"from": "22:00", "to": "07:00", "tz": "Europe/Berlin"}
    assert relay.settings(notify_quiet_hours=None)["notify_quiet_hours"] is None


def test_it_holds_a_reply_inside_the_owners_quiet_hours_and_sends_a_question_at_once(relay: Relay, receiver: Receiver) -> None:
    now = datetime.now(UTC)
    window = {"from": f"{now - timedelta(hours=1):%H:%M}", "to": f"{now + timedelta(hours=1):%H:%M}", "tz": "UTC"}
    relay.settings(notify_quiet_hours=window)
    channel(relay, "hook", type="url", url=f"json://{receiver.host}/quiet", kinds=["reply_ready", "question_waiting"])
    desk = relay.conversation("desk")
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "hello"})
    end = f"{now + timedelta(hours=1):%Y-%m-%dT%H:%M}:00"
    held = poll("the reply held to the window's end", lambda: [
        r for r in read(relay, "hook")["recent"] if r["kind"] == "reply_ready" and r["dueAt"].startswith(end)])
    assert held[0]["status"] == "pending" and held[0]["attempts"] == 0 and held[0]["sentAt"] is None
    desk.ok("ask", question="Now?")
    [sent] = poll("the question, inside the quiet hours", lambda: receiver.at("/quiet"))
    assert sent["message"].startswith("Now?")
    assert [r["status"] for r in read(relay, "hook")["recent"] if r["kind"] == "reply_ready"] == ["pending"]


BERLIN_NIGHTS = {"notify_quiet_hours": {"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=None)  # naive UTC, as stored


def test_it_holds_all_but_cards_and_questions_until_the_quiet_hours_end_on_named_dates() -> None:
    # 2026-03-29: Berlin's clocks jump from 02:00 to 03:00; 06:00 CEST is 04:00 UTC.
    night = at("2026-03-29T00:30:00")  # 01:30 CET, inside
    assert hold_end("reply_ready", BERLIN_NIGHTS, night) == at("2026-03-29T04:00:00")
    assert hold_end("provider_trouble", BERLIN_NIGHTS, night) == at("2026-03-29T04:00:00")
    assert hold_end("card_waiting", BERLIN_NIGHTS, night) is None
    assert hold_end("question_waiting", BERLIN_NIGHTS, night) is None
    everything = {**BERLIN_NIGHTS, "notify_quiet_hours_hold_all": True}
    assert hold_end("card_waiting", everything, night) == at("2026-03-29T04:00:00")
    assert hold_end("test", everything, night) is None  # a test button is never held
    # 2026-10-25: the clocks go back at 03:00 CEST; 06:00 CET is 05:00 UTC.
    assert hold_end("reply_ready", BERLIN_NIGHTS, at("2026-10-25T03:00:00")) == at("2026-10-25T05:00:00")
    assert hold_end("reply_ready", BERLIN_NIGHTS, at("2026-10-25T05:00:00")) is None  # 06:00 CET: over
    assert hold_end("reply_ready", BERLIN_NIGHTS, at("2026-10-25T12:00:00")) is None
    assert hold_end("reply_ready", {}, night) is None
    assert owner_quiet_hours({"notify_quiet_hours": {"from": "23:00", "to": "06:00", "tz": "Nowhere/City"}}) is None


# The URL's secrets -------------------------------------------------------------------------------


def test_it_leaves_every_part_of_the_url_but_service_and_host_out_of_an_error() -> None:
    url = f"json://user:pa55word@127.0.0.1:9/{SECRET}/x?token=qwerty123"
    message = (f"Failed to reach {url}; HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
               f"/{SECRET}/x?token=qwerty123 (pa55word)")
    shown = transports.hidden(message, url)
    for secret in (SECRET, "qwerty123", "pa55word", "user:"):
        assert secret not in shown
    assert "127.0.0.1" in shown
    assert transports.service_of(url) == "json" and transports.url_is_valid(url)
    assert not transports.url_is_valid("json://has space/x") and not transports.url_is_valid("")
