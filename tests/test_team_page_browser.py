"""The team runs' page in a real headless Chromium (Playwright): the "Team runs" list, a run's view
(the board by status with dependencies, assignees and claims; messages; artifacts and reviews;
memory), a thought broadcast while the page is open appearing on it, agent text escaped, and the
memory forms' CSRF. The agents act through the official MCP SDK client at /mcp/team.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import signed_in_tab
from tests.support.processes import PROJECT
from tests.support.relays import Relay

XSS = "<img src=x onerror=alert(1)>"
RUN_ID = "2026-05-02-001-page"

Call = Callable[..., Awaitable[dict[str, Any]]]


@asynccontextmanager
async def team_session(relay: Relay, token: str) -> AsyncIterator[Call]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http:
        async with streamable_http_client(f"{relay.url}/mcp/team", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
                    result = await session.call_tool(tool, arguments)
                    text = result.content[0]
                    assert isinstance(text, types.TextContent)
                    body = json.loads(text.text)
                    assert body["success"] is True, body
                    return dict(body)

                yield call


def as_agents(relay: Relay, token: str, steps: Callable[[Call], Awaitable[Any]]) -> Any:
    """The agents' calls, in a thread of their own (Playwright's sync API holds this thread's event loop)."""
    answer: dict[str, Any] = {}

    async def work() -> None:
        async with team_session(relay, token) as call:
            answer["value"] = await steps(call)

    def run() -> None:
        try:
            anyio.run(work)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread, raised there
            answer["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    if "error" in answer:
        raise answer["error"]
    return answer["value"]


@pytest.fixture
def tab(chromium: Browser, relay: Relay) -> Iterator[Page]:
    with signed_in_tab(chromium, relay, viewport={"width": 900, "height": 1000}) as opened:
        yield opened


def test_the_run_view_shows_the_board_and_a_thought_broadcast_while_it_is_open(relay: Relay, tab: Page) -> None:
    lead = relay.conversation("lead")

    async def prepare(call: Call) -> dict[str, str]:
        await call("start_session", agent_id="lead", session_id=RUN_ID)
        design = (await call("create_task", agent_id="lead", title="Design login", priority="high"))["task_id"]
        build = (await call("create_task", agent_id="lead", title=f"Build {XSS}", priority="critical",
                            assignee="fe", depends_on=[design]))["task_id"]
        await call("claim_task", agent_id="ux", task_id=design)
        await call("send_message", agent_id="lead", to="fe", content=f"Careful: {XSS}")
        artifact = (await call("post_artifact", agent_id="ux", name="login-spec", type="figma_spec", content="frames"))
        review = await call("request_review", agent_id="ux", artifact_id=artifact["artifact_id"], reviewer="fe")
        await call("submit_review", agent_id="fe", review_id=review["review_id"], status="approved", comments="LGTM")
        await call("write_memory", agent_id="fe", key="stack", content="React")
        return {"design": design, "build": build}

    ids = as_agents(relay, lead.token, prepare)
    tab.get_by_role("link", name="Team runs").click()
    expect(tab.locator("h1")).to_have_text("Team runs")
    tab.get_by_role("link", name=RUN_ID).click()
    expect(tab.locator("h1")).to_have_text(f"Team run {RUN_ID}")
    marker = tab.evaluate("() => (window.stillHere = Math.random())")

    in_progress = tab.locator('.column[data-status="in_progress"]')
    expect(in_progress.locator(f'[data-task="{ids["design"]}"]')).to_contain_text("claimed by ux")
    todo = tab.locator('.column[data-status="todo"]')
    build = todo.locator(f'[data-task="{ids["build"]}"]')
    expect(build.locator(".title")).to_have_text(f"Build {XSS}")
    expect(build).to_contain_text("→ fe")
    expect(build.locator(".deps")).to_have_text(f"needs {ids['design']}")
    expect(tab.locator(".team-message")).to_contain_text(f"Careful: {XSS}")
    expect(tab.locator(".artifact .review")).to_contain_text("review by fe: approved — LGTM")
    expect(tab.locator(".memory-file summary")).to_have_text("fe.md")

    # While the page is open: a thought, and a change to the board, arrive without a reload.
    async def act(call: Call) -> None:
        await call("broadcast_thinking", agent_id="fe", content=f"About to write the form {XSS}")
        await call("update_task", agent_id="ux", task_id=ids["design"], status="done")

    as_agents(relay, lead.token, act)
    thought = tab.locator(".thought-list .thought").last
    expect(thought).to_have_text(f"fe About to write the form {XSS}")
    expect(tab.locator('.column[data-status="done"]').locator(f'[data-task="{ids["design"]}"]')).to_have_count(1)
    assert tab.evaluate("() => window.stillHere") == marker
    assert tab.locator("main img").count() == 0 and tab.locator("main script").count() == 0
    assert tab.dialogs == []  # type: ignore[attr-defined]
    if os.environ.get("OAR_WRITE_SCREENSHOTS"):
        tab.screenshot(path=str(PROJECT / "docs" / "screenshots" / "team-run.png"), full_page=True)


def test_the_list_shows_a_new_run_live_and_its_forms_need_the_csrf_token(relay: Relay, tab: Page) -> None:
    tab.goto("/team-runs")
    expect(tab.locator(".team-runs")).to_contain_text("No team runs yet")
    marker = tab.evaluate("() => (window.stillHere = Math.random())")
    lead = relay.conversation("lead")

    async def start(call: Call) -> None:
        await call("start_session", agent_id="lead", session_id="2026-05-02-002-list")
        await call("create_task", agent_id="lead", title="One", priority="low")

    as_agents(relay, lead.token, start)
    row = tab.locator('[data-run="2026-05-02-002-list"]')
    expect(row).to_contain_text("started by lead · lead")
    expect(row).to_contain_text("1 todo")
    assert tab.evaluate("() => window.stillHere") == marker
    tab.locator("#export-folder").fill("/etc")
    tab.get_by_role("button", name="Export memory").click()
    expect(tab.locator(".flash.error")).to_contain_text('may not use folder "/etc"')
    forged = tab.request.post(f"{relay.url}/team-runs/memory/export", form={"folder": "/tmp"})
    assert forged.status == 400 and "CSRF" in forged.text()
    live = tab.request.get(f"{relay.url}/live/team-runs/2026-05-02-099")
    assert live.status == 404 and live.json()["ok"] is False
