"""RQ job: run one background task's subprocess to its end."""

from __future__ import annotations

from oar.background import task_runner
from oar.core.db import database
from workers.runtime import current


def run_task(task_id: str) -> str | None:
    try:
        return task_runner.run(current(), task_id)
    finally:
        database.close()
