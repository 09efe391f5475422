"""`anthropic`: the Messages API (`/messages`). A request builder and a pure event parser.

Anthropic has no implicit prefix cache, so the request marks two `cache_control`
breakpoints: the system block and the last message (docs/providers.md).
"""

from __future__ import annotations

import json
from typing import Any

from oar.providers.base import TextDelta, Usage
from oar.providers.llm import (
    EventParser,
    Finish,
    LLMProvider,
    Parsed,
    StreamFailure,
    Thinking,
    ToolCall,
    WireRequest,
)
from oar.providers.sse import SseEvent

API_VERSION = "2023-06-01"
EPHEMERAL = {"type": "ephemeral"}
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                "pause_turn": "stop", "refusal": "stop"}
ERROR_KINDS = {"overloaded_error": "overloaded", "rate_limit_error": "rate_limit", "authentication_error": "auth",
               "invalid_request_error": "bad_request", "api_error": "server"}


def build_body(request: WireRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": message.call_id, "content": message.text}]
        elif message.role == "assistant":
            role = "assistant"
            blocks = [{"type": "text", "text": message.text}] if message.text else []
            for call in message.tool_calls:
                try:
                    arguments = json.loads(call.arguments or "{}")
                except ValueError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
        else:
            role, blocks = "user", [{"type": "text", "text": message.text}]
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:  # the API wants turns to alternate
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    if messages:
        last = messages[-1]["content"][-1]
        messages[-1]["content"][-1] = {**last, "cache_control": EPHEMERAL}
    body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
    if request.system:
        body["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
    body.update(messages=messages, stream=True)
    if request.tool is not None:
        body["tools"] = [
            {"name": request.tool.name, "description": request.tool.description, "input_schema": request.tool.parameters}
        ]
    return body


class AnthropicParser(EventParser):
    """message_start, content_block_start/delta/stop, message_delta, message_stop, ping, error."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, str]] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.finish: str | None = None
        self.stopped = False

    def feed(self, event: SseEvent) -> list[Parsed]:
        try:
            payload = json.loads(event.data)
        except ValueError:
            return [StreamFailure("protocol", f"an event that is not JSON: {event.data[:120]!r}")]
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event.event
        if kind == "message_start":
            usage = (payload.get("message") or {}).get("usage") or {}
            self.input_tokens = sum(
                int(usage.get(key) or 0)
                for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
            self.output_tokens = int(usage.get("output_tokens") or 0)
        elif kind == "content_block_start":
            block = payload.get("content_block") or {}
            self.blocks[int(payload.get("index", 0))] = {
                "type": block.get("type", ""), "id": block.get("id", ""), "name": block.get("name", ""), "json": "",
            }
            if block.get("type") == "text" and block.get("text"):
                return [TextDelta(block["text"])]
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return [TextDelta(delta["text"])]
            if delta.get("type") == "thinking_delta" and delta.get("thinking"):
                return [Thinking(delta["thinking"])]
            if delta.get("type") == "input_json_delta":
                block = self.blocks.setdefault(int(payload.get("index", 0)), {"type": "tool_use", "id": "", "name": "", "json": ""})
                block["json"] += delta.get("partial_json") or ""
        elif kind == "message_delta":
            reason = (payload.get("delta") or {}).get("stop_reason")
            if reason:
                self.finish = STOP_REASONS.get(reason, "stop")
            usage = payload.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self.output_tokens = int(usage["output_tokens"])  # cumulative
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = payload.get("error") or {}
            return [StreamFailure(ERROR_KINDS.get(error.get("type", ""), "server"), str(error.get("message") or error))]
        return []

    def close(self) -> list[Parsed]:
        out: list[Parsed] = [
            ToolCall(block["id"] or f"toolu_{index}", block["name"], block["json"] or "{}")
            for index, block in sorted(self.blocks.items())
            if block["type"] == "tool_use"
        ]
        if self.input_tokens or self.output_tokens:
            out.append(Usage(self.input_tokens, self.output_tokens))
        out.append(Finish(self.finish if self.stopped or self.finish else None))
        return out


class AnthropicProvider(LLMProvider):
    kind = "anthropic"
    path = "/messages"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def build_body(self, request: WireRequest) -> dict[str, Any]:
        return build_body(request)

    def parser(self) -> EventParser:
        return AnthropicParser()
