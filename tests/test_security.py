"""The security suite: credentials on every route, CSRF on every form, agent text that never runs,
and tokens compared in constant time.

- A walk over the Flask URL map: every route but the few listed as public needs its credential.
  The JSON routes refuse no token, a wrong token and the other side's token (an agent's on the
  owner's routes, the owner's on an agent's) with 401/403 in the docs/errors.md shape; the page
  refuses a visitor who is not signed in (a forged cookie, an agent's bearer token), and changes
  nothing.
- Every form of the page, POSTed without its CSRF token or with a wrong one, is refused (400) and
  changes nothing; every form the page renders carries the token.
- Agent-written text with script and HTML payloads in every place the page shows it (session
  titles, prompts and replies, card and question texts, group names, schedules, subscriptions,
  task descriptions, event lines), rendered in Chromium: nothing runs (`window.__pwned` stays
  unset, no dialog) and no element comes from the payloads, also after a live update.
- Every comparison of a token or secret goes through `hmac.compare_digest` or a hash lookup.

`OAR_SUITE=full python -m pytest tests/test_security.py -s` is the same suite: it has no size.
"""

from __future__ import annotations

import ast
import json
import re
from datetime import timedelta
from typing import Any

import pytest
import requests
from flask import Flask
from playwright.sync_api import Browser, expect

from oar.core.db import database
from oar.core.errors import STATUS_BY_CODE
from oar.core.models import Task
from oar.core.timeutil import utcnow
from oar.web.described import ANYONE, OWNER, PEER, SESSION, operation_of
from tests.support.browser import signed_in_tab
from tests.support.clients import Agent, poll
from tests.support.processes import PROJECT
from tests.support.relays import Relay, RelayStack

# Routes anyone may call: the sign-in page and its form, the health checks, the API's document, static files
# (the service worker is one, served at the root for its scope), and the decision links' page and
# POSTs, whose credential is the link's token (tests/test_decision_links.py).
PUBLIC = {
    ("GET", "/"), ("POST", "/"), ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/api/v1/openapi.json"),
    ("GET", "/static/<path:filename>"), ("GET", "/service-worker.js"), ("GET", "/decide/<token>"), ("POST", "/decide"),
    ("POST", "/api/v1/decide"), ("GET", "/favicon.ico"),
}
# Routes of the agents' side that carry no Operation (MCP speaks JSON-RPC, not the documented API):
# `/mcp` and the tool sets beside it at `/mcp/<name>`.
AGENT_ROUTES = re.compile(r"/mcp(/[a-z_-]+)?")
REFUSED = {"REMOTE_RELAY_UNAUTHORIZED", "REMOTE_RELAY_PERMISSION"}
WRONG_AGENT_TOKEN = "oar_s_" + "x" * 43
WRONG_OWNER_TOKEN = "oar_o_" + "x" * 43


def routes(app: Flask) -> list[tuple[str, str, str]]:
    """(method, rule, who may call it) for every route of the app."""
    found = []
    for rule in app.url_map.iter_rules():
        operation = operation_of(app.view_functions[rule.endpoint])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            if (method, rule.rule) in PUBLIC:
                caller = ANYONE
            elif operation is not None:
                caller = operation.caller
            elif AGENT_ROUTES.fullmatch(rule.rule):
                caller = SESSION
            elif rule.endpoint.startswith("page."):
                caller = "page"
            else:
                caller = "unknown"
            found.append((method, rule.rule, caller))
    return found


def fill(rule: str, ids: dict[str, str]) -> str:
    """The rule with real ids where the suite has them (so that a refusal is not a "not found")."""
    return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda match: ids.get(match.group(1), "nosuch"), rule)


def assert_refused_in_error_shape(response: requests.Response, what: str) -> None:
    assert response.status_code in (401, 403), (what, response.status_code, response.text[:300])
    body = response.json()
    assert body["ok"] is False and body["code"] in REFUSED, (what, body)
    assert STATUS_BY_CODE[body["code"]] == response.status_code and body["error"].strip(), (what, body)


def state_of(relay: Relay, session_ids: list[str]) -> str:
    """What the owner sees: settings, sessions, groups, providers, inbox, schedules, subscriptions, messages."""
    owner = relay.owner
    seen: dict[str, Any] = {
        path: owner.get(path) for path in (
            "/api/v1/owner/settings", "/api/v1/owner/sessions", "/api/v1/owner/groups", "/api/v1/owner/providers",
            "/api/v1/owner/inbox", "/api/v1/owner/schedules", "/api/v1/owner/subscriptions",
        )
    }
    for session_id in session_ids:
        seen[session_id] = owner.get(f"/api/v1/owner/sessions/{session_id}")
    text = json.dumps(seen, sort_keys=True)
    # Times that move by themselves (last seen, ages) are not changes.
    return re.sub(r'"(lastSeenAt|now|serverTime)": "[^"]*"', "", text)


