"""`GET /healthz` and `GET /readyz` (docs/operations.md#health-check): what an anonymous caller learns when a part
fails or is not there."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

import pytest
import requests

from oar.core.db import database
from oar.owner.bootstrap import (
    HISTORY_TABLE,
    migration_state,
    pending_for_health,
    pending_migrations,
    unknown_migrations,
)
from tests.support.clients import poll
from tests.support.relays import CLOCK, FAST_TIMES, WEB, WORKER, Relay, RelayStack, make_config, own_relay
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
        stack.discard()


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


def test_it_reads_the_migrations_in_one_query(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """The health checks ask on every probe: one query of the history table, not a Runner's three."""
    with database.connection_context():
        with caplog.at_level(logging.DEBUG, logger="peewee"):
            assert migration_state() == ([], [])
        queries = [record for record in caplog.records if record.name == "peewee"]
        assert len(queries) == 1, [record.getMessage() for record in queries]
        # A migration this code does not know (a newer node's), then one it has but the database lacks.
        newest = max(row[0] for row in database.execute_sql(f'SELECT "name" FROM "{HISTORY_TABLE}"'))
        database.execute_sql(f'INSERT INTO "{HISTORY_TABLE}" ("name", "applied") VALUES ({database.param}, CURRENT_TIMESTAMP)',
                             ("9999_newer",))
        database.execute_sql(f'DELETE FROM "{HISTORY_TABLE}" WHERE "name" = {database.param}', (newest,))
        try:
            assert migration_state() == ([newest], ["9999_newer"])
            assert (pending_migrations(), unknown_migrations()) == ([newest], ["9999_newer"])
            assert requests.get(f"{relay.url}/readyz", timeout=10).json()["parts"]["database"] == "newer than this node"
        finally:
            database.execute_sql(f'DELETE FROM "{HISTORY_TABLE}" WHERE "name" = {database.param}', ("9999_newer",))
            database.execute_sql(f'INSERT INTO "{HISTORY_TABLE}" ("name", "applied") VALUES ({database.param}, CURRENT_TIMESTAMP)',
                                 (newest,))
        assert migration_state() == ([], [])


def test_healthz_asks_no_more_once_every_migration_was_applied(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """Migrations are only ever applied: once none is pending, /healthz costs no migration query."""
    with database.connection_context():
        assert pending_for_health() == []
        with caplog.at_level(logging.DEBUG, logger="peewee"):
            assert pending_for_health() == []
        assert [record.getMessage() for record in caplog.records if record.name == "peewee"] == []
    assert requests.get(f"{relay.url}/healthz", timeout=10).json()["ok"] is True


def test_healthz_answers_from_its_last_healthy_answer_for_a_second(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """A probe storm costs no query and no Redis ping (OAR_HEALTH_REUSE_SECONDS, 1 s): the second of
    two probes in a row is answered from the first, as healthy and naming the relay alike."""

    def probe_twice() -> tuple[dict[str, Any], list[str]]:
        first = requests.get(f"{relay.url}/healthz", timeout=10).json()
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="peewee"):
            second = requests.get(f"{relay.url}/healthz", timeout=10).json()
        assert second == first
        return second, [record.getMessage() for record in caplog.records if record.name == "peewee"]

    # A slow moment may put a second between the two: three tries.
    tries = [probe_twice() for _ in range(3)]
    assert all(answer["ok"] is True and answer["relay"] == relay.name for answer, _ in tries)
    assert any(queries == [] for _, queries in tries), tries
