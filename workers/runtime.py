"""The worker process's relay runtime, built from the environment on first use.

Nothing here connects until a job runs, so no connection is shared across the fork that
starts each worker process.
"""

from __future__ import annotations

import threading

from oar.core.config import from_environment
from oar.core.db import open_database
from oar.core.runtime import Runtime

_runtime: Runtime | None = None
_lock = threading.Lock()


def current() -> Runtime:
    """The process's runtime; jobs run in several threads, so it is built once under a lock."""
    global _runtime
    with _lock:
        if _runtime is None:
            config = from_environment()
            open_database(config)
            _runtime = Runtime(config)
        return _runtime
