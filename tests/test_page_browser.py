"""The owner's page in a real headless Chromium (Playwright): what only a browser shows.

Sign-in, answering a card and seeing the turn finish live, the reply being written
updating without a reload, escaping, CSRF refusal, and an agent's create_session waiting
on an approval card until the owner allows it. Waits are on page conditions, never sleeps.

`OAR_WRITE_SCREENSHOTS=1 python -m pytest tests/test_page_browser.py -k screenshots`
refreshes docs/screenshots/ (the README's pictures).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import signed_in_tab
from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay

SCREENSHOTS = PROJECT / "docs" / "screenshots"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def tab(chromium: Browser, relay: Relay) -> Iterator[Page]:
    """A fresh browser context (no cookies), one tab, signed in as the owner; dialogs recorded."""
    with signed_in_tab(chromium, relay, viewport={"width": 420, "height": 860}) as opened:
        yield opened


def write(relay: Relay, session_id: str, text: str) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{session_id}/messages", {"text": text})


def test_it_signs_in_and_an_ask_card_is_answered_on_the_session_page_and_the_turn_finishes_live(
    relay: Relay, desk: Agent, tab: Page
) -> None:
    tab.get_by_role("link", name="desk", exact=True).click()
    expect(tab.locator("h1")).to_have_text("desk")
    marker = tab.evaluate("() => (window.stillHere = Math.random())")
    write(relay, desk.session_id, "!ask Which colour? | red | blue")
    card = tab.locator("article.question")
    expect(card).to_contain_text("Which colour?")  # arrived by polling, no reload
    assert tab.evaluate("() => window.stillHere") == marker
    card.get_by_role("button", name="blue").click()
    expect(tab.locator(".flash.ok")).to_have_text("Answered.")
    expect(tab.locator(".messages .msg.reply").last).to_contain_text("answer: blue")
    expect(tab.locator("article.question")).to_have_count(0)
    expect(tab.locator(".inflight .msg")).to_have_count(0)


def test_the_reply_being_written_updates_without_a_reload(relay: Relay, desk: Agent, tab: Page) -> None:
    tab.goto(f"/sessions/{desk.session_id}")
    marker = tab.evaluate("() => (window.stillHere = Math.random())")
    # Long enough (about 5 s) that the page, polling every second, sees it being written.
    write(relay, desk.session_id, "!stream 12 400")
    writing = tab.locator("[data-inflight-text]")
    expect(writing).to_contain_text("chunk 2")
    same_element = writing.element_handle()  # updated in place (textContent), not re-rendered
    tab.wait_for_function("element => element.textContent.includes('chunk 5')", arg=same_element)
    expect(tab.locator(".messages .msg.reply").last).to_contain_text("chunk 12")
    expect(writing).to_have_count(0)
    assert tab.evaluate("() => window.stillHere") == marker


def test_an_agent_written_title_renders_as_text_and_runs_nothing(relay: Relay, desk: Agent, tab: Page) -> None:
    child = desk.ok("create_session", relay="this", title=XSS, text=f"{XSS} <script>alert(2)</script>", wait_seconds=30)
    tab.goto("/")
    expect(tab.locator(".session-list .title", has_text=XSS)).to_have_count(1)
    tab.locator(".session-list .title", has_text=XSS).click()
    expect(tab.locator("h1")).to_have_text(XSS)
    expect(tab.locator(".messages .msg.reply")).to_contain_text("<script>alert(2)</script>")
    assert tab.locator("img").count() == 0 and tab.locator("main script").count() == 0
    assert tab.dialogs == []  # type: ignore[attr-defined]
    assert tab.url.endswith(child["session"])


def test_a_form_posted_without_its_csrf_token_is_refused_and_changes_nothing(relay: Relay, desk: Agent, tab: Page) -> None:
    tab.goto(f"/sessions/{desk.session_id}")
    form = tab.locator("section.write form")
    form.locator("input[name=csrf_token]").evaluate("input => input.remove()")
    form.locator("textarea[name=text]").fill("forged message")
    form.get_by_role("button", name="Send").click()
    expect(tab.locator("h1")).to_have_text("400")
    expect(tab.locator(".error-page")).to_contain_text("Nothing was changed")
    messages = relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["messages"]
    assert all("forged" not in m["text"] for m in messages)


def test_an_agents_create_session_waits_for_the_card_and_completes_on_allow(relay: Relay, tab: Page) -> None:
    lead = relay.conversation("lead", approvals=())
    call = {"action": "create_session", "relay": "this", "title": "Test triage", "text": "Summarise the failing tests"}
    write(relay, lead.session_id, "!relay " + json.dumps(call))
    tab.goto("/inbox")
    card = tab.locator("article.approval")
    expect(card).to_contain_text("This agent wants to start sessions on this relay")  # live, no reload
    expect(card).to_contain_text("Provider: echo")
    expect(tab.locator("nav .count")).to_have_text("1")
    card.get_by_role("button", name="Allow").click()
    expect(tab.locator(".flash.ok")).to_have_text("Allowed.")
    tab.goto(f"/sessions/{lead.session_id}")
    expect(tab.locator(".messages .msg.reply").last).to_contain_text('"ok":true', timeout=30_000)
    expect(tab.locator(".messages .msg.reply").last.locator(".tools")).to_contain_text("🛰️ create_session")
    expect(tab.locator(".messages .msg.reply").last).to_contain_text("echo: Summarise the failing tests")
    assert relay.owner.get(f"/api/v1/owner/sessions/{lead.session_id}")["session"]["approvals"] == ["create_sessions"]


def test_screenshots_of_the_session_page_and_the_inbox(relay: Relay, tab: Page, tmp_path: Path) -> None:
    """Realistic pictures for the README (written to docs/ only when OAR_WRITE_SCREENSHOTS=1)."""
    target = SCREENSHOTS if os.environ.get("OAR_WRITE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    desk = relay.conversation("desk")
    release = relay.conversation("Release 2.4: migration plan")
    write(relay, release.session_id, "Review the migration plan in docs/migrate.md and list what is risky.")
    desk.ok("send", relay="this", session=release.session_id,
            text="Also check that the rollback script drops the new index.", wait_seconds=30)
    desk.ok("subscribe", sessions=[release.session_id])
    desk.ok("schedule", text="Post the nightly summary", every_minutes=1440, title="Nightly summary")
    nudge = {"action": "send", "relay": "this", "session": desk.session_id, "wait_seconds": 0,
             "text": "Migration review done: 2 risks, see the Release 2.4 session."}
    write(relay, release.session_id, "Tell desk when you are done.\n!relay " + json.dumps(nudge))
    write(relay, release.session_id, "!ask Run the migration on staging first? | Yes, staging first | Straight to production")
    tab.set_viewport_size({"width": 760, "height": 1100})
    tab.goto(f"/sessions/{release.session_id}")
    expect(tab.locator("article.question")).to_contain_text("Run the migration on staging first?")
    tab.screenshot(path=str(target / "session.png"), full_page=True)

    lead = relay.conversation("Nightly triage", approvals=())
    call = {"action": "create_session", "relay": "this", "title": "Flaky tests", "text": "Find the flaky tests in tests/"}
    write(relay, lead.session_id, "!relay " + json.dumps(call))
    desk.ok("ask", question="Merge the release branch tonight?", options=["Merge", "Wait for QA"],
            recommendation="Wait for QA", session=release.session_id)
    tab.goto("/inbox")
    expect(tab.locator("article.approval")).to_have_count(1)
    expect(tab.locator("article.question")).to_have_count(2)
    tab.screenshot(path=str(target / "inbox.png"), full_page=True)
    tab.locator("article.approval").get_by_role("button", name="Deny").click()
    expect(tab.locator(".flash.ok")).to_have_text("Denied.")
    tab.goto("/")
    expect(tab.locator(".watch-count")).to_have_text("watching 1 session")
    tab.screenshot(path=str(target / "sessions.png"), full_page=True)
    assert (target / "session.png").stat().st_size > 10_000 and (target / "inbox.png").stat().st_size > 10_000


def test_a_cookie_copied_before_sign_out_opens_nothing_and_sign_out_everywhere_ends_the_rest(
    chromium: Browser, relay: Relay, tab: Page
) -> None:
    copied = tab.context.cookies()
    thief = chromium.new_context(base_url=relay.url)
    thief.add_cookies(copied)  # type: ignore[arg-type]
    stolen = thief.new_page()
    stolen.goto("/settings")
    expect(stolen.locator("h1")).to_have_text("Settings")
    tab.get_by_role("button", name="Sign out").click()
    expect(tab.get_by_label("Owner token")).to_be_visible()
    stolen.goto("/settings")
    expect(stolen.get_by_label("Owner token")).to_be_visible()  # sent back to the sign-in form

    tab.get_by_label("Owner token").fill(relay.config.owner_token or "")
    tab.get_by_role("button", name="Sign in").click()
    laptop = chromium.new_context(base_url=relay.url)
    other = laptop.new_page()
    other.goto("/")
    other.get_by_label("Owner token").fill(relay.config.owner_token or "")
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_role("button", name="Sign out")).to_be_visible()
    tab.goto("/settings")
    tab.get_by_role("button", name="Sign out everywhere").click()
    expect(tab.get_by_label("Owner token")).to_be_visible()
    other.goto("/settings")
    expect(other.get_by_label("Owner token")).to_be_visible()
    thief.close()
    laptop.close()
