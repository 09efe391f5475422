"""The worker process's relay runtime, built from the environment on first use.

RQ forks a work horse per job; nothing here connects until a job runs, so no connection is
ever shared across a fork.
"""

from __future__ import annotations

from oar.config import from_environment
from oar.db import open_database
from oar.runtime import Runtime

_runtime: Runtime | None = None


def current() -> Runtime:
    global _runtime
    if _runtime is None:
        config = from_environment()
        open_database(config)
        _runtime = Runtime(config)
    return _runtime
