"""Provider API keys are stored, never shown back, never logged (docs/providers.md, docs/owner-api.md#providers).

A relay of its own runs with every log at DEBUG, its worker processes' output and the web
server's log captured to files; providers get distinctive keys; turns succeed and fail in
the ways that make servers quote a key back (a 401 naming it, a 500 echoing it, a model
discovery refused with it); then no answer, listing, transcript, error text or log holds a key.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from oar.core import settings
from oar.core.db import database
from oar.providers import ensure_builtin
from tests.fakes.llm import FakeLLM
from tests.fakes.runs import FakeRunsServer
from tests.support.relays import Relay, RelayStack, own_relay

pytestmark = pytest.mark.stack  # relays of its own

CHAT_KEY = "sk-distinctive-chat-key-7Q9xW2"
RUNS_KEY = "hk-distinctive-runs-key-3Zp8Lm"
WRONG_KEY = "sk-distinctive-wrong-key-5Kd2Vb"
KEYS = (CHAT_KEY, RUNS_KEY, WRONG_KEY)


@pytest.fixture
def logged(tmp_path: Path, redis_url: str) -> Iterator[tuple[RelayStack, Relay, Path]]:
    """A relay of its own (the shared relay's database is restored afterwards), logging at DEBUG:
    the web (in this process) into web.log, its worker processes into their log file."""
    web_log = tmp_path / "web.log"
    handler = logging.FileHandler(web_log)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with own_relay(tmp_path, redis_url=redis_url, worker=False) as stack:
            assert stack.relay is not None
            with database.connection_context():
                ensure_builtin()
            stack.start_worker(OAR_LOG_LEVEL="DEBUG")
            yield stack, stack.relay, web_log
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)


def test_no_api_key_appears_in_answers_listings_transcripts_errors_or_logs(
    logged: tuple[RelayStack, Relay, Path],
) -> None:
    stack, relay, web_log = logged
    llm = FakeLLM(api_key=CHAT_KEY).start()
    runs = FakeRunsServer(api_key=RUNS_KEY).start()
    try:
        answers: list[Any] = []

        def put(name: str, body: dict[str, Any]) -> None:
            status, answer = relay.owner.request("PUT", f"/api/v1/owner/providers/{name}", body)
            assert status == 200, answer
            answers.append(answer)

        put("chatty", {"kind": "chat", "base_url": llm.base_url, "api_key": CHAT_KEY})
        put("claude", {"kind": "anthropic", "base_url": llm.base_url, "api_key": CHAT_KEY})
        put("hermes", {"kind": "runs", "base_url": runs.base_url, "api_key": RUNS_KEY})
        put("wrong", {"kind": "chat", "base_url": llm.base_url, "api_key": WRONG_KEY})  # discovery refused, quoting it
        assert "HTTP 401" in answers[-1]["modelNote"]
        put("wrong", {"kind": "chat", "base_url": llm.base_url, "models": ["fake-large"]})  # keeps the stored key

        desk = relay.conversation("desk")
        turns = [
            ("chatty", "hello"), ("chatty", "#401"), ("chatty", "#500"), ("chatty", "#html"),
            ("claude", "hello"), ("claude", "#401"), ("claude", "#500"),
            ("hermes", "hello"), ("hermes", "#401"), ("hermes", "#500"), ("hermes", "#html"),
            ("wrong", "hello"),  # its stored key is refused, quoted back
        ]
        sessions: list[str] = []
        for provider, text in turns:
            body = desk.ok("create_session", relay="this", provider=provider, text=text, wait_seconds=30)
            assert body["status"] in ("done", "failed"), body
            answers.append(body)
            sessions.append(body["session"])
        failures = [body["error"] for body in answers if isinstance(body, dict) and body.get("status") == "failed"]
        assert len(failures) == 9 and any("[key hidden]" in error for error in failures)

        owner_reads = [relay.owner.get("/api/v1/owner/providers")]
        owner_reads += [relay.owner.get(f"/api/v1/owner/providers/{name}") for name in ("chatty", "claude", "hermes", "wrong")]
        assert all(read["provider"]["apiKeySet"] is True for read in owner_reads[1:])
        answers += owner_reads
        answers += [desk.ok("read_session", relay="this", session=session, include_activity=True) for session in sessions]
        answers += [desk.ok(action, relay="this") for action in ("relay_info", "usage")]
        answers.append(desk.ok("list_sessions", relay="this", scope="all"))
        shown = json.dumps(answers, ensure_ascii=False)
        for key in KEYS:
            assert key not in shown

        stack.stop("worker")  # flushes their output
        worker_log = stack.log_path("worker").read_text(errors="replace")
        web = web_log.read_text(errors="replace")
        # The logs are the real thing: the workers logged their calls to the providers, the web its requests.
        assert "/v1/chat/completions" in worker_log and "/v1/runs" in worker_log
        assert "PUT /api/v1/owner/providers/hermes" in web
        for key in KEYS:
            assert key not in worker_log, "a key in the workers' log"
            assert key not in web, "a key in the web server's log"
        for path in Path(relay.config.data_dir).rglob("*"):
            if path.is_file() and path.suffix in (".log", ".txt", ".out", ".json"):
                text = path.read_text(errors="replace")
                assert not any(key in text for key in KEYS), path
    finally:
        llm.stop()
        runs.stop()


def test_debug_logs_hold_no_page_secret_sign_in_or_token(logged: tuple[RelayStack, Relay, Path]) -> None:
    """At DEBUG the database's SQL is logged without its parameters: the page's signing key,
    sign-in ids, the owner token and agent tokens stay out of every log (docs/operations.md#logs)."""
    stack, relay, web_log = logged
    browser = requests.Session()
    form = browser.get(relay.url + "/", timeout=30).text
    csrf = html.unescape(re.search(r'name="csrf_token" value="([^"]+)"', form).group(1))  # type: ignore[union-attr]
    signed = browser.post(relay.url + "/", data={"csrf_token": csrf, "token": relay.config.owner_token}, timeout=30)
    assert "Sign out" in signed.text
    desk = relay.conversation("desk")
    assert desk.ok("list_sessions", relay="this")
    with database.connection_context():
        secret = settings.get_value("page_secret_key")
    assert secret
    stack.stop("worker")
    web = web_log.read_text(errors="replace")
    assert 'INSERT OR IGNORE INTO "setting"' in web or 'INSERT INTO "setting"' in web  # SQL is logged, at DEBUG
    for name, value in (("page secret", secret), ("owner token", relay.config.owner_token or ""),
                        ("agent token", desk.token), ("page cookie", browser.cookies["oar_page"])):
        assert value not in web, f"the {name} in the web server's log"
        assert value not in stack.log_path("worker").read_text(errors="replace"), f"the {name} in the workers' log"
