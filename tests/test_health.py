"""`GET /healthz` and `GET /readyz` (docs/operations.md#health-check): what an anonymous caller learns when a part
fails or is not there."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.clients import poll
from tests.support.relays import CLOCK, FAST_TIMES, WEB, WORKER, RelayStack, make_config, own_relay
from tests.support.servers import free_port

pytestmark = pytest.mark.stack  # a web process of its own


def test_it_says_the_database_is_unavailable_without_the_error_text(tmp_path: Path, redis_url: str) -> None:
    password = "pw-" + secrets.token_hex(8)
    # Nothing listens on port 1 of loopback: every connection is refused at once.
    database_url = f"postgresql://oar_user:{password}@127.0.0.1:1/oar_nowhere"
    config = make_config(tmp_path / "relay", redis_url, database_url, port=free_port())
    stack = RelayStack(config, logs=tmp_path / "logs")
    try:
        stack.start(WEB, "-m", "gunicorn", "wsgi:app", OAR_LOG_LEVEL="WARNING")

        def answered() -> list[requests.Response]:  # a list: a 503 response itself is falsy
            assert stack.parts[WEB].running(), stack.parts[WEB].log()
            try:
                return [requests.get(f"http://127.0.0.1:{config.port}/healthz", timeout=10)]
            except requests.ConnectionError:
                return []

        [health] = poll("the web answers /healthz", answered, seconds=60)
        assert health.status_code == 503
        body = health.json()
        assert body["ok"] is False and body["problems"] == ["database: unavailable"]
        for secret_ish in (password, "oar_user", "oar_nowhere", "127.0.0.1", "port", "Error", "refused"):
            assert secret_ish not in health.text
        # The operator finds the cause in the web's log.
        assert poll("the error is logged", lambda: "health check: the database failed" in stack.parts[WEB].log(20000))
        assert "Connection refused" in stack.parts[WEB].log(20000)
        readiness = requests.get(f"http://127.0.0.1:{config.port}/readyz", timeout=10)
        assert readiness.status_code == 503
        assert readiness.json()["parts"] == {"database": "unavailable", "redis": "ok", "worker": "none", "clock": "none"}
        for secret_ish in (password, "oar_user", "oar_nowhere", "127.0.0.1", "port", "Error", "refused"):
            assert secret_ish not in readiness.text
    finally:
        stack.stop()


READY = {"database": "ok", "redis": "ok", "worker": "ok", "clock": "ok"}
# Workers and the clock say they are there five times a second here, and count as gone after 2 s.
PRESENCE_TIMES = {**FAST_TIMES, "ALIVE_SECONDS": "0.2", "ALIVE_STALE_SECONDS": "2"}


def readiness(stack: RelayStack) -> tuple[int, dict[str, Any]]:
    answer = requests.get(f"{stack.url}/readyz", timeout=10)
    return answer.status_code, answer.json()


def parts_become(stack: RelayStack, parts: dict[str, str]) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        status, body = readiness(stack)
        return body if body["parts"] == parts and status == (200 if parts == READY else 503) else None

    return poll(f"/readyz to say {parts}", seen, seconds=30)


def test_readiness_says_which_part_is_not_there(tmp_path: Path) -> None:
    with own_relay(tmp_path, PRESENCE_TIMES, clock=True) as stack:
        ready = parts_become(stack, READY)
        assert ready["ready"] is True and ready["relay"] == "desk"
        stack.stop(WORKER)  # a worker that stops takes itself out at once
        assert parts_become(stack, {**READY, "worker": "none"})["ready"] is False
        stack.start_worker()
        parts_become(stack, READY)
        stack.kill(CLOCK)  # a clock that dies drops out once its last word is 2 s old
        assert parts_become(stack, {**READY, "clock": "none"})["ready"] is False
        assert readiness(stack)[0] == 503
        stack.start_clock()
        parts_become(stack, READY)
