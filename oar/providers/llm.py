"""Providers that speak an LLM wire protocol: the turn request ladder and the turn loop.

A protocol module (`chat`, `responses`, `anthropic`) gives only a request builder and a
pure event parser. Everything else is here and shared: the conversation a turn sends and
how it is rebuilt (initial, overflow rebuild, continuation, tool rounds), the output
budget negotiation, retries of rate limits and overloads, and the relay_tool loop.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests

from oar.core.schema import ToolDefinition
from oar.providers.base import (
    OutputTruncated,
    Provider,
    TextDelta,
    TurnControl,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    Usage,
    relay_tool_activity,
)
from oar.providers.sse import ProviderError, SseEvent, StreamRequest, open_stream, redact

# Output budget of every request; there is deliberately no per-session knob (docs/providers.md#output-budget).
DEFAULT_MAX_TOKENS = 32_768
# Model calls one turn may make with relay_tool results before the relay ends the loop.
MAX_TOOL_ROUNDS = 8
# Retries of a rate-limited or overloaded request, and the backoff when the server names none.
MAX_RETRIES = 3
BACKOFF_SECONDS = (1.0, 4.0, 15.0)
# Longest retry-after the relay waits inside a turn.
MAX_RETRY_AFTER_SECONDS = 60.0

CONTINUE_PROMPT = (
    "Your previous answer was cut off by the output limit. Continue exactly where it stopped, "
    "without repeating anything and without any preamble."
)


# What a parser reports, besides TextDelta and Usage -----------------------------------


@dataclass(frozen=True)
class Thinking:
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Finish:
    """The end of one model call. `reason`: stop | length | tool_calls; None when cut off."""

    reason: str | None


@dataclass(frozen=True)
class StreamFailure:
    """An error event inside an accepted stream."""

    kind: str
    message: str


Parsed = TextDelta | Usage | Thinking | ToolCall | Finish | StreamFailure


class EventParser:
    """Pure: SSE events in, parsed events out. `close()` at the end of the stream."""

    def feed(self, event: SseEvent) -> list[Parsed]:
        raise NotImplementedError

    def close(self) -> list[Parsed]:
        raise NotImplementedError


# The conversation a turn sends -------------------------------------------------------


@dataclass
class WireMessage:
    """A message in protocol-neutral form. role: user | assistant | tool."""

    role: str
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_id: str = ""  # role tool: the call this answers


@dataclass
class WireRequest:
    model: str
    # The system prompt and the relay_tool function the engine passes in (empty, None: none).
    system: str
    messages: list[WireMessage]
    max_tokens: int
    tool: ToolDefinition | None
    effort: str | None


class TurnConversation:
    """Owns how the request is built at each step; the turn loop only decides when."""

    def __init__(self, history: list[dict[str, str]], prompt: str) -> None:
        self.history = [_wire_message(item) for item in history if item.get("text")]
        self.current: list[WireMessage] = [WireMessage("user", prompt)]
        self.overflow_rebuilt = False

    @property
    def messages(self) -> list[WireMessage]:
        return self.history + self.current

    def rebuild_without_oldest(self) -> bool:
        """Drop the older half of the history once; False when that was done or there is none."""
        if self.overflow_rebuilt or not self.history:
            return False
        self.overflow_rebuilt = True
        keep = len(self.history) // 2
        self.history = self.history[len(self.history) - keep :] if keep else []
        while self.history and self.history[0].role != "user":
            self.history.pop(0)
        return True

    def continue_after(self, partial: str) -> None:
        self.current += [WireMessage("assistant", partial), WireMessage("user", CONTINUE_PROMPT)]

    def add_tool_round(self, text: str, calls: list[ToolCall], results: list[str]) -> None:
        self.current.append(WireMessage("assistant", text, tool_calls=list(calls)))
        for call, result in zip(calls, results, strict=True):
            self.current.append(WireMessage("tool", result, call_id=call.id))


def _wire_message(item: dict[str, str]) -> WireMessage:
    # Prompts, events and schedule messages all reach the model as the user's side.
    return WireMessage("assistant" if item.get("role") == "assistant" else "user", item.get("text", ""))


# The provider --------------------------------------------------------------------------


@dataclass
class PassResult:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish: str | None = None


class LLMProvider(Provider):
    """Base of the wire-protocol kinds. Subclasses set `path` and implement the two hooks."""

    path = ""
    metered = True
    supports_thinking = True
    needs_base_url = True

    # Hooks of a protocol --------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def build_body(self, request: WireRequest) -> dict[str, Any]:
        raise NotImplementedError

    def parser(self) -> EventParser:
        raise NotImplementedError

    # The turn ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        missing = self.missing_configuration()
        if missing:
            yield TurnFailed(missing)
            return
        model = request.model or self.default_model
        if not model:
            yield TurnFailed(f'Provider "{self.name}" has no model: configure its models or default_model.')
            return
        conversation = TurnConversation(request.history(), request.prompt)
        thinking = ThinkingBlock(inline=request.thinking == "inline")
        budget = DEFAULT_MAX_TOKENS
        budget_renegotiated = continued = False
        tool_rounds = 0
        http = requests.Session()
        try:
            while not control.cancelled.is_set():
                wire = WireRequest(
                    model=model, system=request.system_prompt, messages=conversation.messages, max_tokens=budget,
                    tool=request.relay_tool, effort=request.effort,
                )
                result = PassResult()
                try:
                    yield from self._one_pass(http, wire, request, control, thinking, result)
                except ProviderError as error:
                    if error.kind == "budget" and not budget_renegotiated and error.cap:
                        budget_renegotiated, budget = True, error.cap
                        continue
                    if error.kind == "overflow" and conversation.rebuild_without_oldest():
                        continue
                    yield TurnFailed(error.message)
                    return
                if control.cancelled.is_set():
                    return
                if result.calls:
                    tool_rounds += 1
                    if tool_rounds > MAX_TOOL_ROUNDS:
                        yield TurnFailed(
                            f"The model kept calling relay_tool after {MAX_TOOL_ROUNDS} rounds; the relay ended the turn."
                        )
                        return
                    results: list[str] = []
                    for call in result.calls:
                        outcome = yield from self._call_tool(call, control)
                        results.append(outcome)
                    conversation.add_tool_round(result.text, result.calls, results)
                    continue
                if result.finish == "length":
                    if not continued:
                        continued = True
                        conversation.continue_after(result.text)
                        continue
                    yield OutputTruncated()
                if result.finish is None:
                    yield TurnFailed(f'The stream from provider "{self.name}" ended before the reply was complete.')
                yield from thinking.close()
                return
        finally:
            http.close()

    def _one_pass(
        self, http: requests.Session, wire: WireRequest, request: TurnRequest, control: TurnControl, thinking: ThinkingBlock,
        result: PassResult,
    ) -> Iterator[TurnEvent]:
        """One model call, retried on rate limits and overloads; fills `result`."""
        attempt = 0
        while True:
            stream = StreamRequest(
                name=self.name, url=self.url,
                headers={"Content-Type": "application/json", "Accept": "text/event-stream", **self.headers()},
                body=self.build_body(wire), budget=wire.max_tokens, api_key=self._api_key,
                connect_timeout=request.connect_timeout, read_timeout=request.read_timeout,
            )
            parser = self.parser()
            started = False
            try:
                for event in open_stream(http, stream, control):
                    for parsed in parser.feed(event):
                        started = True
                        yield from self._apply(parsed, thinking, result)
                for parsed in parser.close():
                    yield from self._apply(parsed, thinking, result)
                return
            except ProviderError as error:
                if not error.retryable or started or attempt >= MAX_RETRIES:
                    if error.retryable and attempt:
                        raise ProviderError(error.kind, f"{error.message} Gave up after {attempt} retries.") from None
                    raise
                wait = error.retry_after if error.retry_after is not None else BACKOFF_SECONDS[attempt]
                attempt += 1
                if not control.sleep(min(wait, MAX_RETRY_AFTER_SECONDS)):
                    return

    def _apply(self, parsed: Parsed, thinking: ThinkingBlock, result: PassResult) -> Iterator[TurnEvent]:
        if isinstance(parsed, TextDelta):
            yield from thinking.close()
            result.text += parsed.text
            yield parsed
        elif isinstance(parsed, Thinking):
            yield from thinking.add(parsed.text)
        elif isinstance(parsed, Usage):
            yield parsed
        elif isinstance(parsed, ToolCall):
            result.calls.append(parsed)
        elif isinstance(parsed, Finish):
            result.finish = parsed.reason
        elif isinstance(parsed, StreamFailure):
            raise ProviderError(parsed.kind, f'Provider "{self.name}" failed mid-stream: {redact(parsed.message, self._api_key)}')

    def _call_tool(self, call: ToolCall, control: TurnControl) -> Generator[TurnEvent, None, str]:
        """Run one relay_tool call as this session; returns the JSON text the model gets back."""
        if call.name != "relay_tool":
            return json.dumps({"ok": False, "error": f"There is no tool {call.name[:64]!r}; the only tool is relay_tool."})
        try:
            payload = json.loads(call.arguments or "{}")
        except ValueError as error:
            return json.dumps({"ok": False, "error": f"relay_tool arguments must be a JSON object: {error}."})
        if not isinstance(payload, dict):
            return json.dumps({"ok": False, "error": "relay_tool arguments must be a JSON object."})
        yield relay_tool_activity(payload)
        return json.dumps(control.services.call_relay_tool(payload), ensure_ascii=False, separators=(",", ":"))


class ThinkingBlock:
    """Reasoning text as one `<thinking>` block of the reply (thinking `inline`), or nothing."""

    def __init__(self, inline: bool) -> None:
        self.inline = inline
        self.open = False

    def add(self, text: str) -> Iterator[TurnEvent]:
        if not self.inline or not text:
            return
        if not self.open:
            self.open = True
            yield TextDelta("<thinking>")
        yield TextDelta(text)

    def close(self) -> Iterator[TurnEvent]:
        if self.open:
            self.open = False
            yield TextDelta("</thinking>\n")
