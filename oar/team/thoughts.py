"""`broadcast_thinking` (docs/team-runs.md#thoughts): shown live on the run's view, never stored.

A thought goes to Redis only: the run's newest `TEAM_THOUGHTS_KEPT`, numbered, kept for
`OAR_TEAM_THOUGHTS_KEEP_SECONDS` after the last one, so that a page opened (or polling) a moment
later still shows it. The database never sees it; a flushed Redis forgets it, as intended.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import redis

from oar.core import defaults, keys
from oar.core.timeutil import iso


def broadcast(
    connection: redis.Redis, namespace: str, run_id: str, agent_id: str, content: str, now: datetime, keep_seconds: float
) -> int:
    """The thought's number within its run; the run's thoughts are kept `keep_seconds` after it."""
    number = int(connection.incr(keys.team_thought_seq(namespace, run_id)))
    entry = json.dumps({"id": number, "agent_id": agent_id, "content": content, "at": iso(now)}, ensure_ascii=False)
    listed = keys.team_thoughts(namespace, run_id)
    with connection.pipeline() as pipe:
        pipe.lpush(listed, entry)
        pipe.ltrim(listed, 0, defaults.TEAM_THOUGHTS_KEPT - 1)
        pipe.expire(listed, max(1, int(keep_seconds)))
        pipe.expire(keys.team_thought_seq(namespace, run_id), max(1, int(keep_seconds)))
        pipe.execute()
    return number


def recent(connection: redis.Redis, namespace: str, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """The run's kept thoughts numbered above `after`, oldest first."""
    raw = connection.lrange(keys.team_thoughts(namespace, run_id), 0, defaults.TEAM_THOUGHTS_KEPT - 1)
    entries = [json.loads(item) for item in raw]
    return sorted((entry for entry in entries if entry["id"] > after), key=lambda entry: entry["id"])
