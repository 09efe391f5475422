"""RQ job: run a session's queued turns."""

from __future__ import annotations

from oar.core.db import database
from oar.engine import runner
from workers.runtime import current


def run_turns(session_id: str) -> int:
    try:
        return runner.run_turns(current(), session_id)
    finally:
        database.close()
