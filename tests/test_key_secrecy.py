"""Provider API keys are stored, never shown back, never logged (SPEC §11, §16).

A relay of its own runs with every log at DEBUG, its worker processes' output and the web
server's log captured to files; providers get distinctive keys; turns succeed and fail in
the ways that make servers quote a key back (a 401 naming it, a 500 echoing it, a model
discovery refused with it); then no answer, listing, transcript, error text or log holds a key.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oar.core.db import database
from oar.providers import ensure_builtin
from tests.conftest import FAST_TIMES, PROJECT, Relay, Stack, make_config, stack_environment
from tests.fakes.llm import FakeLLM
from tests.fakes.runs import FakeRunsServer
from tests.servers import create_postgres_database, drop_postgres_database

CHAT_KEY = "sk-distinctive-chat-key-7Q9xW2"
RUNS_KEY = "hk-distinctive-runs-key-3Zp8Lm"
WRONG_KEY = "sk-distinctive-wrong-key-5Kd2Vb"
KEYS = (CHAT_KEY, RUNS_KEY, WRONG_KEY)


class LoggedStack(Stack):
    """The conftest Stack with its workers logging at DEBUG into a file."""

    def start_workers(self) -> None:
        self.log_path = Path(self.config.data_dir).parent / "workers.log"
        self.log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop_workers
        env = {**stack_environment(self.config, self.times), "OAR_LOG_LEVEL": "DEBUG"}
        self.workers = subprocess.Popen(
            [sys.executable, "-m", "oar", "worker", "--processes", str(self.worker_processes)],
            cwd=PROJECT, env=env, stdout=self.log_file, stderr=subprocess.STDOUT,
        )

    def stop_workers(self) -> None:
        super().stop_workers()
        self.log_file.close()


@pytest.fixture
def logged(tmp_path: Path, redis_url: str) -> Iterator[tuple[LoggedStack, Relay, Path]]:
    """A relay of its own (the shared relay's database is restored afterwards), with logs."""
    external = os.environ.get("OAR_TEST_DATABASE_URL")
    database_url = create_postgres_database(external) if external else None
    config = make_config(tmp_path / "relay", redis_url, database_url)
    web_log = tmp_path / "web.log"
    handler = logging.FileHandler(web_log)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    previous = database.obj
    stack = LoggedStack(config, FAST_TIMES)
    try:
        relay = stack.start()
        with database.connection_context():
            ensure_builtin()
        relay.settings(agent_sessions_enabled=True, rate_calls_per_minute=0, rate_writes_per_minute=0)
        yield stack, relay, web_log
    finally:
        if getattr(stack, "server", None) is not None:
            stack.stop()
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        if previous is not None:
            database.initialize(previous)  # the shared `relay` fixture's database, as it was
        if database_url:
            drop_postgres_database(database_url)


def test_no_api_key_appears_in_answers_listings_transcripts_errors_or_logs(
    logged: tuple[LoggedStack, Relay, Path],
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

        stack.stop_workers()  # flushes their output
        worker_log = stack.log_path.read_text(errors="replace")
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
