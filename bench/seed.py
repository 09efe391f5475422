"""Filling the relay's database with finished sessions, straight through the models.

Going through turns would take minutes for 50,000 messages; rows written with
`insert_many` in one transaction take seconds and look to the relay exactly like
sessions whose turns ran: prompts `done` with their reply, counts and times set.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from peewee import chunked

from oar.core import ids
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message, Session
from oar.core.timeutil import utcnow

# SQLite allows 32,766 bound variables per statement; a Message row binds about 25.
ROWS_PER_INSERT = 500
WORDS = (
    "build test deploy relay session agent reply prompt queue worker branch commit review fix "
    "error cache index schema migration release docs owner token group schedule wake signal"
).split()


@dataclass(frozen=True)
class Seeded:
    session_ids: list[str]
    messages: int
    seconds: float


def seed(data_dir: Path, sessions: int, messages_per_session: int, seed_value: int = 1) -> Seeded:
    """Insert `sessions` sessions of `messages_per_session` messages each; returns their ids."""
    started = time.monotonic()
    rng = random.Random(seed_value)
    open_database(Config(data_dir=data_dir))
    now = utcnow()
    session_rows = [_session_row(number, rng, now, messages_per_session) for number in range(sessions)]
    with database.connection_context(), database.atomic():
        for batch in chunked(session_rows, ROWS_PER_INSERT):
            Session.insert_many(batch).execute()
        message_rows = (row for session in session_rows for row in _message_rows(session, rng, messages_per_session))
        for batch in chunked(message_rows, ROWS_PER_INSERT):
            Message.insert_many(batch).execute()
    return Seeded(
        session_ids=[row["id"] for row in session_rows],
        messages=sessions * messages_per_session,
        seconds=time.monotonic() - started,
    )


def _session_row(number: int, rng: random.Random, now: datetime, messages: int) -> dict[str, Any]:
    # Active within the last 6 days, so list_sessions' default scope ("recent", 7 days) sees them.
    last_activity = now - timedelta(seconds=rng.uniform(60, 6 * 86_400))
    return {
        "id": ids.session_id(),
        "title": f"Seeded session {number}: {_words(rng, 4, 8)}"[:200],
        "provider": "echo",
        "model": "echo-1",
        "mode": "agent",
        "created_at": last_activity - timedelta(hours=rng.uniform(1, 48)),
        "last_activity_at": last_activity,
        "message_count": messages,
    }


def _message_rows(session: dict[str, Any], rng: random.Random, count: int) -> Iterator[dict[str, Any]]:
    """Prompt/reply pairs spread between the session's creation and last activity."""
    start, end = session["created_at"], session["last_activity_at"]
    step = (end - start) / max(count, 1)
    reply_id = ids.message_id()
    for index in range(count):
        moment = start + step * index
        is_prompt = index % 2 == 0
        if is_prompt:
            reply_id = ids.message_id()
        # Every row names the same columns: insert_many takes its column list from the first.
        yield {
            # A reply's id is the one its prompt names, as the turn runner writes them.
            "id": ids.message_id() if is_prompt else reply_id,
            "session": session["id"],
            "role": "user" if is_prompt else "assistant",
            "text": _words(rng, 20, 60) if is_prompt else _words(rng, 40, 160),
            "created_at": moment,
            "model": "echo-1",
            "status": "done" if is_prompt else None,
            "mode": "agent" if is_prompt else None,
            "reply_id": reply_id if is_prompt else None,
            "started_at": moment if is_prompt else None,
            "completed_at": moment + step if is_prompt else None,
        }


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))
