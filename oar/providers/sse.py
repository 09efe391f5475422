"""The one SSE skeleton every wire protocol shares (docs/providers.md#wire-protocols, seed 003).

`sse_events` is the framing, a pure function of the bytes received (the WHATWG
event-stream rules: lines end in CR, LF or CRLF; `data:` lines of one event are joined
with newlines; comments and keep-alives are ignored; an event cut off by the end of the
stream is dropped). `open_stream` sends the request with `requests`, classifies a refused
request into a `ProviderError`, and yields the events of an accepted one, closing the
connection as soon as the turn is stopped.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import socket
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from oar.core import tracing
from oar.providers import http_internals
from oar.providers.base import TurnControl

# The most of an error body kept for the failure text.
ERROR_BODY_CHARS = 300


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


def sse_events(chunks: Iterable[bytes]) -> Iterator[SseEvent]:
    """Events of an event stream given as byte chunks cut anywhere."""
    event_name = ""
    data: list[str] = []
    for line in _lines(chunks):
        if line == "":
            if data:
                yield SseEvent(event_name or "message", "\n".join(data))
            event_name, data = "", []
            continue
        if line.startswith(":"):
            continue  # a comment: keep-alives are sent this way
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            event_name = value
    # Whatever is left was never ended by a blank line: an event cut off mid-way is dropped.


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        lines, pending = _complete_lines(pending)
        yield from lines
    pending += decoder.decode(b"", final=True)
    if pending.endswith("\r"):  # the stream ended: no LF can follow any more
        yield from _complete_lines(pending[:-1] + "\n")[0]


LINE_END = re.compile(r"\r\n|\r|\n")


def _complete_lines(text: str) -> tuple[list[str], str]:
    """Whole lines of `text` and the unfinished rest. A trailing CR waits: an LF may follow."""
    lines: list[str] = []
    start = 0
    for end in LINE_END.finditer(text):
        if end.group() == "\r" and end.end() == len(text):
            break
        lines.append(text[start : end.start()])
        start = end.end()
    return lines, text[start:]


class ProviderError(Exception):
    """A request the provider refused or a stream that broke, classified.

    `kind`: auth | rate_limit | overloaded | budget | overflow | bad_request | not_found |
    server | network | timeout | protocol. `cap` is the server's output cap for `budget`.
    """

    def __init__(self, kind: str, message: str, *, retry_after: float | None = None, cap: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.cap = cap

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limit", "overloaded")


BUDGET_WORDS = re.compile(r"max_tokens|max_output_tokens|max_completion_tokens|output tokens|completion tokens", re.I)
OVERFLOW_WORDS = re.compile(
    r"context.length|context_length_exceeded|context window|prompt is too long|maximum context|too many (input )?tokens|"
    r"input is too long|exceeds the context",
    re.I,
)
NUMBER = re.compile(r"(?<![\w.])\d[\d,_]*(?![\w.])")


def budget_cap(text: str, requested: int) -> int | None:
    """The server's output cap named in an error that rejected `requested` output tokens."""
    if not BUDGET_WORDS.search(text):
        return None
    numbers = [int(found.replace(",", "").replace("_", "")) for found in NUMBER.findall(text)]
    below = [number for number in numbers if 0 < number < requested]
    return max(below) if below else None


def redact(text: str, secret: str | None) -> str:
    """`text` without the API key (some servers quote a rejected key back)."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[key hidden]")
    return text


def error_text(body: bytes, content_type: str) -> str:
    """The server's own message from an error body, shortened; HTML pages are not quoted."""
    if "html" in content_type.lower() or body.lstrip()[:1] == b"<":
        return "an HTML page instead of an API answer"
    text = body.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            text = str(error.get("message") or error.get("type") or text)
        elif isinstance(error, str):
            text = error
    text = " ".join(text.split())
    return text[:ERROR_BODY_CHARS] + ("…" if len(text) > ERROR_BODY_CHARS else "")


def classify(name: str, status: int, headers: Any, body: bytes, requested_budget: int, api_key: str | None) -> ProviderError:
    """A refused request as a `ProviderError` whose message a user can act on."""
    detail = redact(error_text(body, headers.get("content-type", "")), api_key)
    said = f"HTTP {status}: {detail}"
    if status in (401, 403):
        return ProviderError("auth", f'Provider "{name}" rejected the API key ({said}). Check the key in its settings.')
    if status == 429:
        retry_after = _retry_after(headers)
        wait = f" Retry after {retry_after:g} s." if retry_after is not None else ""
        return ProviderError("rate_limit", f'Provider "{name}" is rate limiting requests ({said}).{wait}', retry_after=retry_after)
    if status in (503, 529):
        return ProviderError("overloaded", f'Provider "{name}" is overloaded ({said}).', retry_after=_retry_after(headers))
    if status in (400, 413, 422):
        cap = budget_cap(detail, requested_budget)
        if cap is not None:
            return ProviderError("budget", f'Provider "{name}" refused an output budget of {requested_budget} tokens ({said}).', cap=cap)
        if OVERFLOW_WORDS.search(detail):
            return ProviderError("overflow", f'The conversation is too long for provider "{name}" ({said}).')
        return ProviderError("bad_request", f'Provider "{name}" refused the request ({said}).')
    if status == 404:
        return ProviderError(
            "not_found",
            f'Provider "{name}" answered 404 ({detail}). Check its base URL (it includes the version path, e.g. /v1) and the model.',
        )
    return ProviderError("server", f'Provider "{name}" failed ({said}).')


