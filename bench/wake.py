"""Wake latency: how soon a waiting `send` returns once the reply it waits for is complete.

The prompt's `completed_at` (naive UTC) is stamped as the turn's outcome is written, once its
transaction holds the write lock, before the commit and the wake-up signal; the client notes `time.time()` when the response
has arrived (read whole from a keep-alive `http.client` connection, as the load generator's:
`requests` spent a few tenths of a millisecond of its own on each response). Both clocks are this machine's, so the difference is the whole path the
product promises to keep to milliseconds (docs/waiting.md#how-waiting-wakes): the outcome's write and commit,
the Redis signal, the waiting request thread waking, reading the reply and answering.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from urllib.parse import urlsplit

from bench.owner import Owner
from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message

WAIT_SECONDS = 60


@dataclass(frozen=True)
class SendTiming:
    message_id: str
    sent_at: float  # time.time() before the request
    received_at: float  # time.time() once the response arrived


@dataclass(frozen=True)
class WakeFigures:
    wake_ms: list[float]
    round_trip_ms: list[float]


def measure_sends(url: str, owner: Owner, sends: int, warm_up: int) -> list[SendTiming]:
    """`sends` sends, one after another, to one echo session, each waiting for its reply.

    The first `warm_up` sends are left out: the first wait in each gunicorn worker process
    starts that process's wake-up listener, a one-time cost that is not the wake path.
    """
    target, _ = owner.conversation("bench echo target")
    timings: list[SendTiming] = []
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80, timeout=WAIT_SECONDS + 30)
    headers = {"Content-Type": "application/json"}
    for number in range(warm_up + sends):
        # Loop protection refuses a conversation's 31st agent-to-agent prompt until the user
        # writes in it; a new conversation per 30 sends keeps the measured path pure `send`.
        if number % defaults.LOOP_PROMPTS_BEFORE_CARD == 0:
            _caller, token = owner.conversation(f"bench sender {number // defaults.LOOP_PROMPTS_BEFORE_CARD}")
            headers["Authorization"] = f"Bearer {token}"
        payload = {
            "action": "send",
            "relay": "this",
            "session": target,
            "text": f"ping {number}",
            "wait_seconds": WAIT_SECONDS,
        }
        body = json.dumps(payload).encode()
        sent_at = time.time()
        connection.request("POST", "/api/v1/relay_tool", body=body, headers=headers)
        response = connection.getresponse()
        answer = response.read()
        received_at = time.time()
        result = json.loads(answer)
        if response.status != 200 or result.get("status") != "done":
            raise RuntimeError(f"send {number} did not finish: {result}")
        timings.append(SendTiming(result["message_id"], sent_at, received_at))
    connection.close()
    return timings[warm_up:]


def figures(data_dir: Path, timings: list[SendTiming]) -> WakeFigures:
    """Pair each send with its prompt's `completed_at` from the database."""
    open_database(Config(data_dir=data_dir))
    with database.connection_context():
        rows = Message.select(Message.id, Message.completed_at).where(
            Message.id.in_([timing.message_id for timing in timings])
        )
        completed = {row.id: row.completed_at.replace(tzinfo=UTC).timestamp() for row in rows}
    return WakeFigures(
        wake_ms=[(t.received_at - completed[t.message_id]) * 1000 for t in timings],
        round_trip_ms=[(t.received_at - t.sent_at) * 1000 for t in timings],
    )
