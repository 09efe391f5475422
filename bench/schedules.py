"""Firing accuracy: the lag between a schedule's due time and its message being queued.

1,000 schedules (by default) are set with `at` times spread evenly over one minute that
starts when they are all set. Each firing writes the message into the target's
conversation; the lag is the message's `created_at` minus the schedule's due time (its
`anchor`), both written by this machine's clock into the database. The whole path is
measured: the clock's due-time timer waking at the due time (oar/engine/due_timer.py), the
claim, and the message insert, on a relay that is also running the turns those messages start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from bench.owner import Owner
from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message, Schedule

# Setting the schedules must finish before the first is due; this leaves room for it.
LEAD_SECONDS = 45
FIRE_DEADLINE_SECONDS = 180


@dataclass(frozen=True)
class FiringFigures:
    count: int
    lag_ms: list[float]
    set_seconds: float


def measure(url: str, owner: Owner, data_dir: Path, count: int) -> FiringFigures:
    """Set `count` schedules due within one minute, wait until all fired, read the lags."""
    http = requests.Session()
    start = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=LEAD_SECONDS)
    began = time.monotonic()
    per_conversation = defaults.SCHEDULES_INTO_CONVERSATION
    for number in range(count):
        # At most 20 schedules fire into one conversation: a new one every 20.
        if number % per_conversation == 0:
            _session, token = owner.conversation(f"bench schedules {number // per_conversation}")
            http.headers["Authorization"] = f"Bearer {token}"
        due = start + timedelta(seconds=60 * number / count)
        payload = {"action": "schedule", "text": f"tick {number}", "at": due.isoformat() + "Z"}
        response = http.post(f"{url}/api/v1/relay_tool", json=payload, timeout=60)
        if response.status_code != 200:
            raise RuntimeError(f"schedule {number} refused: {response.text[:500]}")
    set_seconds = time.monotonic() - began
    if datetime.now(UTC).replace(tzinfo=None) >= start:
        raise RuntimeError(f"setting {count} schedules took {set_seconds:.0f} s, past the first due time")
    open_database(Config(data_dir=data_dir))
    deadline = time.monotonic() + LEAD_SECONDS + 60 + FIRE_DEADLINE_SECONDS
    while True:
        with database.connection_context():
            fired = Schedule.select().where(Schedule.fired_count >= 1).count()
        if fired >= count:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {fired} of {count} schedules fired in time")
        time.sleep(1)
    with database.connection_context():
        rows = list(Schedule.select(Schedule.anchor, Schedule.last_message_id))
        created = {
            message.id: message.created_at
            for message in Message.select(Message.id, Message.created_at).where(
                Message.id.in_([row.last_message_id for row in rows])
            )
        }
    lags = [(created[row.last_message_id] - row.anchor).total_seconds() * 1000 for row in rows]
    return FiringFigures(count=count, lag_ms=lags, set_seconds=set_seconds)
