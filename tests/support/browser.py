"""The owner's page in headless Chromium: Debian's `chromium`, driven by Playwright (which
cannot download browsers of its own here), and a tab signed in as the owner."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, expect, sync_playwright

from tests.support.relays import Relay

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no Chromium on this machine")
# Two shared cores: a turn may take a few seconds to show.
TIMEOUT_MS = 20_000


@contextmanager
def launched() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def signed_in_tab(
    browser: Browser, relay: Relay, *, prepare: Callable[[BrowserContext], None] | None = None,
    on_dialog: Callable[[Dialog], Any] | None = None, **options: Any,
) -> Iterator[Page]:
    """A fresh context (no cookies) with one tab, signed in as the owner. Dialogs are recorded in
    `tab.dialogs` and dismissed, unless `on_dialog` answers them; `prepare` sets up the context
    (permissions, init scripts) before the tab opens."""
    context = browser.new_context(base_url=relay.url, **options)
    if prepare is not None:
        prepare(context)
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    tab = context.new_page()
    tab.dialogs = []  # type: ignore[attr-defined]

    def record(dialog: Dialog) -> None:
        tab.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.dismiss()

    tab.on("dialog", on_dialog or record)
    tab.goto("/")
    tab.get_by_label("Owner token").fill(relay.config.owner_token or "")
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.get_by_role("button", name="Sign out")).to_be_visible()
    try:
        yield tab
    finally:
        context.close()
