"""A database that stays locked answers 503 with Retry-After in the error shape (docs/errors.md).

A relay of its own on a real SQLite file with a short busy timeout; another connection holds
the write lock (`BEGIN IMMEDIATE`) while agents and the owner write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.relays import FAST_TIMES, Relay, own_relay

pytestmark = pytest.mark.stack  # a relay of its own


@pytest.fixture
def busy_relay(tmp_path: Path, redis_url: str) -> Iterator[Relay]:
    times = {**FAST_TIMES, "SQLITE_BUSY_SECONDS": "0.3"}
    with own_relay(tmp_path, times, redis_url=redis_url, worker=False) as stack:
        if stack.config.database_url:
            pytest.skip("SQLite's write lock; PostgreSQL has no such lock")
        assert stack.relay is not None
        yield stack.relay


def _assert_busy(response: requests.Response) -> None:
    assert response.status_code == 503, response.text[:300]
    assert response.headers["Retry-After"] == "5"
    body = response.json()
    assert body["ok"] is False and body["code"] == "REMOTE_RELAY_DATABASE_BUSY"
    assert body["retryAfterSeconds"] == 5 and "try again in 5 seconds" in body["error"]


def test_a_write_that_finds_the_database_locked_is_a_503_with_retry_after(busy_relay: Relay) -> None:
    relay = busy_relay
    desk = relay.conversation("desk")
    before = relay.owner.get("/api/v1/owner/settings")["settings"]["relay_name"]
    holder = sqlite3.connect(relay.config.sqlite_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        owner = requests.patch(relay.url + "/api/v1/owner/settings", json={"relay_name": "renamed"},
                               headers={"Authorization": f"Bearer {relay.owner.token}"}, timeout=30)
        _assert_busy(owner)
        agent = requests.post(relay.url + "/api/v1/relay_tool",
                              json={"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 0},
                              headers={"Authorization": f"Bearer {desk.token}"}, timeout=30)
        _assert_busy(agent)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert relay.owner.get("/api/v1/owner/settings")["settings"]["relay_name"] == before
