"""The open page's notifications (docs/notifications.md#the-open-page) in a real headless
Chromium: the Inbox count in the nav and the title, a browser `Notification` (the permission
granted) when a question waits, and the Settings page's channel forms (CSRF-protected).
Waits are on page conditions, never sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.browser import signed_in_tab
from tests.support.clients import Agent, poll
from tests.support.relays import Relay

# Records every Notification the page creates (the real constructor still runs).
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.shownNotifications = [];
  class Recorded extends Real {
    constructor(title, options) {
      super(title, options);
      window.shownNotifications.push({ title, body: options && options.body, tag: options && options.tag });
    }
  }
  window.Notification = Recorded;
})();
"""


@pytest.fixture
def tab(chromium: Browser, relay: Relay) -> Iterator[Page]:
    """A signed-in tab whose browser allows notifications from the relay's page."""

    def allow_notifications(context: BrowserContext) -> None:
        context.grant_permissions(["notifications"], origin=relay.url)
        context.add_init_script(RECORD_NOTIFICATIONS)

    with signed_in_tab(chromium, relay, prepare=allow_notifications, on_dialog=lambda dialog: dialog.accept()) as opened:
        yield opened


def shown(tab: Page) -> list[dict[str, Any]]:
    return tab.evaluate("() => window.shownNotifications")


def test_it_shows_a_browser_notification_and_the_inbox_count_when_a_question_waits(
    relay: Relay, desk: Agent, tab: Page,
) -> None:
    relay.owner.request("PUT", "/api/v1/owner/notifications/this-browser", {"type": "page"})
    tab.goto("/settings")
    expect(tab.locator("[data-notify-permission-state]")).to_have_text("This browser shows notifications.")
    assert shown(tab) == [] and not tab.title().startswith("(")

    desk.ok("ask", question="Deploy <b>tonight</b>?")
    tab.wait_for_function("() => window.shownNotifications.length > 0")
    [notification] = shown(tab)
    assert notification["title"] == "A question waits for your answer · desk"
    assert notification["body"] == "Deploy <b>tonight</b>?"  # text, never markup
    expect(tab).to_have_title("(1) Settings · " + relay.name)
    expect(tab.locator('nav a[href$="/inbox"] .count')).to_have_text("1")

    # Another page of the same tab goes on from where the last one was: nothing shown twice.
    tab.goto("/")
    expect(tab).to_have_title("(1) Sessions · " + relay.name)
    relay.conversation("docs").ok("ask", question="And the docs?")  # another session: not merged with the first
    expect(tab.locator('nav a[href$="/inbox"] .count')).to_have_text("2")
    tab.wait_for_function("() => window.shownNotifications.length > 0")
    assert [n["body"] for n in shown(tab)] == ["And the docs?"]


def test_the_settings_page_adds_tests_and_deletes_a_channel_and_sets_quiet_hours(relay: Relay, tab: Page) -> None:
    tab.goto("/settings#notifications")
    section = tab.locator("section.notifications")
    section.get_by_label("Name").fill("hook")
    section.get_by_label("Type").select_option("url")
    section.get_by_label("Notification URL").fill("json://127.0.0.1:9/secret-path-token")
    section.get_by_role("button", name="Save channel").click()
    expect(tab.locator(".flash.ok")).to_have_text('Notification channel "hook" saved.')
    channel = tab.locator("#channel-hook")
    expect(channel).to_contain_text("card_waiting, question_waiting, provider_trouble, relay_lost")
    assert "secret-path-token" not in tab.content()

    # Nothing listens on port 9: the test fails there, and the channel shows why.
    channel.get_by_role("button", name="Send a test").click()
    expect(tab.locator(".flash.ok")).to_have_text('A test notification is on its way through "hook".')
    error = poll("the channel's error", lambda: relay.owner.get("/api/v1/owner/notifications/hook")["channel"]["lastError"])
    tab.reload()
    expect(tab.locator("#channel-hook .channel-error")).to_contain_text(error)
    assert "secret-path-token" not in error

    section.get_by_label("Name").fill("hook")
    section.get_by_label("Type").select_option("url")
    section.get_by_label("Notification URL").fill("http://not-a-service")
    section.get_by_role("button", name="Save channel").click()
    expect(tab.locator(".flashes .flash.error")).to_contain_text("is not a notification URL")

    quiet = tab.locator("section.notifications form", has=tab.get_by_role("button", name="Save quiet hours"))
    quiet.get_by_label("From (HH:MM)").fill("22:00")
    quiet.get_by_label("To (HH:MM)").fill("07:00")
    quiet.get_by_label("Time zone").fill("Berlin")
    quiet.get_by_role("button", name="Save quiet hours").click()
    expect(tab.locator(".flashes .flash.error")).to_contain_text('tz "Berlin" is not an IANA time zone')
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["notify_quiet_hours"] is None
    quiet = tab.locator("section.notifications form", has=tab.get_by_role("button", name="Save quiet hours"))
    quiet.get_by_label("Time zone").fill("Europe/Berlin")
    quiet.get_by_label("From (HH:MM)").fill("22:00")
    quiet.get_by_label("To (HH:MM)").fill("07:00")
    quiet.get_by_role("button", name="Save quiet hours").click()
    expect(tab.locator(".flash.ok")).to_have_text("Notification quiet hours saved.")
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["notify_quiet_hours"] == {
        "from": "22:00", "to": "07:00", "tz": "Europe/Berlin",
    }

    # A form without the page's CSRF token is refused and changes nothing.
    refused = tab.request.post(f"{relay.url}/settings/notifications/hook/delete", form={})
    assert refused.status == 400 and "CSRF" in refused.text()
    assert relay.owner.get("/api/v1/owner/notifications/hook")["channel"]["name"] == "hook"

    tab.locator("#channel-hook").get_by_role("button", name="Delete").click()
    expect(tab.locator(".flash.ok")).to_have_text('Notification channel "hook" deleted.')
    assert relay.owner.get("/api/v1/owner/notifications")["channels"] == []


def test_the_settings_page_offers_web_push_and_removes_a_browser(relay: Relay, tab: Page) -> None:
    worker = tab.request.get(f"{relay.url}/service-worker.js")
    assert worker.status == 200 and worker.headers["content-type"].startswith("text/javascript")
    assert worker.headers["service-worker-allowed"] == "/" and 'addEventListener("push"' in worker.text()
    point = "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM"
    relay.owner.request("POST", "/api/v1/owner/push-subscriptions", {
        "endpoint": "https://push.example.com/wpush/v2/secret-capability", "label": "Phone",
        "keys": {"p256dh": point, "auth": "tBHItJI5svbpez7KI4CCXg"},
    })
    tab.goto("/settings#web-push")
    form = tab.locator("form[data-push-form]")
    expect(form.get_by_role("button", name="Web Push on this browser")).to_be_visible()
    assert form.get_attribute("data-push-key") == relay.owner.get("/api/v1/owner/push-subscriptions")["publicKey"]
    browser = tab.locator("li.push-browser")
    expect(browser).to_contain_text("Phone")
    expect(browser).to_contain_text("push.example.com")
    assert "secret-capability" not in tab.content()
    browser.get_by_role("button", name="Remove").click()
    expect(tab.locator(".flash.ok")).to_have_text("The browser no longer receives Web Push notifications.")
    assert relay.owner.get("/api/v1/owner/push-subscriptions")["subscriptions"] == []
