"""How many background tasks run at once (docs/tasks.md#how-many-and-how-long).

A task the relay runs holds a process and a worker's thread for as long as its command runs.
The owner's settings cap how many run at once, per session (`max_running_tasks_per_session`)
and on the whole relay (`max_running_tasks`); a start over either is refused, never queued: an
agent is told at once, with what runs, and nothing is recorded. Tasks an agent runs itself (a
cli agent's own, recorded without a command) run nothing of the relay's and are not counted.

The count is taken inside the start's write transaction and no other start counts meanwhile:
SQLite's write lock holds every writer; on PostgreSQL an advisory lock held to the commit
queues the starts, so two of them cannot both see the last free place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oar.core.db import database, is_sqlite
from oar.core.errors import ActionError
from oar.core.models import Task
from oar.core.statuses import TaskStatus

# The PostgreSQL advisory lock that queues task starts ("oartasks" in ASCII, as a bigint).
START_LOCK = 0x6F61727461736B73
# Running tasks a refusal lists (those of the caller's own session).
LISTED = 20


def refuse_over_caps(session_id: str, settings: Mapping[str, Any]) -> None:
    """Inside the start's write transaction: refuse a start that would run one task too many,
    with `REMOTE_RELAY_BUSY` saying which cap, what it is, and that nothing was run."""
    if not is_sqlite():
        database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (START_LOCK,))
    running = Task.select(Task.id, Task.description).where(
        (Task.status == TaskStatus.RUNNING) & Task.command.is_null(False)
    )
    per_session = settings["max_running_tasks_per_session"]
    own = running.where(Task.session == session_id)
    own_count = own.count()
    if own_count >= per_session:
        raise ActionError(
            "REMOTE_RELAY_BUSY",
            f"This session already runs {own_count} background tasks, as many as one session may run at once "
            f"(owner setting max_running_tasks_per_session: {per_session}). Wait for one to end, or stop one. "
            "Nothing was run.",
            maxRunningTasksPerSession=per_session,
            tasks=[{"taskId": task.id, "description": task.description} for task in own.order_by(Task.created_at).limit(LISTED)],
        )
    per_relay = settings["max_running_tasks"]
    on_the_relay = running.count()
    if on_the_relay >= per_relay:
        raise ActionError(
            "REMOTE_RELAY_BUSY",
            f"The relay already runs {on_the_relay} background tasks, as many as it runs at once "
            f"(owner setting max_running_tasks: {per_relay}). Try again when one has ended. Nothing was run.",
            maxRunningTasks=per_relay,
        )