def _retry_after(headers: Any) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class StreamRequest:
    name: str  # the provider's name, for messages
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    budget: int
    api_key: str | None
    connect_timeout: float
    read_timeout: float
    method: str = "POST"


def _send(http: requests.Session, request: StreamRequest, control: TurnControl) -> requests.Response:
    """Send the request (its body streamed back); raises ProviderError when no answer came.

    Tells `control.services.note_reachable` whether the server answered at all: a picker lists
    providers whose last contact failed at the transport level last (docs/providers.md).
    """
    try:
        response = http.request(
            request.method, request.url, headers=request.headers, json=request.body, stream=True,
            timeout=(request.connect_timeout, request.read_timeout),
            # requests drops only `Authorization` on a redirect to another host, so `x-api-key`
            # would follow it; a redirect is answered as the error it is (docs/providers.md#api-keys).
            allow_redirects=False,
        )
    except requests.Timeout as error:
        if isinstance(error, requests.ConnectTimeout):
            control.services.note_reachable(False)
        raise ProviderError("timeout", f'Provider "{request.name}" did not answer in time ({_reason(error, request)}).') from None
    except requests.RequestException as error:
        if isinstance(error, requests.ConnectionError):
            control.services.note_reachable(False)
        raise ProviderError("network", f'Provider "{request.name}" could not be reached ({_reason(error, request)}).') from None
    control.services.note_reachable(True)
    return response


def request_json(http: requests.Session, request: StreamRequest, control: TurnControl) -> dict[str, Any]:
    """Send a request whose answer is one JSON object (e.g. starting a run); raises ProviderError.

    A refused request is classified as a refused stream is; a 2xx answer that is not a JSON
    object (an HTML login page, garbage) is a `protocol` error that says what came instead.
    """
    with _traced(request) as opened, _send(http, request, control) as response:
        tracing.note(opened, {"http.response.status_code": response.status_code})
        body = _limited_body(response)
        if not 200 <= response.status_code < 300:
            raise classify(request.name, response.status_code, response.headers, body, request.budget, request.api_key)
        content_type = response.headers.get("content-type", "")
        try:
            payload = json.loads(body.decode("utf-8")) if body.strip() else None
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            detail = redact(error_text(body, content_type), request.api_key) or "an empty body"
            raise ProviderError(
                "protocol",
                f'Provider "{request.name}" answered {content_type or "no content type"} instead of a JSON object: {detail}',
            )
        return payload


def open_stream(http: requests.Session, request: StreamRequest, control: TurnControl) -> Generator[SseEvent, None, None]:
    """Send the request and yield its events; raises ProviderError. Ends quietly when stopped."""
    with _traced(request) as opened:
        response = _send(http, request, control)
        tracing.note(opened, {"http.response.status_code": response.status_code})
        yield from _events(response, request, control)


def _events(response: requests.Response, request: StreamRequest, control: TurnControl) -> Generator[SseEvent, None, None]:
    with response:
        if response.status_code != 200:
            raise classify(request.name, response.status_code, response.headers, _limited_body(response), request.budget, request.api_key)
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            detail = redact(error_text(_limited_body(response), content_type), request.api_key)
            raise ProviderError(
                "protocol", f'Provider "{request.name}" answered {content_type or "no content type"} instead of an event stream: {detail}'
            )
        # A stop must not wait for the server's next byte: the stop itself shuts the socket
        # under the read (in the thread that sets it), no watcher polls for it.
        forget = control.cancelled.on_set(lambda: _close_under_read(response))
        try:
            yield from sse_events(response.iter_content(chunk_size=None))
        except (requests.RequestException, OSError, AttributeError, ValueError) as error:
            if control.cancelled.is_set():
                return
            kind = "timeout" if "timed out" in str(error).lower() else "network"
            what = "stopped sending" if kind == "timeout" else "broke off the stream"
            raise ProviderError(kind, f'Provider "{request.name}" {what} ({_reason(error, request)}).') from None
        finally:
            forget()


@contextlib.contextmanager
def _traced(request: StreamRequest) -> Iterator[Any]:
    """With traces on, a client span for one request to a provider (the GenAI conventions' `chat`),
    not made current: a stream's events are yielded out of it. It ends with the request's answer
    or failure (a ProviderError's kind)."""
    if not tracing.on():
        yield None
        return
    model = str((request.body or {}).get("model") or "")
    opened = tracing.open_span(f"chat {model}".strip(), kind="client", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "oar.provider": request.name,
        "server.address": urlsplit(request.url).hostname or "", "http.request.method": request.method,
    })
    error: str | None = None
    try:
        yield opened
    except ProviderError as failure:
        error = failure.kind
        raise
    finally:
        tracing.end(opened, error)


def _close_under_read(response: requests.Response) -> None:
    sock = http_internals.socket_of(response)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    response.close()




def _limited_body(response: requests.Response, limit: int = 65_536) -> bytes:
    try:
        return response.raw.read(limit, decode_content=True) or b""
    except Exception:  # noqa: BLE001 - a broken error body still leaves the status to report
        return b""


def _reason(error: Exception, request: StreamRequest) -> str:
    text = redact(" ".join(str(error).split()), request.api_key)
    return text[:ERROR_BODY_CHARS]
