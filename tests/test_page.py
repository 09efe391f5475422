"""The owner's page (docs/owner-api.md#the-page) over real HTTP: sign-in, CSRF, forms, escaping.

The browser side (JavaScript, live updates) is in test_page_browser.py.
"""

from __future__ import annotations

import html
import json
import logging
import re
import tomllib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import requests

from oar.core import defaults, ids, keys
from oar.core.config import Config
from oar.core.db import database
from oar.core.models import Provider as ProviderRow
from oar.core.models import Session as SessionRow
from oar.core.models import SignIn
from oar.core.timeutil import utcnow
from oar.web.page_tokens import relay_address
from tests.fakes.llm import FakeLLM
from tests.support.clients import Agent, poll
from tests.support.conversations import pending_card, relay_line
from tests.support.relays import Relay
from tests.support.snapshots import snapshot

XSS = "<img src=x onerror=alert(1)>"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class Browser:
    """A person at the page: a cookie jar, and forms posted with the page's CSRF token."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.http = requests.Session()
        self.csrf = ""

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        response = self.http.get(self.relay.url + path, timeout=30, **kwargs)
        found = CSRF.search(response.text)
        if found:
            self.csrf = html.unescape(found.group(1))
        return response

    def post(self, path: str, data: dict[str, Any] | None = None, csrf: str | None = None, **kwargs: Any) -> requests.Response:
        form = {"csrf_token": self.csrf if csrf is None else csrf, **(data or {})}
        if csrf == "":
            form.pop("csrf_token")
        response = self.http.post(self.relay.url + path, data=form, timeout=30, **kwargs)
        found = CSRF.search(response.text)
        if found:
            self.csrf = html.unescape(found.group(1))
        return response

    def sign_in(self) -> requests.Response:
        self.get("/")
        response = self.post("/", {"token": self.relay.config.owner_token})
        assert response.status_code == 200 and "Sign out" in response.text, response.text[:500]
        return response


@pytest.fixture
def visitor(relay: Relay) -> Browser:
    return Browser(relay)


@pytest.fixture
def owner(visitor: Browser) -> Browser:
    """The owner, signed in."""
    visitor.sign_in()
    return visitor


def text_of(page: requests.Response) -> str:
    """The page's visible text, roughly: tags out, entities decoded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.text)).split())


def message_blocks(page: str) -> list[tuple[str, str]]:
    """Each message of a session page: its classes and its visible text."""
    parts = re.split(r'<div class="(msg [^"]*)"', page)
    return [(parts[i], " ".join(html.unescape(re.sub(r"<[^>]+>", " ", parts[i + 1])).split()))
            for i in range(1, len(parts) - 1, 2)]


# Signing in -----------------------------------------------------------------------------------


def test_it_asks_an_unsigned_visitor_for_the_owner_token_in_one_password_field(relay: Relay, visitor: Browser) -> None:
    page = visitor.get("/")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    inputs = re.findall(r"<input[^>]*>", page.text)
    passwords = [tag for tag in inputs if 'type="password"' in tag]
    assert len(passwords) == 1 and 'name="token"' in passwords[0]
    assert [tag for tag in inputs if 'type="hidden"' not in tag] == passwords
    for path in ("/inbox", "/settings", "/sessions/0123456789abcdef"):
        response = visitor.get(path, allow_redirects=False)
        assert response.status_code == 302 and response.headers["Location"].endswith("/"), path
    live = visitor.get("/live/overview")
    assert live.status_code == 401 and live.json()["ok"] is False


def test_a_wrong_token_shows_the_form_again_with_a_clear_message(relay: Relay, visitor: Browser) -> None:
    visitor.get("/")
    page = visitor.post("/", {"token": "oar_o_wrong"})
    assert page.status_code == 401
    assert "That is not the owner token of this relay" in page.text and 'name="token"' in page.text
    assert visitor.get("/settings", allow_redirects=False).status_code == 302


