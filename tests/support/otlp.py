"""A small OTLP/HTTP trace receiver for the tests: what a collector is to the relays.

It takes `POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (gzipped or not), as
OpenTelemetry's OTLP/HTTP exporter sends it, decodes it with the opentelemetry-proto package and
keeps every span; `wait_for` wakes when a batch arrives (no polling).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    error: bool

    @property
    def relay(self) -> str:
        return str(self.resource.get("oar.relay.name", ""))


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


def decode(body: bytes) -> Iterator[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = {item.key: _value(item.value) for item in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                    name=span.name, kind=span.kind, attributes={item.key: _value(item.value) for item in span.attributes},
                    resource=resource, error=span.status.code == 2,
                )


class OtlpReceiver:
    """Listens on a loopback port; `endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT is set to."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver.add(list(decode(body)))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._arrived:
            self.spans.extend(spans)
            self.requests += 1
            self._arrived.notify_all()

    def wait_for(self, what: str, found: Callable[[list[ReceivedSpan]], Any], seconds: float = 60) -> Any:
        """The first truthy `found(spans)`, woken by each batch that arrives; fails after `seconds`."""
        with self._arrived:
            result = None

            def ready() -> bool:
                nonlocal result
                result = found(list(self.spans))
                return bool(result)

            assert self._arrived.wait_for(ready, timeout=seconds), f"{what}: not received; spans: {self.summary()}"
            return result

    def summary(self) -> list[tuple[str, str, str]]:
        return [(span.relay, span.name, span.trace_id[:8]) for span in self.spans]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._arrived:
            return [span for span in self.spans if span.trace_id == trace_id]

    def stop(self) -> None:
        self.server.shutdown()
