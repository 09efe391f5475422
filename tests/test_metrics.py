"""`GET /metrics` (docs/operations.md#watching-it): a real relay — gunicorn web processes, an RQ
worker pool and the clock, all counting into one multiprocess folder — scraped after it served
calls, turns, a card, a schedule and a notification; the series are there with the figures
those made, and nothing of a title, prompt, token or URL is."""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from oar.core import metrics
from oar.core.config import Config, ConfigError, check, from_environment
from tests.support.clients import poll
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay

METRICS_TOKEN = "oar_m_" + secrets.token_urlsafe(32)
# Recognisable strings planted where an agent or the owner writes them; none may reach /metrics.
TITLE = "Planted-Title-Qx7"
PROMPT = "Planted-Prompt-Zr9"
HOOK_PASSWORD = "Planted-Hook-Pw4"
# A schedule's minute is a tenth of a second here: every_minutes=10 fires each second.
TIMES = {**FAST_TIMES, "SCHEDULE_MINUTE_SECONDS": "0.1", "NOTIFY_MERGE_SECONDS": "0.2"}


class Hook:
    """A JSON webhook the notification channel posts to; wakes `received` on each post."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                hook.posts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"json://watcher:{HOOK_PASSWORD}@127.0.0.1:{self.server.server_port}/hook"


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    folder = tmp_path_factory.mktemp("metrics")
    env = {"OAR_METRICS": "on", "OAR_METRICS_TOKEN": METRICS_TOKEN, "WEB_CONCURRENCY": "2"}
    with own_relay(folder, TIMES, web="process", clock=True, env=env) as stack:
        yield stack


def scrape(relay: Relay, token: str | None = METRICS_TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.get(f"{relay.url}/metrics", headers=headers, timeout=30)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in found.items() if n == name and wanted <= got)


@pytest.mark.parametrize(("changes", "says"), [
    ({"metrics": "yes"}, "OAR_METRICS must be on or off, not 'yes'"),
    ({"metrics": "on", "metrics_token": "short"}, "OAR_METRICS_TOKEN is too weak: it is 5 characters long"),
    ({"metrics": "on", "metrics_token": "ab" * 20}, "OAR_METRICS_TOKEN is too weak: it has only 2 different characters"),
])
def test_a_bad_metrics_setting_stops_the_relay_at_start(tmp_path: Path, changes: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        check(Config(data_dir=tmp_path, **changes))  # type: ignore[arg-type]
    assert from_environment({"OAR_METRICS": " ON "}).metrics_on  # read as written, case and spaces aside


@pytest.mark.stack
def test_off_by_default_metrics_is_any_unknown_path(relay: Relay) -> None:
    answer = requests.get(f"{relay.url}/metrics", headers={"Authorization": f"Bearer {relay.config.owner_token}"}, timeout=30)
    assert answer.status_code == 404 and answer.json()["code"] == "REMOTE_RELAY_NOT_FOUND", answer.text
    assert not metrics.on()  # nothing counted in a relay's process with metrics off


@pytest.mark.stack
def test_a_wrong_or_missing_token_is_401_and_shows_nothing(watched: RelayStack) -> None:
    relay = watched.relay
    assert relay is not None
    for token in (None, "", "oar_m_wrong", relay.conversation("token probe").token, METRICS_TOKEN + "x"):
        answer = scrape(relay, token)
        assert answer.status_code == 401, (token, answer.text)
        assert answer.json()["code"] == "REMOTE_RELAY_UNAUTHORIZED" and "oar_" not in answer.text.replace("oar_m_", "")
        assert "# HELP" not in answer.text
    assert scrape(relay).status_code == 200
    assert scrape(relay, relay.config.owner_token).status_code == 200  # the owner token reads them too


@pytest.mark.stack
def test_the_series_count_what_the_relay_did(watched: RelayStack) -> None:
    relay = watched.relay
    assert relay is not None
    hook = Hook()
    status, made = relay.owner.request("PUT", "/api/v1/owner/notifications/hook", {"type": "url", "url": hook.url})
    assert status == 200, made
    agent = relay.conversation(TITLE)
    # Calls: one that answers, one refused; turns: one done, one failed.
    agent.ok("relay_info", relay="this")
    agent.refused("read_session", "REMOTE_RELAY_NOT_FOUND", relay="this", session="no-such-session")
    done = agent.ok("create_session", relay="this", title=TITLE, text=PROMPT, wait_seconds=30)
    assert done["status"] == "done", done
    failed = agent.ok("create_session", relay="this", text=f"!fail {PROMPT}", wait_seconds=30)
    assert failed["status"] == "failed", failed
    # A schedule that fires (each second here), then ends.
    scheduled = agent.ok("schedule", text=PROMPT, every_minutes=10)["schedule_id"]
    poll("the schedule to fire", lambda: next(s for s in agent.ok("list_schedules")["schedules"]
                                             if s["id"] == scheduled)["firedCount"] >= 1)
    agent.ok("unschedule", schedule_id=scheduled)
    # A card: the call waits for the owner while /metrics shows it waiting, and the webhook hears of it.
    careful = relay.conversation(TITLE + " careful", approvals=())
    answer: dict[str, Any] = {}
    call = threading.Thread(target=lambda: answer.update(result=careful.call("create_session", relay="this", text=PROMPT)))
    call.start()
    try:
        card = poll("the card", lambda: next(iter(relay.owner.get("/api/v1/owner/inbox")["cards"]), None))
        during = samples(scrape(relay).text)
        assert value(during, "oar_pending_decisions", kind="card") == 1
        assert value(during, "oar_open_waits", process="web") >= 1
        poll("the webhook's card", lambda: hook.posts)
        relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
    finally:
        call.join(60)
    assert answer["result"][0] == 200, answer

    text = scrape(relay).text
    found = samples(text)
    # Requests by route template, method and status, with durations.
    assert value(found, "oar_http_request_duration_seconds_count", route="/api/v1/relay_tool", method="POST", status="200") >= 5
    assert value(found, "oar_http_request_duration_seconds_count", route="/metrics", status="200") >= 1
    # Agent calls by action and outcome, with durations, where they ran: the web (http) and a worker's turn.
    assert value(found, "oar_agent_call_duration_seconds_count", action="relay_info", outcome="ok", via="http") == 1
    assert value(found, "oar_agent_call_duration_seconds_count", action="read_session", outcome="REMOTE_RELAY_NOT_FOUND") == 1
    assert value(found, "oar_agent_call_duration_seconds_bucket", action="relay_info", le="+Inf") == 1
    # Turns by outcome (counted by the worker), and those not ended (read at scrape time).
    assert value(found, "oar_turn_duration_seconds_count", outcome="done") >= 2
    assert value(found, "oar_turn_duration_seconds_count", outcome="failed") == 1
    assert {"queued", "running", "waiting_for_answer"} <= labels_of(found, "oar_turns", "status")
    # The schedule's firings (by the clock) and the schedules left.
    assert value(found, "oar_schedule_firings_total", outcome="fired") >= 1
    assert {"due", "waiting"} <= labels_of(found, "oar_schedules", "state")
    # The notification of the card, sent by a worker.
    sent = poll("the send counted", lambda: value(samples(scrape(relay).text), "oar_notification_sends_total",
                                                   channel_type="url", outcome="sent"))
    assert sent >= 1
    # The states read at scrape time.
    for name in ("oar_held_events", "oar_event_delivery_lag_seconds", "oar_event_ingestion_lag_seconds",
                 "oar_events_not_ingested", "oar_tasks_running", "oar_notifications_pending", "oar_relay_info"):
        assert any(n == name for n, _ in found), name
    assert {"online", "offline", "lost", "untried"} <= labels_of(found, "oar_paired_relays", "state")
    assert {"queued", "scheduled", "started", "failed"} <= labels_of(found, "oar_queue_jobs", "state")
    assert value(found, "oar_database_busy_answers_total") == 0
    # Each process kind's processes and memory: web (2 gunicorn workers), worker (pool + 2), clock.
    assert value(found, "oar_processes", process="web") == 2
    assert value(found, "oar_processes", process="worker") == 3
    assert value(found, "oar_processes", process="clock") == 1
    for kind in ("web", "worker", "clock"):
        assert value(found, "oar_process_resident_memory_bytes", process=kind) > 10_000_000, kind
    # Nothing of a title, a prompt, a token or a channel's URL.
    for secret in (TITLE, PROMPT, HOOK_PASSWORD, hook.url, agent.token, relay.config.owner_token or "", METRICS_TOKEN,
                   agent.session_id):
        assert secret not in text, secret


def labels_of(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, label: str) -> set[str]:
    return {dict(labels)[label] for n, labels in found if n == name and label in dict(labels)}


@pytest.mark.stack
def test_a_web_restart_starts_its_totals_again_and_keeps_the_others(watched: RelayStack) -> None:
    relay = watched.relay
    assert relay is not None
    before = samples(scrape(relay).text)
    worker_turns = value(before, "oar_turn_duration_seconds_count")
    assert worker_turns >= 1
    watched.stop("web")
    watched.start_web()
    # gunicorn forks its workers one after another: the second may start after the first answered.
    poll("both web processes counted", lambda: value(samples(scrape(relay).text), "oar_processes", process="web") == 2,
         seconds=30, every=0.2)
    after = samples(scrape(relay).text)
    # The web's own counts start again (its previous processes' files went as it started) …
    assert value(after, "oar_http_request_duration_seconds_count", route="/api/v1/relay_tool") == 0
    assert value(after, "oar_processes", process="web") == 2
    # … and the worker's and clock's, still running, are kept.
    assert value(after, "oar_turn_duration_seconds_count") == worker_turns
    assert value(after, "oar_processes", process="clock") == 1
    folder = Path(watched.config.data_dir) / "metrics"
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o700"
