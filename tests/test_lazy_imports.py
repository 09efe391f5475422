"""A process loads the big optional libraries only when it uses them (docs/limits.md#memory).

The MCP SDK (pydantic, anyio, starlette), Web Push (pywebpush, py_vapid, cryptography's curves),
Apprise, YAML and detect-secrets together took ~150 MB in every web, worker and clock process
that imported the relay's modules; each is now imported in the function that needs it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import PROJECT

OPTIONAL = ("mcp", "pywebpush", "py_vapid", "apprise", "yaml", "detect_secrets", "pydantic", "starlette",
            "cryptography.hazmat.primitives.asymmetric")

# What each kind of process imports at its start: the web app's modules (every blueprint),
# the worker with every job's module, the clock.
LOADED_AT_START = """
import importlib, json, sys
from oar.core import jobs
import oar.web, oar.web.api, oar.web.owner, oar.web.mcp, oar.web.mcp_team, oar.web.openclaw, oar.web.page
import oar.engine.worker, oar.engine.clock
for name in jobs.EVERY_JOB:
    importlib.import_module(name.rpartition(".")[0])
print(json.dumps(sorted(sys.modules)))
"""


def loaded_modules(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_it_starts_web_worker_and_clock_without_the_optional_libraries() -> None:
    loaded = loaded_modules(LOADED_AT_START)
    assert "oar.web.mcp_modern" in loaded and "oar.notifications.webpush" in loaded
    present = sorted(name for name in OPTIONAL if name in loaded)
    assert present == [], f"imported at start though no request used them: {present}"


def test_it_loads_them_where_they_are_used() -> None:
    code = """
import json, sys
from oar.background.masking import mask
from oar.notifications import transports
from oar.web import mcp_modern
assert mask("AKIAIOSFODNN7EXAMPLE") != "AKIAIOSFODNN7EXAMPLE"
transports.url_is_valid("json://localhost/hook")
mcp_modern.http_status(-32600)
print(json.dumps(sorted(sys.modules)))
"""
    loaded = loaded_modules(code)
    assert {"detect_secrets", "apprise", "mcp"} <= loaded
