"""How a `tools/call` runs within its request, in either era of MCP (docs/mcp.md): answered as JSON
once done, or, when the client gave a progress token, as an event stream whose progress
notifications keep the client waiting.

`shape` turns the tool's JSON answer into the era's result (the handshake era's plain result,
or the per-request revision's stamped one).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from flask import Response
from werkzeug.datastructures import Headers

from oar.actions.context import CallContext
from oar.core import tracing
from oar.core.db import database
from oar.core.runtime import Runtime
from oar.core.waiting import CallerWatch, watched_by
from oar.sessions.sessions import Session
from oar.web import mcp_wire
from oar.web.bodies import Answer, JsonAnswer
from oar.web.connection import connection_watch
from oar.web.mcp_wire import ToolCall, ToolSet
from oar.web.plain_request import PlainRequest

# An idle event stream sends a comment this often, which also finds a client that went away.
KEEPALIVE_SECONDS = 5.0
# The tool's JSON answer → the JSON-RPC result to send.
Shape = Callable[[dict[str, Any]], dict[str, Any]]


def mcp_context(rt: Runtime, caller: Session, *, capped: bool, carrier: dict[str, str] | None = None) -> CallContext:
    """The call as the calling session; without a progress token its waits stop before the
    client's own timeout would cut the call (the reply is kept: `wait` picks it up). `carrier`:
    the trace context the request came with."""
    ctx = CallContext(runtime=rt, caller_session=caller, via="mcp", trace_carrier=carrier)
    if capped:
        seconds = int(rt.time("MCP_MAX_WAIT_SECONDS"))
        ctx.cap_waits(seconds, (
            f"MCP calls without a progressToken wait at most {seconds} s in all, as MCP clients cut calls after about 60 s;"
        ))
    return ctx


def accepts_event_stream(headers: Headers) -> bool:
    return "text/event-stream" in headers.get("Accept", "")


def run_call(
    tools: ToolSet, rt: Runtime, caller: Session, call: ToolCall, request_id: Any, shape: Shape, http: PlainRequest,
) -> Answer:
    """Run the call for this request: streamed with progress when the client can follow it, else capped.
    Its trace continues the request's `_meta`, else its `traceparent` header."""
    carrier = call.trace_carrier or tracing.read_carrier(http.headers)
    if call.progress_token is not None and tools.waits and accepts_event_stream(http.headers):
        return streamed_call(tools, rt, caller, call, call.progress_token, request_id, shape, carrier)
    ctx = mcp_context(rt, caller, capped=True, carrier=carrier)
    # A client that cut the call (its own timeout) is seen going away: a card it waited on
    # is kept or withdrawn, and nothing is done for it.
    with watched_by(connection_watch(http.environ)):
        body = tools.call(ctx, call.name, call.arguments)
    return JsonAnswer(mcp_wire.result(request_id, shape(body)))


def streamed_call(
    tools: ToolSet, rt: Runtime, caller: Session, call: ToolCall, token: str | int, request_id: Any, shape: Shape,
    carrier: dict[str, str] | None = None,
) -> Response:
    """Run the call in a thread of its own while the response streams its progress: every
    wait of the call pulses a `notifications/progress`, then the result ends the stream. A
    client that went away is seen at the next write, and the call's waits end (`CallerGone`)."""
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    gone = threading.Event()
    started = time.monotonic()
    pulses = [0]

    def pulse() -> None:
        pulses[0] += 1
        waited = int(time.monotonic() - started)
        events.put(mcp_wire.progress(token, pulses[0], f"waiting ({waited} s)"))

    def run() -> None:
        database.connect(reuse_if_open=True)
        try:
            with watched_by(CallerWatch(pulse=pulse, gone=gone.is_set)):
                body = tools.call(mcp_context(rt, caller, capped=False, carrier=carrier), call.name, call.arguments)
            # A client gone meanwhile gets an answer too (the dispatcher's REMOTE_RELAY_CALLER_GONE):
            # nobody reads it, and the stream has ended already.
            events.put(mcp_wire.result(request_id, shape(body)))
        finally:
            if not database.is_closed():
                database.close()

    threading.Thread(target=run, name="mcp-call", daemon=True).start()
    return event_stream(events, gone)


def event_stream(events: queue.Queue[dict[str, Any]], gone: threading.Event) -> Response:
    """An event stream of the queued JSON-RPC messages, ended by the first that is not a
    notification; `gone` is set once the client stops reading."""

    def stream() -> Iterator[str]:
        try:
            while True:
                try:
                    item = events.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    yield ": keepalive\n\n"
                    continue
                yield mcp_wire.sse_event(item)
                if "method" not in item:
                    return
        finally:
            gone.set()

    return Response(stream(), mimetype="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