def test_signing_in_sets_an_http_only_lax_cookie_and_signing_out_ends_it(relay: Relay, visitor: Browser) -> None:
    visitor.get("/")
    response = visitor.post("/", {"token": relay.config.owner_token}, allow_redirects=False)
    assert response.status_code == 303
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("oar_page=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # served over plain http here
    assert "Expires=" in cookie
    assert relay.config.owner_token not in cookie
    page = visitor.get("/")
    assert "Sign out" in page.text and "watching" not in text_of(page)  # nothing is watched: no "watching 0 sessions"
    assert visitor.get("/live/overview").status_code == 200
    visitor.post("/sign-out")
    assert 'name="token"' in visitor.get("/").text
    assert visitor.get("/live/overview").status_code == 401


def copy_of(browser: Browser) -> Browser:
    """Another browser holding a copy of `browser`'s cookies (as a stolen cookie would be)."""
    thief = Browser(browser.relay)
    thief.http.cookies.update(browser.http.cookies.get_dict())
    return thief


def test_a_cookie_copied_before_signing_out_no_longer_opens_settings(relay: Relay, owner: Browser) -> None:
    thief = copy_of(owner)
    assert thief.get("/settings", allow_redirects=False).status_code == 200
    owner.post("/sign-out")
    assert thief.get("/settings", allow_redirects=False).status_code == 302
    assert thief.get("/live/overview").status_code == 401


def test_sign_out_everywhere_ends_every_browsers_sign_in(relay: Relay, owner: Browser) -> None:
    laptop = Browser(relay)
    laptop.sign_in()
    page = owner.get("/settings")
    assert re.search(r"Signed in to this page: \d+ browsers", text_of(page))
    owner.post("/sign-out/everywhere")
    for browser in (owner, laptop):
        assert browser.get("/settings", allow_redirects=False).status_code == 302
    with database.connection_context():
        assert SignIn.select().count() == 0


def test_the_owner_api_signs_every_browser_out(relay: Relay, owner: Browser) -> None:
    status, answer = relay.owner.request("DELETE", "/api/v1/owner/sign-ins")
    assert status == 200 and answer["signedOut"] >= 1, answer
    assert owner.get("/settings", allow_redirects=False).status_code == 302
    assert relay.owner.request("DELETE", "/api/v1/owner/sign-ins")[1]["signedOut"] == 0


def test_a_sign_in_ends_14_days_after_its_last_visit_on_the_server(relay: Relay, owner: Browser) -> None:
    with database.connection_context():
        [row] = list(SignIn.select().order_by(SignIn.created_at.desc()).limit(1))
        SignIn.update(last_seen_at=utcnow() - timedelta(days=13, hours=23)).where(SignIn.id_hash == row.id_hash).execute()
    assert owner.get("/settings", allow_redirects=False).status_code == 200  # and the visit is written down
    with database.connection_context():
        seen = SignIn.get_by_id(row.id_hash).last_seen_at
        assert utcnow() - seen < timedelta(minutes=5)
        SignIn.update(last_seen_at=utcnow() - timedelta(days=14, seconds=1)).where(SignIn.id_hash == row.id_hash).execute()
    assert owner.get("/settings", allow_redirects=False).status_code == 302
    with database.connection_context():
        assert SignIn.get_or_none(SignIn.id_hash == row.id_hash) is None
    # The table holds the id's hash only: the cookie's id is not in the database.
    assert owner.http.cookies.get("oar_page") and row.id_hash not in owner.http.cookies["oar_page"]


@pytest.fixture
def forgiven(relay: Relay) -> Iterator[None]:
    """This test's wrong tokens are forgotten afterwards (other tests sign in from the same address)."""
    yield
    assert relay.runtime is not None
    relay.runtime.redis.delete(keys.sign_in_failures(relay.config.namespace, "127.0.0.1"))


def test_after_five_wrong_tokens_sign_in_waits_even_for_the_right_one(relay: Relay, visitor: Browser, forgiven: None) -> None:
    visitor.get("/")
    for attempt in range(defaults.SIGN_IN_FAILURES_ALLOWED):
        assert visitor.post("/", {"token": f"oar_o_wrong{attempt}"}).status_code == 401
    page = visitor.post("/", {"token": relay.config.owner_token})
    assert page.status_code == 429 and 0 < int(page.headers["Retry-After"]) <= defaults.SIGN_IN_FAILURE_WINDOW_SECONDS
    assert "Too many wrong owner tokens from this address" in page.text and 'name="token"' in page.text
    assert visitor.get("/settings", allow_redirects=False).status_code == 302
    # Another web process sees the same count: it lives in Redis.
    other = Browser(relay)
    other.get("/")
    assert other.post("/", {"token": relay.config.owner_token}).status_code == 429


def test_a_right_token_forgives_the_wrong_ones_before_it(relay: Relay, visitor: Browser, forgiven: None) -> None:
    visitor.get("/")
    for _ in range(defaults.SIGN_IN_FAILURES_ALLOWED - 1):
        assert visitor.post("/", {"token": "oar_o_wrong"}).status_code == 401
    visitor.sign_in()
    visitor.post("/sign-out")
    for _ in range(defaults.SIGN_IN_FAILURES_ALLOWED - 1):
        assert visitor.post("/", {"token": "oar_o_wrong"}).status_code == 401
    visitor.sign_in()


def test_one_agent_token_is_revoked_from_the_page_and_its_next_call_is_401(relay: Relay, owner: Browser, desk: Agent) -> None:
    _, minted = relay.owner.request("POST", f"/api/v1/owner/sessions/{desk.session_id}/tokens")
    token = minted["token"]
    assert Agent(relay.url, token, desk.session_id).call("list_sessions", relay="this")[0] == 200
    page = owner.post("/settings/tokens/revoke", {"token": token})
    assert page.url.endswith("/settings#access") and f"Revoked an agent token of session {desk.session_id[:8]}" in text_of(page)
    status, answer = Agent(relay.url, token, desk.session_id).call("list_sessions", relay="this")
    assert (status, answer["code"]) == (401, "REMOTE_RELAY_UNAUTHORIZED")
    assert desk.call("list_sessions", relay="this")[0] == 200  # the session's other token stays
    again = owner.post("/settings/tokens/revoke", {"token": token})
    assert "That is not an agent token on this relay" in text_of(again)


def test_one_agent_token_is_revoked_with_the_owner_api(relay: Relay, desk: Agent) -> None:
    _, minted = relay.owner.request("POST", f"/api/v1/owner/sessions/{desk.session_id}/tokens")
    status, answer = relay.owner.request("POST", "/api/v1/owner/tokens/revoke", {"token": minted["token"]})
    assert (status, answer) == (200, {"ok": True, "revoked": True, "session": desk.session_id})
    assert Agent(relay.url, minted["token"], desk.session_id).call("list_sessions", relay="this")[0] == 401
    assert desk.call("list_sessions", relay="this")[0] == 200
    status, answer = relay.owner.request("POST", "/api/v1/owner/tokens/revoke", {"token": minted["token"]})
    assert (status, answer["code"]) == (404, "REMOTE_RELAY_NOT_FOUND")
    for bad in ({}, {"token": 5}, {"token": "x", "extra": 1}):
        status, answer = relay.owner.request("POST", "/api/v1/owner/tokens/revoke", bad)
        assert (status, answer["code"]) == (400, "REMOTE_RELAY_INVALID_INPUT"), bad


def test_the_cookie_is_secure_when_the_page_is_served_over_https(relay: Relay, visitor: Browser) -> None:
    app_config = relay.runtime.config
    relay.runtime.config = app_config.with_overrides(public_url="https://relay.example")
    try:
        response = visitor.get("/")
        assert "Secure" in response.headers["Set-Cookie"]
        # The browser keeps a Secure cookie to https: over plain http the form comes back refused.
        assert visitor.post("/", {"token": relay.config.owner_token}).status_code == 400
    finally:
        relay.runtime.config = app_config


def test_behind_a_trusted_tls_proxy_the_cookie_is_secure(relay: Relay, visitor: Browser) -> None:
    """X-Forwarded-Proto counts only when OAR_TRUST_PROXY says a proxy is in front."""
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    assert "Secure" not in visitor.get("/", headers=forwarded).headers["Set-Cookie"]  # anyone may send it
    app_config = relay.runtime.config
    relay.runtime.config = app_config.with_overrides(trust_proxy=1)
    try:
        assert "Secure" in Browser(relay).get("/", headers=forwarded).headers["Set-Cookie"]
        assert "Secure" not in Browser(relay).get("/").headers["Set-Cookie"]  # the proxy spoke plain http
    finally:
        relay.runtime.config = app_config


def test_every_page_links_to_sessions_inbox_and_settings(relay: Relay, owner: Browser, desk: Agent) -> None:
    for path in ("/", "/inbox", "/settings", f"/sessions/{desk.session_id}", "/no-such-page"):
        page = owner.get(path)
        for link in ('href="/"', 'href="/inbox"', 'href="/settings"'):
            assert link in page.text, (path, link)
        assert "Sign out" in page.text
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        # The title is a short line of text: no markup of the page slipped into its block.
        title = page.text.split("<title>", 1)[1].split("</title>", 1)[0]
        assert "<" not in title and len(title) < 120, (path, title[:200])


# CSRF ----------------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_or_with_a_wrong_one_is_refused_and_changes_nothing(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    before = snapshot(relay)
    attempts = [
        ("/settings", {"agent_sessions_enabled": "on", "max_wait_seconds": "900", "max_turn_seconds": "3600",
                       "quiet_after_minutes": "10", "rate_calls_per_minute": "0", "rate_writes_per_minute": "0",
                       "relay_name": "hijacked", "allowed_roots": "/"}),
        ("/sessions/new", {"title": "forged"}),
        (f"/sessions/{desk.session_id}/messages", {"text": "forged"}),
        (f"/sessions/{desk.session_id}/archive", {}),
        (f"/sessions/{desk.session_id}/may-create", {"may_create_sessions": "on"}),
        ("/settings/providers", {"name": "forged", "kind": "echo"}),
        ("/settings/providers/echo/delete", {}),
        ("/sign-out", {}),
    ]
    for path, data in attempts:
        for csrf in ("", "not-the-token"):
            response = owner.post(path, data, csrf=csrf)
            assert response.status_code == 400, (path, csrf)
            assert "security token (CSRF)" in response.text and "Nothing was changed" in response.text
            assert "Traceback" not in response.text
    assert snapshot(relay) == before
    assert "Sign out" in owner.get("/").text  # still signed in: the forged sign-out did nothing


def test_the_sign_in_form_needs_its_csrf_token_too(relay: Relay, visitor: Browser) -> None:
    visitor.get("/")
    response = visitor.post("/", {"token": relay.config.owner_token}, csrf="")
    assert response.status_code == 400
    assert 'name="token"' in visitor.get("/").text


# Settings and providers ------------------------------------------------------------------------


def settings_form(**changes: str) -> dict[str, str]:
    form = {
        "agent_sessions_enabled": "on", "max_wait_seconds": "900", "max_turn_seconds": "1800",
        "quiet_after_minutes": "12", "rate_calls_per_minute": "0", "rate_writes_per_minute": "0",
        "team_calls_per_minute": "0", "team_writes_per_minute": "0",
        "max_running_tasks_per_session": "3", "max_running_tasks": "12", "max_task_minutes": "90",
        "relay_name": "desk", "allowed_roots": "/tmp\n/srv", "sessions_visibility": "all",
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value is not None}


def test_the_settings_form_saves_what_the_owner_api_shows(relay: Relay, owner: Browser) -> None:
    owner.get("/settings")
    response = owner.post("/settings", settings_form(allow_shell_tasks="on", team_runs_shared="on",
                                                      team_writes_per_minute="30", sessions_visibility="tree"))
    assert response.status_code == 200 and "Settings saved." in response.text
    saved = relay.owner.get("/api/v1/owner/settings")["settings"]
    assert saved == {**saved, "agent_sessions_enabled": True, "max_wait_seconds": 900, "max_turn_seconds": 1800,
                     "quiet_after_minutes": 12, "allow_shell_tasks": True, "accept_agent_prompts": False,
                     "allowed_roots": ["/tmp", "/srv"], "team_runs_shared": True, "team_calls_per_minute": 0,
                     "team_writes_per_minute": 30,
                     "max_running_tasks_per_session": 3, "max_running_tasks": 12, "max_task_minutes": 90,
                     "sessions_visibility": "tree"}
    page = owner.get("/settings")
    assert 'name="max_wait_seconds" value="900"' in page.text
    assert '<option value="tree" selected>tree: this conversation and the sessions it started, and theirs</option>' in (
        html.unescape(page.text))
    assert "Agents may start and use sessions on this relay" in page.text


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"max_wait_seconds": "60"}, "max_wait_seconds must be a whole number from 120 to 3600"),
        ({"max_wait_seconds": "4000"}, "max_wait_seconds must be a whole number from 120 to 3600"),
        ({"max_turn_seconds": "soon"}, "max_turn_seconds must be a whole number"),
        ({"quiet_after_minutes": ""}, "quiet_after_minutes must be a whole number"),
        ({"relay_name": "   "}, "relay_name must be a name of 1 to 100 characters"),
        ({"max_running_tasks": "0"}, "max_running_tasks must be a whole number from 1 to 200"),
        ({"max_task_minutes": "²"}, "max_task_minutes must be a whole number"),
        ({"allowed_roots": "relative/path"}, '"relative/path" is not an absolute path'),
        ({"sessions_visibility": "everyone"}, "sessions_visibility"),
    ],
)
def test_bad_settings_show_the_form_again_with_the_error_and_save_nothing(
    relay: Relay, owner: Browser, changes: dict[str, str], words: str
) -> None:
    owner.get("/settings")
    before = snapshot(relay)
    response = owner.post("/settings", settings_form(**changes))
    assert response.status_code == 400
    assert words in html.unescape(response.text) and "Nothing was changed." in response.text
    assert 'name="max_wait_seconds"' in response.text  # the form again
    if changes.get("max_wait_seconds"):
        assert f'value="{changes["max_wait_seconds"]}"' in response.text  # with what was typed
    assert snapshot(relay) == before