@pytest.fixture
def ids(relay: Relay, desk: Agent) -> dict[str, str]:
    """Real ids for every path parameter the routes take."""
    child = desk.ok("create_session", relay="this", title="child", text="hello", wait_seconds=30)["session"]
    group = relay.owner.post("/api/v1/owner/groups", {"name": "g"})["group"]["id"]
    schedule = desk.ok("schedule", relay="this", session=child, text="later", at="2099-01-01T00:00:00Z")
    subscription = desk.ok("subscribe", relay="this", sessions=[child])
    return {
        "session_id": child, "group_id": group, "name": "echo",
        "schedule_id": schedule.get("schedule", {}).get("id") or schedule.get("id") or "nosuch",
        "subscription_id": subscription.get("subscription", {}).get("id") or subscription.get("id") or "nosuch",
        "filename": "style.css",
    }


# The URL map ----------------------------------------------------------------------------------


def test_every_route_is_public_by_name_or_needs_its_credential(stack: RelayStack, relay: Relay, desk: Agent,
                                                                ids: dict[str, str]) -> None:
    assert stack.app is not None
    walked = routes(stack.app)
    unknown = [(method, rule) for method, rule, caller in walked if caller == "unknown"]
    assert not unknown, f"routes the suite does not know who may call: {unknown}"
    # A route that declares itself open to anyone is listed here by name.
    anyone = {(method, rule) for method, rule, caller in walked if caller == ANYONE}
    assert anyone == PUBLIC, anyone ^ PUBLIC
    before = state_of(relay, [ids["session_id"], desk.session_id])
    credentials = {
        OWNER: {"no token": None, "a wrong token": WRONG_OWNER_TOKEN, "an agent token": desk.token},
        SESSION: {"no token": None, "a wrong token": WRONG_AGENT_TOKEN, "the owner token": relay.owner.token},
        # The relay-to-relay API takes only pairing tokens this relay gave out.
        PEER: {"no token": None, "a wrong token": "oar_p_" + "x" * 43, "the owner token": relay.owner.token,
               "an agent token": desk.token},
    }
    checked = 0
    for method, rule, caller in walked:
        url = relay.url + fill(rule, ids)
        if caller in credentials:
            for what, token in credentials[caller].items():
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                if AGENT_ROUTES.fullmatch(rule):
                    headers["Accept"] = "application/json, text/event-stream"
                response = requests.request(method, url, json={}, headers=headers, timeout=30)
                assert_refused_in_error_shape(response, f"{method} {rule} with {what}")
                checked += 1
        elif caller == "page":
            for what, extra in {
                "no cookie": {},
                "a forged cookie": {"cookies": {"oar_page": "eyJvd25lciI6IngifQ.forged.signature"}},
                "an agent's bearer token": {"headers": {"Authorization": f"Bearer {desk.token}"}},
                "the owner's bearer token": {"headers": {"Authorization": f"Bearer {relay.owner.token}"}},
            }.items():
                response = signed_out_page_request(relay, method, url, **extra)
                refused = response.status_code in (302, 303) and response.headers["Location"].endswith("/")
                refused = refused or response.status_code in (400, 401, 403)
                assert refused, (f"{method} {rule} with {what}", response.status_code, response.text[:300])
                if response.status_code == 401:  # the live endpoints answer JSON
                    assert_refused_in_error_shape(response, f"{method} {rule} with {what}")
                checked += 1
    print(f"\nsecurity: {len(walked)} routes, {checked} refusals checked, public: {sorted(PUBLIC)}")
    assert checked > 100
    assert state_of(relay, [ids["session_id"], desk.session_id]) == before


def signed_out_page_request(relay: Relay, method: str, url: str, **extra: Any) -> requests.Response:
    """A page request by a browser that is not signed in; a POST carries a valid CSRF token of its
    own visit, so that what refuses it is the missing sign-in."""
    browser = requests.Session()
    data = None
    if method == "POST":
        data = {"csrf_token": csrf_of(browser.get(relay.url + "/", timeout=30).text), "text": "forged", "title": "forged"}
    for name, value in extra.get("cookies", {}).items():
        browser.cookies.set(name, value)
    return browser.request(method, url, data=data, headers=extra.get("headers", {}), allow_redirects=False, timeout=30)


# CSRF -----------------------------------------------------------------------------------------


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, page[:500]
    return match.group(1)


@pytest.fixture
def signed_in(relay: Relay) -> requests.Session:
    browser = requests.Session()
    token = csrf_of(browser.get(relay.url + "/", timeout=30).text)
    response = browser.post(relay.url + "/", data={"csrf_token": token, "token": relay.owner.token}, timeout=30)
    assert response.status_code == 200 and "Sign out" in response.text, response.text[:300]
    return browser


