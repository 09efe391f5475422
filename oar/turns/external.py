"""`external` sessions (docs/providers.md#external): an agent process outside the relay attaches with the
session's agent token, long-polls for its next prompt and posts the reply back.

The turn still runs in an RQ worker like any other (claim, heartbeat, stop, time limit);
its provider only relays what the attached process posts. Posts travel through a Redis
list per turn: a post lost with a flushed Redis leaves the turn to its time limit, and the
process sees the turn is no longer running on its next post.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from oar.core import keys
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import LIVE_TURN
from oar.core.waiting import Look, wait_on_signals

# How long a turn's undelivered posts are kept in Redis.
EVENTS_KEEP_SECONDS = 3600


def running_turn(session: Session) -> Message | None:
    """The session's turn the attached process should work on, if one is running."""
    if not session.active_turn:
        return None
    return Message.get_or_none((Message.id == session.active_turn) & Message.status.in_(LIVE_TURN))


def announce(runtime: Runtime, session_id: str) -> None:
    """A turn of the session started running: wake the attached process's long poll."""
    publish(runtime.redis, keys.turn_started_channel(runtime.config.namespace, session_id))


def next_turn(runtime: Runtime, session_id: str, seconds: float) -> Message | None:
    """The turn the attached process should work on, waiting up to `seconds` for one to start.

    Wakes on `announce`, and looks again every `WAIT_RECHECK_SECONDS` in case a signal was
    lost; holds no database connection meanwhile.
    """

    def look() -> Look[Message | None]:
        turn = running_turn(Session.get_by_id(session_id))
        return Look(turn, settled=turn is not None)

    return wait_on_signals(
        runtime, [keys.turn_started_channel(runtime.config.namespace, session_id)], look,
        recheck_seconds=runtime.time("WAIT_RECHECK_SECONDS"), seconds=seconds,
    )


def post(runtime: Runtime, turn_id: str, event: dict[str, Any]) -> None:
    key = keys.external_events(runtime.config.namespace, turn_id)
    pipe = runtime.redis.pipeline()
    pipe.rpush(key, json.dumps(event, separators=(",", ":")))
    pipe.expire(key, EVENTS_KEEP_SECONDS)
    pipe.execute()


def receive(runtime: Runtime, turn_id: str, seconds: float) -> list[dict[str, Any]]:
    """Posts for the turn, in order; waits up to `seconds` for the first one."""
    key = keys.external_events(runtime.config.namespace, turn_id)
    try:
        first = runtime.redis.blpop([key], timeout=max(seconds, 0.01))
        if first is None:
            return []
        raw: list[Any] = [first[1]]
        while (more := runtime.redis.lpop(key)) is not None:
            raw.append(more)
    except redis.RedisError:
        return []
    return [json.loads(item) for item in raw]