def test_each_settings_section_saves_its_own_settings_and_leaves_the_others(relay: Relay, owner: Browser) -> None:
    """The Agents and rules form and the Team runs form post to one route: each names its section,
    and an unticked box of one never clears a setting of the other."""
    owner.get("/settings")
    owner.post("/settings", settings_form(allow_shell_tasks="on", team_runs_shared="on", team_calls_per_minute="40"))
    team = owner.post("/settings", {"section": "team", "team_calls_per_minute": "7", "team_writes_per_minute": "3"})
    assert team.status_code == 200 and team.url.endswith("/settings#team") and "Settings saved." in team.text
    saved = relay.owner.get("/api/v1/owner/settings")["settings"]
    assert (saved["team_runs_shared"], saved["team_calls_per_minute"], saved["team_writes_per_minute"]) == (False, 7, 3)
    assert (saved["agent_sessions_enabled"], saved["allow_shell_tasks"], saved["max_wait_seconds"]) == (True, True, 900)
    agents = owner.post("/settings", {**settings_form(), "section": "agents"})
    assert agents.url.endswith("/settings#agents")
    saved = relay.owner.get("/api/v1/owner/settings")["settings"]
    assert saved["allow_shell_tasks"] is False and (saved["team_calls_per_minute"], saved["team_writes_per_minute"]) == (7, 3)
    before = snapshot(relay)
    bad = owner.post("/settings", {"section": "team", "team_calls_per_minute": "many", "team_writes_per_minute": "3"})
    assert bad.status_code == 400 and "team_calls_per_minute must be a whole number" in html.unescape(bad.text)
    refused_in = bad.text.split('id="team"', 1)[1]
    assert 'role="alert"' in refused_in and 'value="many"' in refused_in  # shown in its own section, as typed
    assert 'name="max_wait_seconds" value="900"' in bad.text  # the other section keeps the stored values
    unknown = owner.post("/settings", {"section": "everything", "relay_name": "hijacked"})
    assert unknown.status_code == 400 and "names no section 'everything'" in html.unescape(unknown.text)
    assert snapshot(relay) == before


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