FORM_FIELDS = {
    "text": "forged", "title": "forged", "decision": "allow", "choice": "red", "answer": "forged", "approvals": "create_sessions",
    "may_create_sessions": "on", "relay_name": "forged", "name": "forged", "kind": "echo", "max_wait_seconds": "300",
}


def test_every_form_without_its_csrf_token_is_refused_and_changes_nothing(
    stack: RelayStack, relay: Relay, desk: Agent, ids: dict[str, str], signed_in: requests.Session,
) -> None:
    assert stack.app is not None
    forms = [(method, rule) for method, rule, caller in routes(stack.app) if method == "POST" and not rule.startswith(("/api/", "/mcp"))]
    assert len(forms) >= 12, forms
    before = state_of(relay, [ids["session_id"], desk.session_id])
    for _method, rule in forms:
        for what, token in {"no CSRF token": None, "a wrong CSRF token": "x" * 43, "an empty one": ""}.items():
            data = dict(FORM_FIELDS) | ({} if token is None else {"csrf_token": token})
            response = signed_in.post(relay.url + fill(rule, ids), data=data, allow_redirects=False, timeout=30)
            assert response.status_code == 400, (rule, what, response.status_code, response.text[:300])
            assert "Nothing was changed" in response.text, (rule, what, response.text[:300])
    assert state_of(relay, [ids["session_id"], desk.session_id]) == before
    # The browser is still signed in, and the same form with its token works: the refusals were the CSRF check.
    page = signed_in.get(f"{relay.url}/sessions/{desk.session_id}", timeout=30).text
    written = signed_in.post(f"{relay.url}/sessions/{desk.session_id}/messages",
                             data={"csrf_token": csrf_of(page), "text": "with its token"}, allow_redirects=False, timeout=30)
    assert written.status_code in (302, 303), written.text[:300]
    assert any(m["text"] == "with its token" for m in relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["messages"])


def test_every_form_the_page_renders_carries_the_csrf_token(relay: Relay, desk: Agent, ids: dict[str, str],
                                                            signed_in: requests.Session) -> None:
    desk.ok("ask", relay="this", question="Which?", options=["a", "b"])
    pages = ["/", "/?show=archived", "/inbox", "/settings", f"/sessions/{desk.session_id}", f"/sessions/{ids['session_id']}",
             f"/sessions/{desk.session_id}/tokens"]
    counted = 0
    for path in pages:
        html = signed_in.get(relay.url + path, timeout=30).text
        for form in re.findall(r"<form\b.*?</form>", html, flags=re.S | re.I):
            if re.search(r'method="post"', form, flags=re.I):
                assert 'name="csrf_token"' in form, (path, form[:300])
                counted += 1
    assert counted >= 10, counted


# Agent text in Chromium -----------------------------------------------------------------------

PAYLOADS = [
    "<script>window.__pwned=1;alert(1)</script>",
    '<img src=x onerror="window.__pwned=1;alert(2)">',
    '"><svg onload="window.__pwned=1;alert(3)">',
    "javascript:window.__pwned=1;alert(4)",
    "'><iframe src=\"javascript:window.__pwned=1\"></iframe>",
    "[link](javascript:window.__pwned=1) <a href=\"javascript:window.__pwned=1\">x</a>",
]
EVERY = " ".join(PAYLOADS)
# Elements that only a payload could have made.
INJECTED = ("img[src='x'], svg[onload], iframe, a[href^='javascript'], [onerror], [onload], "
            "script:not([src])")


def agent_text_everywhere(relay: Relay, desk: Agent) -> list[str]:
    """Payloads in every place the page shows agent-written text; returns the sessions to visit."""
    sessions = [desk.session_id]
    for number, payload in enumerate(PAYLOADS):
        created = desk.ok("create_session", relay="this", title=payload[:200], text=f"{payload} #{number}", wait_seconds=30)
        sessions.append(created["session"])
    child = sessions[1]
    desk.ok("update_session", relay="this", session=child, title=EVERY[:200])
    group = relay.owner.post("/api/v1/owner/groups", {"name": PAYLOADS[2][:100]})["group"]["id"]
    relay.owner.patch(f"/api/v1/owner/sessions/{child}", {"group_id": group})
    # A question card with payloads in every text of it.
    desk.ok("ask", relay="this", question=EVERY, options=PAYLOADS[:4], recommendation=EVERY, detail=EVERY)
    # An approval card: an agent without approvals asks to start a session (its turn waits on the card).
    lead = relay.conversation(PAYLOADS[1], approvals=())
    call = {"action": "create_session", "relay": "this", "title": PAYLOADS[0], "text": EVERY}
    relay.owner.post(f"/api/v1/owner/sessions/{lead.session_id}/messages", {"text": "!relay " + json.dumps(call)})
    sessions.append(lead.session_id)
    # Schedules and subscriptions (the sessions list shows them with their sessions' titles).
    desk.ok("schedule", relay="this", session=child, text=EVERY, at="2099-01-01T00:00:00Z")
    desk.ok("schedule", relay="this", session=sessions[2], text=EVERY, every_minutes=60)
    desk.ok("subscribe", relay="this", sessions=[child])
    # A tool call's activity line and an event line: a turn that calls relay_tool with payloads.
    tools = {"action": "send", "relay": "this", "session": sessions[3], "text": EVERY, "wait_seconds": 0}
    relay.owner.post(f"/api/v1/owner/sessions/{sessions[2]}/messages", {"text": "!relay " + json.dumps(tools)})
    # A background task's description (as a worker records it).
    with database.connection_context():
        ended = utcnow() - timedelta(seconds=5)
        Task.create(id="tpwned1", session=child, description=EVERY, command=EVERY, status="completed", exit_code=0,
                    output_path=str(relay.config.data_dir / "none.log"), started_at=ended, ended_at=ended, heartbeat_at=ended)
    poll("the approval card", lambda: relay.owner.get("/api/v1/owner/inbox")["cards"])
    return sessions


