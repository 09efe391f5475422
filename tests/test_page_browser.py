"""The owner's page in a real headless Chromium (Playwright): what only a browser shows.

Sign-in, answering a card and seeing the turn finish live, the reply being written
updating without a reload, escaping, CSRF refusal, and an agent's create_session waiting
on an approval card until the owner allows it. Waits are on page conditions, never sleeps.

`OAR_WRITE_SCREENSHOTS=1 python -m pytest tests/test_page_browser.py -k screenshots`
refreshes docs/screenshots/ (the README's pictures).

Layout facts are measured on element boxes at a desktop (1280×800) and a phone (390×844) size:
a session page opens on its messages with its settings folded, a label's words (and the <code>
in them) flow as one text, the fields side by side line up, and a danger button is readable.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from playwright.sync_api import Error as PlaywrightError

from tests.support.browser import signed_in_tab
from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay

SCREENSHOTS = PROJECT / "docs" / "screenshots"
XSS = "<img src=x onerror=alert(1)>"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SIZES = pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["desktop", "phone"])

# Pieces of a label's words (<code>, <strong>) that sit on a line with none of the label's other
# text: the words were broken into separate boxes (as a grid or flex label does to them).
PIECES_ALONE = """() => {
  const alone = [];
  for (const piece of document.querySelectorAll("main label code, main label strong")) {
    const box = piece.getBoundingClientRect();
    const walker = document.createTreeWalker(piece.closest("label"), NodeFilter.SHOW_TEXT);
    let shared = false;
    while (walker.nextNode() && !shared) {
      const node = walker.currentNode;
      if (piece.contains(node) || !node.textContent.trim() || node.parentElement.closest("select, textarea")) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      shared = [...range.getClientRects()].some(r => r.width > 0 && r.top < box.bottom - 2 && r.bottom > box.top + 2);
    }
    if (!shared) alone.push(piece.textContent);
  }
  return alone;
}"""
# Controls of fields side by side (.pair) on one row whose tops differ by more than a pixel.
MISALIGNED = """() => {
  const off = [];
  for (const pair of document.querySelectorAll("main .pair")) {
    const boxes = [...pair.querySelectorAll(":scope > label > input, :scope > label > select")]
      .map(control => [control.name, control.getBoundingClientRect()]);
    for (const [name, box] of boxes) {
      for (const [other, next] of boxes) {
        const sameRow = next.top < box.bottom && next.bottom > box.top;
        if (sameRow && Math.abs(next.top - box.top) > 1) off.push(name + " / " + other);
      }
    }
  }
  return off;
}"""
# Labels whose words are torn into columns: two pieces of text on one line with a gap between
# them wider than a space (the sandbox box's words once stood in three columns).
TORN = """() => [...document.querySelectorAll("main label")].filter(label => {
  const rects = [];
  const walker = document.createTreeWalker(label, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim() || node.parentElement.closest("select, textarea")) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    rects.push(...[...range.getClientRects()].filter(r => r.width > 0));
  }
  const sameLine = (a, b) => Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > Math.min(a.height, b.height) / 2;
  return rects.some(a => {
    const next = rects.filter(b => b !== a && sameLine(a, b) && b.left >= a.right - 1).map(b => b.left);
    return next.length > 0 && Math.min(...next) > a.right + 12;
  });
}).map(label => label.textContent.trim().slice(0, 40))"""


def luminance(rgb: str) -> float:
    channels = [int(part) / 255 for part in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two computed `rgb(…)` colours."""
    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


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


def test_screenshots_of_the_session_page_the_inbox_the_list_and_settings(relay: Relay, tab: Page, tmp_path: Path) -> None:
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
    tab.set_viewport_size({"width": 1100, "height": 820})
    tab.goto("/settings#agents")
    expect(tab.locator("section#agents > h2")).to_be_in_viewport()
    tab.screenshot(path=str(target / "settings.png"))
    for name in ("session", "inbox", "sessions", "settings"):
        assert (target / f"{name}.png").stat().st_size > 10_000, name