def test_the_provider_form_saves_discovers_models_and_never_shows_the_key(
    relay: Relay, owner: Browser, fake_llm: FakeLLM
) -> None:
    owner.get("/settings")
    response = owner.post("/settings/providers", {
        "name": "lab", "kind": "chat", "base_url": fake_llm.base_url, "api_key": fake_llm.api_key,
        "monthly_token_cap": "5000000", "efforts": "low, high",
    })
    assert response.status_code == 200, response.text[:500]
    assert "fake-large, fake-small" in response.text  # discovered from the server's /models
    assert fake_llm.api_key not in response.text and "key set" in response.text
    provider = relay.owner.get("/api/v1/owner/providers/lab")["provider"]
    assert provider["models"] == ["fake-large", "fake-small"] and provider["monthlyTokenCap"] == 5_000_000
    assert provider["efforts"] == ["low", "high"] and provider["apiKeySet"] is True
    # Editing shows the stored values but never the key; an empty key field keeps it.
    edit = owner.get("/settings?edit=lab")
    assert fake_llm.api_key not in edit.text and 'value="fake-large, fake-small"' in edit.text
    assert re.search(r'<input type="password" name="api_key"[^>]*value=""', edit.text)
    owner.post("/settings/providers", {"name": "lab", "kind": "chat", "base_url": fake_llm.base_url,
                                       "models": "fake-small", "api_key": ""})
    with database.connection_context():
        assert ProviderRow.get_by_id("lab").api_key == fake_llm.api_key
    assert relay.owner.get("/api/v1/owner/providers/lab")["provider"]["models"] == ["fake-small"]
    for path in ("/settings", "/", "/inbox"):
        assert fake_llm.api_key not in owner.get(path).text
    deleted = owner.post("/settings/providers/lab/delete")
    assert 'Provider "lab" deleted.' in html.unescape(deleted.text)
    assert relay.owner.request("GET", "/api/v1/owner/providers/lab")[0] == 404


def test_the_provider_form_keeps_a_cli_agents_secret_variables_without_showing_them(relay: Relay, owner: Browser) -> None:
    key = "sk-ant-api03-" + "F" * 48
    owner.get("/settings")
    form = {"name": "coder", "kind": "cli", "command": "agent -p {prompt}"}
    response = owner.post("/settings/providers", {**form, "environment": f"AGENT_PROFILE=review\r\nANTHROPIC_API_KEY={key}\r\n"})
    assert response.status_code == 200 and 'Provider "coder" saved.' in html.unescape(response.text), response.text[:500]
    edit = owner.get("/settings?edit=coder")
    assert key not in edit.text
    assert re.search(r'<textarea name="environment"[^>]*>AGENT_PROFILE=review\nANTHROPIC_API_KEY</textarea>', edit.text)
    # The form sent back as shown, with a change: the name alone keeps the stored key.
    owner.post("/settings/providers", {**form, "environment": "AGENT_PROFILE=build\nANTHROPIC_API_KEY"})
    with database.connection_context():
        assert ProviderRow.get_by_id("coder").options["environment"] == {"AGENT_PROFILE": "build", "ANTHROPIC_API_KEY": key}
    # Refused: the form comes back without the typed secret, and nothing changed.
    before = snapshot(relay)
    typed = "sk-ant-api03-" + "T" * 48
    response = owner.post("/settings/providers", {**form, "environment": f"ANTHROPIC_API_KEY={typed}\nTMPDIR=/tmp"})
    assert response.status_code == 400 and "environment cannot set TMPDIR" in html.unescape(response.text)
    assert typed not in response.text and "ANTHROPIC_API_KEY\nTMPDIR=/tmp</textarea>" in response.text
    response = owner.post("/settings/providers", {**form, "environment": "MODE=a\nMODE=b"})
    assert response.status_code == 400 and "environment names 'MODE' twice" in html.unescape(response.text)
    assert snapshot(relay) == before


def test_the_provider_form_keeps_the_options_it_does_not_show_and_a_put_replaces_them(relay: Relay, owner: Browser) -> None:
    # The form edits what it shows: an option set through the owner API stays; a PUT without it clears it.
    stored = {"kind": "echo", "models": ["echo"], "family": "anthropic", "workspace": "repo"}
    assert relay.owner.request("PUT", "/api/v1/owner/providers/twin", stored)[0] == 200
    owner.get("/settings")
    response = owner.post("/settings/providers", {"name": "twin", "kind": "echo", "models": "echo, echo-2"})
    assert response.status_code == 200, response.text[:500]
    by_form = relay.owner.get("/api/v1/owner/providers/twin")["provider"]
    assert by_form["models"] == ["echo", "echo-2"]
    assert by_form["family"] == "anthropic" and by_form["workspace"] == "repo"
    assert relay.owner.request("PUT", "/api/v1/owner/providers/twin", {"kind": "echo", "models": ["echo"]})[0] == 200
    by_put = relay.owner.get("/api/v1/owner/providers/twin")["provider"]
    assert by_put["family"] is None and by_put["workspace"] == "folder"  # its default
    assert relay.owner.request("DELETE", "/api/v1/owner/providers/twin")[0] == 200