def test_agent_text_renders_as_text_in_chromium_and_runs_nothing(relay: Relay, desk: Agent, chromium: Browser) -> None:
    sessions = agent_text_everywhere(relay, desk)
    pages = ["/", "/?show=archived", "/inbox", "/settings", *(f"/sessions/{session}" for session in sessions)]
    shown = 0
    with signed_in_tab(chromium, relay) as tab:
        for path in pages:
            tab.goto(path)
            tab.wait_for_load_state("networkidle")
            assert tab.evaluate("() => window.__pwned") is None, path
            injected = tab.locator("main").locator(INJECTED).count()
            assert injected == 0, (path, tab.locator("main").inner_html()[:2000])
            shown += tab.locator("main").inner_text().count("window.__pwned")
        # A live update brings payloads in without a reload: still text.
        tab.goto(f"/sessions/{desk.session_id}")
        relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": f"live {EVERY}"})
        expect(tab.locator(".messages .msg.reply").last).to_contain_text(f"live {PAYLOADS[0]}", timeout=30_000)
        assert tab.evaluate("() => window.__pwned") is None
        assert tab.locator("main").locator(INJECTED).count() == 0
        assert tab.dialogs == []  # type: ignore[attr-defined]
    # The payloads were on the pages, as text, many times over.
    assert shown > 30, shown


# Constant-time comparisons ----------------------------------------------------------------------

SECRET_NAME = re.compile(r"token|secret|password|api_key|signature|fingerprint|csrf|digest|hash|mark", re.I)
# Comparisons that are not of a secret, by file and a piece of their text: a Redis lock's owner
# mark (random, only tells this process's lock from another's; it grants nothing).
NOT_SECRETS = {"oar/watching/delivering.py": "runtime.redis.get(lock) == token.encode()"}


def _lookup_or_constant(side: ast.expr) -> bool:
    """A literal, an ALL_CAPS constant, or a peewee field (`Model.field == value` is a database
    lookup: the token's hash is looked up, not compared in Python)."""
    if isinstance(side, ast.Constant):
        return True
    name = side.attr if isinstance(side, ast.Attribute) else side.id if isinstance(side, ast.Name) else ""
    if name and name.isupper():
        return True
    return isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name) and side.value.id[:1].isupper()


def secret_comparisons(source: str) -> list[tuple[int, str]]:
    """`==`/`!=` comparisons in Python of something named like a token or a secret."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            sides = [node.left, *node.comparators]
            if SECRET_NAME.search(" ".join(ast.unparse(side) for side in sides)) and not any(map(_lookup_or_constant, sides)):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_tokens_and_secrets_are_compared_in_constant_time() -> None:
    offending = []
    for path in sorted((PROJECT / "oar").rglob("*.py")):
        relative = path.relative_to(PROJECT).as_posix()
        for line, text in secret_comparisons(path.read_text()):
            if NOT_SECRETS.get(relative, "\0") in text:
                continue
            offending.append(f"{relative}:{line}: {text}")
    assert not offending, "compare tokens with hmac.compare_digest (or look up their hash):\n" + "\n".join(offending)


def test_the_comparison_check_finds_a_plain_comparison() -> None:
    assert secret_comparisons("ok = token == stored\nif sent != expected_csrf: pass\n") == [
        (1, "token == stored"), (2, "sent != expected_csrf"),
    ]
    assert secret_comparisons(
        "ok = hmac.compare_digest(token, stored)\nkind = row.kind == 'x'\nrow = Token.token_hash == hashed\n"
        "every = token == ALL_TOKENS\n"
    ) == []
