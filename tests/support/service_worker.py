"""The relay's service worker run in Node (tests/support/service_worker.js): the "push" event
with a delivered payload, then a click on one of its actions, as a browser would dispatch them."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.processes import PROJECT

NODE = shutil.which("node")
WORKER = PROJECT / "oar" / "web" / "static" / "service-worker.js"
HARNESS = PROJECT / "tests" / "support" / "service_worker.js"
needs_node = pytest.mark.skipif(NODE is None, reason="no Node.js on this machine")


def pushed_and_clicked(scope: str, payload: dict[str, Any], action: str, max_actions: int = 2) -> dict[str, Any]:
    """Dispatch the push and then the click; returns what the worker showed (`shown`: title and
    options), opened (`opened`: URLs) and fetched (`posted`: url, method, headers, body, status)."""
    done = subprocess.run(
        [NODE or "node", str(HARNESS), str(WORKER), scope, json.dumps(payload), action, str(max_actions)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