def test_a_bad_provider_shows_the_form_again_without_the_key(relay: Relay, owner: Browser) -> None:
    owner.get("/settings")
    before = snapshot(relay)
    response = owner.post("/settings/providers", {"name": "lab", "kind": "chat", "base_url": "ftp://host/v1",
                                                  "api_key": "sk-typed-secret-42"})
    assert response.status_code == 400
    assert "base_url must be an http:// or https:// URL" in html.unescape(response.text)
    assert "sk-typed-secret-42" not in response.text and 'value="ftp://host/v1"' in response.text
    response = owner.post("/settings/providers", {"name": "lab", "kind": "chat", "base_url": "http://h/v1",
                                                  "models": "a", "monthly_token_cap": "lots"})
    assert response.status_code == 400 and "monthly_token_cap must be a whole number" in html.unescape(response.text)
    assert snapshot(relay) == before


# Escaping ------------------------------------------------------------------------------------


def test_agent_written_text_is_escaped_everywhere(relay: Relay, owner: Browser, desk: Agent) -> None:
    created = desk.ok("create_session", relay="this", title=XSS, text=f"{XSS}\n<script>alert(2)</script>",
                      wait_seconds=30)
    assert created["status"] == "done"
    desk.ok("ask", question=XSS, options=[XSS, "<b>bold</b>"], session=created["session"])
    for path in ("/", f"/sessions/{created['session']}", "/inbox"):
        page = owner.get(path)
        assert XSS not in page.text and "<script>alert(2)" not in page.text and "<b>bold" not in page.text, path
        assert html.escape(XSS, quote=False) in page.text or html.escape(XSS) in page.text, path
        assert XSS in text_of(page)


# The sessions list --------------------------------------------------------------------------


