"""The baseline: a bare Flask JSON endpoint, served by gunicorn exactly like the relay.

`python -m gunicorn -c gunicorn.conf.py bench.bare_app:app` — the relay's throughput is
reported as a ratio to this app's, so that the figure says what the relay's own work costs
on whatever machine runs the benchmark.
"""

from __future__ import annotations

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

app = Flask(__name__)


@app.post("/api/v1/relay_tool")
def relay_tool() -> ResponseReturnValue:
    # Same path and method as the relay's endpoint, so both runs send identical requests.
    return jsonify({"ok": True, "relay": "bare", "summary": "bare Flask JSON endpoint"})


@app.get("/healthz")
def healthz() -> ResponseReturnValue:
    return jsonify({"ok": True})
