"""A session that answered but keeps working in the background (docs/waiting.md#answered-but-still-working).

Such a session reports `done` only once its running tasks have been quiet (no output) for
`BACKGROUND_QUIET_SECONDS` (10 s), or have ended; until then a waiting call reports
`running` with the reply so far (`reply`, `firstReply`) and `background {tasks, running}`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from oar.background import task_views
from oar.core import keys
from oar.core.models import Message, Task
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.core.statuses import TaskStatus, TurnStatus
from oar.core.timeutil import utcnow
from oar.core.waiting import Look, not_yet, settled, wait_on_signals

BACKGROUND_NOTE = (
    "The session answered and is still working in the background; it reports done after "
    "{seconds:g} s without output. Call wait with this message_id."
)


# Asked as every waited turn is answered: its SQL built once (oar/core/prepared.py).
_RUNNING = Prepared(lambda session_id: Task.select().where((Task.session == session_id) & (Task.status == TaskStatus.RUNNING)))


def quiet_at(answered_at: datetime, last_outputs: list[datetime], quiet_seconds: float) -> datetime:
    """When the session counts as done: `quiet_seconds` after the answer and the last output."""
    return max([answered_at, *last_outputs]) + timedelta(seconds=quiet_seconds)


def still_working(runtime: Runtime, turn: Message, seconds: float) -> list[Task]:
    """Wait up to `seconds` for the session's tasks to go quiet or end; the tasks still working.

    Wakes when a task started by this turn ends (its end signals the turn) and at the moment
    the tasks would have been quiet long enough; holds no database connection meanwhile.
    `turn` has finished (its `completed_at` is set).
    """
    answered_at = turn.completed_at
    if answered_at is None:
        raise ValueError(f"turn {turn.id} has not finished")
    quiet_seconds = runtime.time("BACKGROUND_QUIET_SECONDS")

    def look() -> Look[list[Task]]:
        running = _RUNNING.rows(turn.session_id)
        if not running:
            return settled([])
        done_at = quiet_at(answered_at, [t.last_output_at or t.started_at for t in running], quiet_seconds)
        now = utcnow()
        if now >= done_at:
            return settled([])
        return not_yet(running, again_within=(done_at - now).total_seconds())

    # Most turns leave no task running: answered without registering for wake-ups (a woken
    # `send` answers through here, docs/waiting.md#how-waiting-wakes), nor a query when the
    # woken wait's read of the turn found none (`turns.wait_for`).
    if not getattr(turn, "tasks_running", True):
        return []
    first = look()
    if first.settled:
        return first.value
    return wait_on_signals(
        runtime, [keys.turn_channel(runtime.config.namespace, turn.id)], look,
        recheck_seconds=runtime.time("WAIT_RECHECK_SECONDS"), seconds=seconds,
    )


def report(entry: dict[str, Any], running: list[Task], quiet_seconds: float) -> dict[str, Any]:
    """A `done` result turned into `running` with the reply and what works in the background."""
    return {
        **entry,
        "status": TurnStatus.RUNNING,
        "firstReply": entry["reply"],
        "background": {
            "tasks": [{"taskId": t.id, "description": task_views.shown_description(t), "status": t.status}
                      for t in running],
            "running": len(running),
        },
        "note": BACKGROUND_NOTE.format(seconds=quiet_seconds),
    }