@SIZES
def test_a_session_page_opens_on_its_messages_with_its_settings_folded(
    chromium: Browser, relay: Relay, size: dict[str, int]
) -> None:
    release = relay.conversation("Release 2.4: migration plan")
    write(relay, release.session_id, "Review the migration plan in docs/migrate.md and list what is risky.")
    with signed_in_tab(chromium, relay, viewport=size) as tab:
        tab.goto(f"/sessions/{release.session_id}")
        first = tab.locator(".messages .msg").first
        expect(first).to_contain_text("Review the migration plan")
        box = first.bounding_box()
        assert box is not None and box["y"] + box["height"] <= size["height"], box  # above the fold
        settings = tab.locator("details.session-settings")
        may_create = tab.locator("input[name=may_create_sessions]")
        expect(may_create).to_be_hidden()
        settings.locator("summary").click()
        expect(may_create).to_be_visible()
        # The header region is re-rendered when the conversation changes; what the owner opened stays open.
        relay.owner.patch(f"/api/v1/owner/sessions/{release.session_id}", {"title": "Release 2.4: renamed"})
        expect(tab.locator("h1")).to_have_text("Release 2.4: renamed")
        expect(may_create).to_be_visible()
        may_create.check()  # saves at once (data-autosubmit)
        expect(tab.locator(".flash.ok")).to_have_text("Agents in this conversation may now start sessions.")
        assert relay.owner.get(f"/api/v1/owner/sessions/{release.session_id}")["session"]["mayCreateSessions"] is True


@SIZES
def test_settings_labels_read_as_one_text_their_controls_line_up_and_danger_buttons_are_readable(
    chromium: Browser, relay: Relay, size: dict[str, int]
) -> None:
    with signed_in_tab(chromium, relay, viewport=size) as tab:
        tab.goto("/settings")
        expect(tab.locator("nav.toc a")).to_have_count(6)
        for section in ("providers", "agents", "notifications", "relays", "access", "team"):
            expect(tab.locator(f"section.panel#{section} > h2")).to_be_visible()
        assert tab.evaluate(PIECES_ALONE) == []
        assert tab.evaluate(MISALIGNED) == []
        assert tab.evaluate(TORN) == []
        assert tab.evaluate("document.documentElement.scrollWidth") <= size["width"]  # nothing wider than the screen
        button = tab.get_by_role("button", name="Sign out everywhere")
        colours = button.evaluate("b => [getComputedStyle(b).color, getComputedStyle(b).backgroundColor]")
        assert contrast(*colours) >= 4.5, colours
        tab.locator("nav.toc a", has_text="Paired relays").click()
        expect(tab.locator("section#relays > h2")).to_be_in_viewport()


def test_a_new_token_and_its_client_lines_are_copied_and_the_token_revoked_from_its_page(
    chromium: Browser, relay: Relay, desk: Agent
) -> None:
    def grant(context: BrowserContext) -> None:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=relay.url)

    with signed_in_tab(chromium, relay, prepare=grant, on_dialog=lambda dialog: dialog.accept(), viewport=PHONE) as tab:
        tab.goto(f"/sessions/{desk.session_id}")
        tab.get_by_role("link", name="Agent tokens").click()
        tab.get_by_role("button", name="Make a new token").click()
        token = tab.locator("#agent-token").inner_text()
        assert token.startswith("oar_s_")
        copy = tab.locator(".token-once .copyable button")
        copy.click()
        expect(copy).to_have_text("Copied")
        assert tab.evaluate("navigator.clipboard.readText()") == token
        tab.locator("#client-claude").get_by_role("button", name="Copy").click()
        claude = tab.evaluate("navigator.clipboard.readText()")
        assert claude == f'claude mcp add --transport http relay {relay.url}/mcp --header "Authorization: Bearer {token}"'
        minted = Agent(relay.url, token, desk.session_id)
        assert minted.call("list_sessions", relay="this")[0] == 200
        tab.get_by_role("button", name="Revoke this token").click()
        expect(tab.locator(".flash.ok")).to_contain_text("Revoked the token just shown")
        assert tab.locator("#agent-token").count() == 0
        assert minted.call("list_sessions", relay="this")[0] == 401
        assert desk.call("list_sessions", relay="this")[0] == 200


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
    # The other page's live poll, refused now, may be taking it to the sign-in form itself (page.js):
    # a navigation started meanwhile is then aborted. Where it ends is what counts.
    with contextlib.suppress(PlaywrightError):
        other.goto("/settings")
    expect(other.get_by_label("Owner token")).to_be_visible()
    thief.close()
    laptop.close()
