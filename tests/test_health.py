"""`GET /healthz` (docs/operations.md#health-check): what an anonymous caller learns when a part fails."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import requests

from tests.support.clients import poll
from tests.support.relays import WEB, RelayStack, make_config
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
    finally:
        stack.stop()
