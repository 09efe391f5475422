"""Traces (OpenTelemetry), when an OTLP endpoint is configured (docs/operations.md#tracing).

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and
`OTEL_SDK_DISABLED` is not true and `OTEL_TRACES_EXPORTER` is not `none`. Then each web and worker
process makes an SDK tracer provider that sends its spans over OTLP/HTTP, configured by the SDK's
own `OTEL_*` variables (headers, sampler, resource, batch delays). Off, nothing of the SDK is
imported and every function here returns at its first line.

The spans (docs/operations.md#tracing): one per agent call (`oar.actions.dispatch`), per turn
(`oar.engine.runner`) and per provider request (`oar.providers.sse`), and one per call to a
paired relay (`oar.federation.client`). The context goes on in the W3C `traceparent`: in the
headers of a call to a paired relay (whose peer API continues it), from an MCP request's
`_meta` or a call's headers, and from the call that queued a prompt to its turn in a worker (kept
in Redis beside the prompt for a day), so that a chain of relays is one trace.

Spans carry ids, action names, outcome codes, provider kinds and models; never a prompt, a
reply, a title or a token.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

import redis

from oar import __version__
from oar.core import defaults, keys
from oar.core.runtime import Runtime

log = logging.getLogger(__name__)

# The service name spans carry when OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says none.
SERVICE_NAME = "oar-relay"
# The W3C trace context fields a carrier may hold.
CONTEXT_FIELDS = ("traceparent", "tracestate")
# The longest trace context field read from a request (a traceparent is 55 characters).
CONTEXT_FIELD_CHARS = 512

_NOTHING = contextlib.nullcontext()
_tracer: Any = None
_kinds: dict[str, Any] = {}
_runtime: Runtime | None = None


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are asked for, by the SDK's own variables."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def start(kind: str, runtime: Runtime) -> None:
    """Send this process's spans, a `kind` (web, worker), when traces are configured; once per process.

    The runtime's Redis keeps the context of a queued prompt for its turn."""
    global _tracer, _runtime
    if _tracer is not None or not configured():
        return
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set, but OpenTelemetry's SDK is not installed: no traces are sent "
                    "(pip install -r requirements-tracing.txt)")
        return
    attributes = {"oar.relay.name": runtime.config.relay_name, "oar.process": kind}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _kinds.update(server=trace.SpanKind.SERVER, client=trace.SpanKind.CLIENT, internal=trace.SpanKind.INTERNAL)
    _runtime = runtime
    _tracer = provider.get_tracer("oar-relay", __version__)


def on() -> bool:
    return _tracer is not None


def span(
    name: str, kind: str = "internal", attributes: Mapping[str, Any] | None = None,
    carrier: Mapping[str, str] | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A span, current for the block (the block gets it; None when traces are off).

    `carrier`: a W3C trace context (`traceparent`, `tracestate`) the span continues; without
    one, or with one that holds no valid context, the span is a child of the current one."""
    if _tracer is None:
        return _NOTHING
    return _tracer.start_as_current_span(
        name, context=_parent(carrier), kind=_kinds[kind], attributes=dict(attributes or {}),
        record_exception=False,
    )


def open_span(name: str, *, kind: str = "internal", attributes: Mapping[str, Any] | None = None) -> Any:
    """A span that is not made current (for a generator, whose yields would carry it out to the
    consumer); `end` it. None when traces are off."""
    if _tracer is None:
        return None
    return _tracer.start_span(name, kind=_kinds[kind], attributes=dict(attributes or {}))


def end(opened: Any, error: str | None = None) -> None:
    if opened is None:
        return
    if error is not None:
        failed(opened, error)
    opened.end()


def note(current: Any, attributes: Mapping[str, Any]) -> None:
    """More attributes on a span (None: traces off)."""
    if current is not None:
        current.set_attributes(dict(attributes))


def note_current(attributes: Mapping[str, Any], error: str | None = None) -> None:
    """More attributes on the current span, and its error if any (nothing when traces are off)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    note(current, attributes)
    if error is not None:
        failed(current, error)


def failed(current: Any, error: str) -> None:
    """The span's work failed with `error` (an error code or kind): its status and `error.type`."""
    if current is None:
        return
    from opentelemetry.trace import StatusCode

    current.set_attribute("error.type", error)
    current.set_status(StatusCode.ERROR, error)


def carrier() -> dict[str, str]:
    """The current trace context as W3C fields ({} when traces are off or no span is current)."""
    if _tracer is None:
        return {}
    from opentelemetry import propagate

    fields: dict[str, str] = {}
    propagate.inject(fields)
    return fields


def read_carrier(source: Any) -> dict[str, str] | None:
    """The W3C trace context fields of a request's headers or an MCP `_meta` object, if it holds
    any (each a string of sensible length; anything else is ignored). None when traces are off."""
    if _tracer is None or not hasattr(source, "get"):
        return None
    found = {name: source.get(name) for name in CONTEXT_FIELDS}
    fields = {name: value for name, value in found.items() if isinstance(value, str) and len(value) <= CONTEXT_FIELD_CHARS}
    return fields or None


def remember_for_prompt(message_id: str) -> None:
    """Keep the current context for the turn of the prompt `message_id` (a worker runs it later)."""
    if _tracer is None or _runtime is None:
        return
    traceparent = carrier().get("traceparent")
    if traceparent:
        with contextlib.suppress(redis.RedisError):
            key = keys.prompt_trace(_runtime.config.namespace, message_id)
            _runtime.redis.set(key, traceparent, ex=defaults.PROMPT_TRACE_KEEP_SECONDS)


def prompt_carrier(message_id: str) -> dict[str, str] | None:
    """The context kept for the prompt's turn, if any (a turn of a schedule or an event has none)."""
    if _tracer is None or _runtime is None:
        return None
    try:
        raw = _runtime.redis.get(keys.prompt_trace(_runtime.config.namespace, message_id))
    except redis.RedisError:
        return None
    return {"traceparent": raw.decode() if isinstance(raw, bytes) else str(raw)} if raw else None


def _parent(fields: Mapping[str, str] | None) -> Any:
    if not fields:
        return None
    from opentelemetry import propagate, trace

    context = propagate.extract(dict(fields))
    return context if trace.get_current_span(context).get_span_context().is_valid else None