def test_the_sessions_list_shows_badges_the_watch_chips_and_the_schedule_list(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    child = desk.ok("create_session", relay="this", title="Review: server/", text="look", wait_seconds=30)["session"]
    subscription = desk.ok("subscribe", sessions=[child])["subscription_id"]
    schedule = desk.ok("schedule", text="nightly check", every_minutes=1440, title="Nightly")["schedule_id"]
    page = owner.get("/")
    shown = text_of(page)
    assert 'via agent · “desk”' in shown and "watched" in shown
    assert "watching 1 session" in shown and "desk watches Review: server/" in shown
    assert "⏰ “Nightly” → desk" in shown and "every 1440 min" in shown
    assert "echo · echo-1" in shown and "idle" in shown
    response = owner.post(f"/subscriptions/{subscription}/unsubscribe")
    assert f"Unsubscribed {subscription}." in response.text and "watching" not in text_of(response)
    assert desk.ok("list_subscriptions")["subscriptions"][0]["endReason"] == "unsubscribed"
    response = owner.post(f"/schedules/{schedule}/cancel")
    assert "Cancelled ⏰ Nightly." in html.unescape(response.text)
    assert desk.ok("list_schedules")["schedules"][0]["endReason"] == "unscheduled"
    again = owner.post(f"/schedules/{schedule}/cancel")
    assert f"{schedule} had already ended." in again.text
    missing = owner.post("/schedules/sch_nosuch/cancel")
    assert missing.status_code == 200 and 'has no schedule "sch_nosuch"' in html.unescape(missing.text)


def test_the_owner_api_unsubscribes_and_lists_subscriptions_like_the_page(relay: Relay, desk: Agent) -> None:
    child = desk.ok("create_session", relay="this", text="look", wait_seconds=30)["session"]
    subscription = desk.ok("subscribe", sessions=[child])["subscription_id"]
    [listed] = relay.owner.get("/api/v1/owner/subscriptions")["subscriptions"]
    assert listed["id"] == subscription and listed["watcher"] == {"id": desk.session_id, "title": "desk"}
    status, body = relay.owner.request("DELETE", f"/api/v1/owner/subscriptions/{subscription}")
    assert status == 200 and body["ended"] is True and body["subscription"]["endReason"] == "unsubscribed"
    assert relay.owner.get("/api/v1/owner/subscriptions")["subscriptions"] == []
    status, body = relay.owner.request("DELETE", "/api/v1/owner/subscriptions/sub_nosuch")
    assert status == 404 and body["code"] == "REMOTE_RELAY_NOT_FOUND" and body["error"].endswith("Nothing was changed.")


def test_starting_a_conversation_shows_its_agent_token_once(relay: Relay, owner: Browser) -> None:
    owner.get("/")
    page = owner.post("/sessions/new", {"title": "Release notes", "provider": "echo", "model": "echo-2", "text": "hello"})
    assert page.status_code == 200
    token = re.search(r"oar_s_[A-Za-z0-9_-]+", page.text).group(0)
    agent = Agent(relay.url, token, "")
    listed = agent.ok("list_sessions", relay="this")["sessions"]
    [session] = [s for s in listed if s["title"] == "Release notes"]
    assert session["model"] == "echo-2"
    session_page = owner.get(f"/sessions/{session['id']}")
    assert token not in session_page.text
    assert poll("the first reply", lambda: "echo: hello" in owner.get(f"/sessions/{session['id']}").text)
    refused = owner.post("/sessions/new", {"title": "x", "provider": "nosuch"})
    assert refused.status_code == 400 and "nosuch" in refused.text and 'value="x"' in refused.text


# A conversation's agent tokens -------------------------------------------------------------------


def lines_of(page: requests.Response, key: str) -> str:
    """The text of one client's ready-made lines on a token page."""
    found = re.search(rf'<pre id="lines-{key}">(.*?)</pre>', page.text, flags=re.S)
    assert found is not None, key
    return html.unescape(found.group(1))


def test_a_token_minted_on_the_conversations_page_comes_with_each_clients_lines_and_is_revoked_there(
    relay: Relay, owner: Browser, desk: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    here = f"/sessions/{desk.session_id}/tokens"
    assert f'href="{here}"' in owner.get(f"/sessions/{desk.session_id}").text
    assert "This conversation has 1 working agent token." in text_of(owner.get(here))
    page = owner.post(here)
    assert page.status_code == 201 and page.headers["Cache-Control"] == "no-store"
    token = html.unescape(re.search(r'<code class="token" id="agent-token">([^<]+)</code>', page.text).group(1))
    assert token.startswith("oar_s_") and "2 working agent tokens" in text_of(page)
    address = relay.config.base_url
    assert lines_of(page, "claude") == (
        f'claude mcp add --transport http relay {address}/mcp --header "Authorization: Bearer {token}"')
    assert tomllib.loads(lines_of(page, "codex")) == {"mcp_servers": {"relay": {
        "url": f"{address}/mcp", "bearer_token_env_var": "OAR_TOKEN", "default_tools_approval_mode": "approve"}}}
    assert lines_of(page, "codex-token") == f"export OAR_TOKEN={token}"
    assert json.loads(lines_of(page, "cursor")) == {"mcpServers": {"relay": {
        "url": f"{address}/mcp", "headers": {"Authorization": f"Bearer {token}"}}}}
    stdio = json.loads(lines_of(page, "stdio"))["mcpServers"]["relay"]
    assert stdio["args"][-1] == "mcp" and (stdio["env"]["OAR_URL"], stdio["env"]["OAR_TOKEN"]) == (address, token)
    minted = Agent(relay.url, token, desk.session_id)
    assert minted.call("list_sessions", relay="this")[0] == 200
    assert desk.call("list_sessions", relay="this")[0] == 200  # the token made before still works
    assert token not in owner.get(here).text  # shown once

    revoked = owner.post(f"{here}/revoke", {"token": token})
    assert revoked.url.endswith(here) and "Revoked the token just shown" in text_of(revoked)
    assert minted.call("list_sessions", relay="this")[0] == 401
    assert desk.call("list_sessions", relay="this")[0] == 200
    again = owner.post(f"{here}/revoke", {"token": token})
    assert "That is not an agent token on this relay" in text_of(again)

    another = Agent(relay.url, html.unescape(re.search(r'id="agent-token">([^<]+)<', owner.post(here).text).group(1)),
                    desk.session_id)
    everything = owner.post(f"{here}/revoke-all")
    assert "Revoked 2 agent tokens of “desk”" in text_of(everything) and "has 0 working agent tokens" in text_of(everything)
    for agent in (desk, another):
        status, answer = agent.call("list_sessions", relay="this")
        assert (status, answer["code"]) == (401, "REMOTE_RELAY_UNAUTHORIZED")
    assert token not in caplog.text and another.token not in caplog.text  # never in a log line


def test_the_token_pages_forms_need_the_csrf_token_and_an_archived_conversation_gets_none(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    here = f"/sessions/{desk.session_id}/tokens"
    owner.get(here)
    before = snapshot(relay)
    for path in (here, f"{here}/revoke-all", f"{here}/revoke"):
        for csrf in ("", "not-the-token"):
            response = owner.post(path, {"token": desk.token}, csrf=csrf)
            assert response.status_code == 400 and "security token (CSRF)" in response.text, (path, csrf)
            assert "oar_s_" not in response.text.replace(desk.token, "")
    assert snapshot(relay) == before and desk.call("list_sessions", relay="this")[0] == 200
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/archive")
    page = owner.get(here)
    assert "This session is archived" in text_of(page) and f'action="{here}"' not in page.text
    refused = owner.post(here)
    assert f"Session {desk.session_id[:8]} is archived" in text_of(refused) and "oar_s_" not in refused.text
    assert owner.get("/sessions/nosuchsession/tokens").status_code == 404


def test_the_lines_name_the_public_url_else_the_relays_own_address_else_the_pages() -> None:
    page = "http://192.168.1.20:8080/"
    assert relay_address(Config(host="127.0.0.1", port=9000), page) == "http://127.0.0.1:9000"
    assert relay_address(Config(host="0.0.0.0", port=8080, public_url="https://relay.example/"), page) == "https://relay.example"
    for everywhere in ("0.0.0.0", "::"):
        assert relay_address(Config(host=everywhere, port=8080), page) == "http://192.168.1.20:8080"


# A session page ---------------------------------------------------------------------------------


def test_a_conversation_whose_agent_is_outside_shows_what_waits_for_it_and_can_be_switched(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    helper = relay.conversation("helper", agent_outside=True)
    desk.ok("send", relay="this", session=helper.session_id, text="for later", wait_seconds=0)
    here = f"/sessions/{helper.session_id}"
    page = owner.get(here).text
    assert "agent outside" in page and "Waiting for its agent: 1" in page and "Its agent has taken nothing yet" in page
    assert re.search(r'name="agent_outside"\s+checked', page)
    assert "agent outside" in owner.get("/").text
    switched = owner.post(f"{here}/agent-outside", {})
    assert "what waits runs on its provider" in switched.text
    assert relay.owner.get(f"/api/v1/owner/sessions/{helper.session_id}")["session"]["agentOutside"] is False
    assert poll("the waiting prompt answered on the provider", lambda: "echo: for later" in owner.get(here).text)


def test_a_session_page_shows_agent_prompts_with_their_badge_tool_lines_and_events_as_compact_lines(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    other = relay.conversation("release")
    desk.ok("send", relay="this", session=other.session_id, text="Tag the release", wait_seconds=30)
    page = text_of(owner.get(f"/sessions/{other.session_id}"))
    assert "↗ from this relay · desk · echo-1" in page and "Tag the release" in page and "echo: Tag the release" in page
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages",
                     {"text": 'look around\n!relay {"action": "list_sessions", "relay": "this"}'})
    assert poll("the tool line", lambda: "🛰️ list_sessions" in text_of(owner.get(f"/sessions/{desk.session_id}")))
    asked = desk.ok("ask", question="Ship it?")["question_id"]
    relay.owner.post(f"/api/v1/owner/questions/{asked}", {"answer": "yes"})
    assert poll("the event line", lambda: "question_answered" in owner.get(f"/sessions/{desk.session_id}").text)
    blocks = message_blocks(owner.get(f"/sessions/{desk.session_id}").text)
    assert any(kind == "msg automated event" and "question_answered" in text for kind, text in blocks)
    assert not any(kind == "msg user" and "relay event" in text for kind, text in blocks)


def test_writing_as_the_user_switching_may_create_and_archiving_from_the_page(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    here = f"/sessions/{desk.session_id}"
    owner.get(here)
    with database.connection_context():
        SessionRow.update(loop_prompt_count=7).where(SessionRow.id == desk.session_id).execute()
    owner.post(f"{here}/messages", {"text": "Hello from the page"})
    assert poll("the reply", lambda: "echo: Hello from the page" in owner.get(here).text)
    with database.connection_context():
        assert SessionRow.get_by_id(desk.session_id).loop_prompt_count == 0
    page = owner.post(f"{here}/may-create", {"may_create_sessions": "on"})
    assert "may now start sessions" in page.text and re.search(r'name="may_create_sessions"\s+checked', page.text)
    assert relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["session"]["mayCreateSessions"] is True
    owner.post(f"{here}/may-create", {})
    assert "mayCreateSessions" not in relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["session"]
    empty = owner.post(f"{here}/messages", {"text": "   "})
    assert "write needs text" in html.unescape(empty.text)
    archived = owner.post(f"{here}/archive")
    assert "Archived" in archived.text and "This session is archived." in archived.text
    assert relay.owner.get(f"/api/v1/owner/sessions/{desk.session_id}")["session"]["archived"] is True
    late = owner.post(f"{here}/messages", {"text": "too late"})
    assert "is archived. Nothing was sent." in late.text


def test_a_question_card_is_answered_from_the_inbox_and_an_ask_dismissed(relay: Relay, owner: Browser, desk: Agent) -> None:
    waiting = desk.ok("create_session", relay="this", text="!ask Which colour? | red | blue", wait_seconds=30)
    asked = desk.ok("ask", question="Merge it?", options=["Yes", "No"], recommendation="Yes")["question_id"]
    inbox = owner.get("/inbox")
    shown = text_of(inbox)
    assert "Which colour?" in shown and "Merge it?" in shown and "Recommended: Yes" in shown
    assert re.search(r'<span class="count"[^>]*>2</span>', inbox.text)
    [card] = waiting["pendingQuestions"]
    page = owner.post(f"/questions/{card['id']}", {"choice": "blue", "next": "/inbox"})
    assert "Answered." in page.text and f'data-question="{card["id"]}"' not in page.text
    # The Inbox lists it as decided, with how (docs/notifications.md#how-it-was-decided).
    assert "Which colour? ·" in text_of(page) and "answered (“blue”) on the relay's page" in html.unescape(page.text)
    done = desk.ok("wait", relay="this", session=waiting["session"], message_id=waiting["message_id"], wait_seconds=30)
    assert done["reply"]["text"] == "echo: done\nanswer: blue"
    page = owner.post(f"/questions/{asked}", {"dismiss": "1", "next": "//evil.example/"})
    assert page.url == relay.url + "/inbox"  # only paths on this site are followed
    assert "Dismissed." in page.text and "Nothing is waiting for you." in page.text
    again = owner.post(f"/questions/{asked}", {"answer": "late"})
    assert f"Question {asked} is dismissed, not pending." in html.unescape(again.text)


@pytest.mark.parametrize("next_field", [
    "//evil.example/", "/\t/evil.example", "/\n/evil.example", "/\\evil.example", "/inbox\r\nSet-Cookie: x=1",
    "/inbox\r", " /inbox", "/in box", "https://evil.example/", "evil.example", "/\uff0fevil.example", "/\u200b/evil.example",
    "",
])
def test_a_form_returns_only_to_a_path_on_this_site(relay: Relay, owner: Browser, next_field: str) -> None:
    """A refused card decision goes back to `next` when it is a same-site path, else to the Inbox."""
    response = owner.post("/cards/no-such-card", {"decision": "allow", "next": next_field}, allow_redirects=False)
    assert response.status_code == 303, response.text[:300]
    assert response.headers["Location"] == "/inbox"


def test_a_form_returns_to_a_path_on_this_site_it_names(relay: Relay, owner: Browser) -> None:
    response = owner.post("/cards/no-such-card", {"decision": "allow", "next": "/settings?x=1#providers"},
                          allow_redirects=False)
    assert response.status_code == 303 and response.headers["Location"] == "/settings?x=1#providers"


def test_a_question_card_on_the_session_page_takes_free_text(relay: Relay, owner: Browser, desk: Agent) -> None:
    waiting = desk.ok("create_session", relay="this", text="!ask Name the branch?", wait_seconds=30)
    here = f"/sessions/{waiting['session']}"
    page = owner.get(here)
    assert "Name the branch?" in page.text and 'name="answer"' in page.text
    [card] = waiting["pendingQuestions"]
    owner.post(f"/questions/{card['id']}", {"answer": "release/2.4", "next": here})
    assert poll("the answered turn", lambda: "answer: release/2.4" in owner.get(here).text)


def test_the_live_endpoint_shows_the_reply_being_written(relay: Relay, owner: Browser, desk: Agent) -> None:
    relay.owner.post(f"/api/v1/owner/sessions/{desk.session_id}/messages", {"text": "!stream 40 100"})

    def writing() -> dict[str, Any] | None:
        live = owner.get(f"/live/sessions/{desk.session_id}").json()
        flight = live["inFlight"]
        return live if flight and "chunk 2" in flight["text"] else None

    live = poll("a partial reply", writing)
    assert live["state"] == "running_turn" and set(live["regions"]) >= {"messages", "inflight", "cards", "nav"}
    page = owner.get(f"/sessions/{desk.session_id}")
    assert "data-inflight-text" in page.text
    for cookies in ({}, {"oar_page": "forged"}):
        assert requests.get(f"{relay.url}/live/sessions/{desk.session_id}", cookies=cookies, timeout=10).status_code == 401


# Errors -------------------------------------------------------------------------------------------


def test_bad_page_requests_get_small_html_pages_and_the_api_keeps_json(relay: Relay, owner: Browser) -> None:
    cases = [
        ("GET", "/sessions/nosuchsession", 404, 'has no session "nosuchsession"'),
        ("GET", "/no-such-page", 404, "There is no such page"),
        ("PUT", "/inbox", 405, "does not take that kind of request"),
        ("GET", "/sessions/%00%ff", 404, "There is no such page"),
    ]
    for method, path, status, words in cases:
        response = owner.http.request(method, relay.url + path, timeout=30)
        assert response.status_code == status, (path, response.status_code)
        assert response.headers["Content-Type"].startswith("text/html") and words in html.unescape(response.text), path
        assert "Traceback" not in response.text
    big = owner.post("/settings", {"relay_name": "x" * 2_000_000})
    assert big.status_code == 413 and big.headers["Content-Type"].startswith("text/html")
    nul = owner.post("/sessions/new", {"title": "a\x00b"})
    assert nul.status_code == 400 and "cannot store" in nul.text
    api = relay.owner.request("GET", "/api/v1/owner/nosuch")
    assert api[0] == 404 and api[1]["code"] == "REMOTE_RELAY_NOT_FOUND"
    status, body = relay.owner.request("GET", "/api/v1/owner/sessions/nosuchsession")
    assert status == 404 and body["ok"] is False


def test_the_owner_grants_and_revokes_remembered_allows_from_the_session_page(relay: Relay, owner: Browser) -> None:
    agent = relay.conversation("scripts", approvals=())
    here = f"/sessions/{agent.session_id}"
    owner.get(here)
    page = owner.post(f"{here}/approvals", {"approvals": ["create_sessions", "watch_sessions"]})
    assert "Saved what this conversation" in page.text
    shown = relay.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["session"]["approvals"]
    assert shown == ["create_sessions", "watch_sessions"]
    owner.post(f"{here}/approvals", {})
    assert relay.owner.get(f"/api/v1/owner/sessions/{agent.session_id}")["session"]["approvals"] == []
    bad = owner.post(f"{here}/approvals", {"approvals": ["everything"]})
    assert "approvals must be a list of" in bad.text


def test_watching_counts_the_open_sessions_an_all_subscription_sees(relay: Relay, owner: Browser, desk: Agent) -> None:
    others = [relay.conversation(title) for title in ("build", "docs", "release")]
    desk.ok("subscribe", sessions=["all"], exclude=[others[0].session_id])
    page = text_of(owner.get("/"))
    assert "watching 2 sessions" in page and "desk watches all sessions but 1" in page
    relay.owner.post(f"/api/v1/owner/sessions/{others[1].session_id}/archive")
    assert "watching 1 session " in text_of(owner.get("/")) + " "


def test_watching_counts_no_stand_in_as_the_list_shows_none(relay: Relay, owner: Browser, desk: Agent) -> None:
    """A stand-in for another relay's calling conversation (docs/relays.md#on-the-receiving-relay)
    is not listed, so an ["all"] subscription's count on the page leaves it out too."""
    for title in ("build", "docs"):
        relay.conversation(title)
    desk.ok("subscribe", sessions=["all"])
    with database.connection_context():
        SessionRow.create(id=ids.session_id(), title="caller on build-box", provider="remote", remote_relay="build-box")
    page = text_of(owner.get("/"))
    assert "watching 2 sessions" in page and "caller on build-box" not in page


def test_bad_card_decisions_and_answers_on_the_page_say_why_and_change_nothing(
    relay: Relay, owner: Browser, desk: Agent
) -> None:
    ops = relay.conversation("ops", approvals=())
    relay.owner.post(f"/api/v1/owner/sessions/{ops.session_id}/messages",
                     {"text": relay_line({"action": "create_session", "relay": "this", "text": "x"})})
    card = pending_card(relay)
    waiting = desk.ok("create_session", relay="this", text="!ask Which colour? | red | blue", wait_seconds=30)
    [question] = waiting["pendingQuestions"]
    before = snapshot(relay)
    for path, form, says in [
        ("/cards/card_000000000000", {"decision": "allow"}, 'has no approval card "card_000000000000"'),
        (f"/cards/{card['id']}", {"decision": "maybe"}, 'decision must be "allow", "allow_once" or "deny"'),
        ("/questions/q_000000000000", {"answer": "red"}, 'has no question "q_000000000000"'),
        (f"/questions/{question['id']}", {"choice": "green"}, 'choices must be among the question\'s options ("red", "blue")'),
        (f"/questions/{question['id']}", {"answer": "x" * 100_001}, "answer"),
    ]:
        page = owner.post(path, {**form, "next": "/inbox"})
        assert page.status_code == 200 and says in html.unescape(page.text), (path, text_of(page)[:300])
    after = snapshot(relay)  # (the two waiting turns' heartbeats move on; nothing else may)
    assert after["counts"] == before["counts"]
    assert all(after["rows"][table] == before["rows"][table] for table in ("Card", "Question", "Session", "Approval"))
    owner.post(f"/cards/{card['id']}", {"decision": "deny", "next": "/inbox"})
    again = owner.post(f"/cards/{card['id']}", {"decision": "allow", "next": "/inbox"})
    assert f"Card {card['id']} is denied, not pending. Nothing was changed." in html.unescape(again.text)


def test_a_card_whose_agent_stopped_waiting_says_so_on_the_page(relay: Relay, owner: Browser) -> None:
    """An HTTP caller that gave up before the owner decided (tests/test_waiting_cards.py): the first-create
    card stays in the Inbox and on the conversation's page, marked."""
    scripts = relay.conversation("scripts", approvals=())
    with pytest.raises(requests.exceptions.ReadTimeout):
        scripts.http.post(scripts.base_url + "/api/v1/relay_tool", timeout=1.0,
                          json={"action": "create_session", "relay": "this", "text": "hi"})
    scripts.http.close()
    poll("the card marked", lambda: [c for c in relay.owner.get("/api/v1/owner/inbox")["cards"] if c["stoppedWaiting"]])
    for path in ("/inbox", f"/sessions/{scripts.session_id}"):
        page = text_of(owner.get(path))
        assert "The agent stopped waiting: nothing was done." in page, path
        assert "This agent wants to start sessions on this relay" in page, path
