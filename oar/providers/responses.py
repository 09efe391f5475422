"""`responses`: the OpenAI Responses API (`/responses`), with its native `input_*` part
spellings. A request builder and a pure event parser; the rest is `oar.providers.llm`.
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


def build_body(request: WireRequest) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "tool":
            items.append({"type": "function_call_output", "call_id": message.call_id, "output": message.text})
        elif message.role == "assistant":
            if message.text:
                items.append({"role": "assistant", "content": [{"type": "output_text", "text": message.text}]})
            for call in message.tool_calls:
                items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments})
        else:
            items.append({"role": "user", "content": [{"type": "input_text", "text": message.text}]})
    body: dict[str, Any] = {
        "model": request.model,
        **({"instructions": request.system} if request.system else {}),
        "input": items,
        "stream": True,
        "store": False,
        "max_output_tokens": request.max_tokens,
    }
    if request.tool is not None:
        body["tools"] = [{"type": "function", "name": request.tool.name, "description": request.tool.description,
                          "parameters": request.tool.parameters}]
    if request.effort:
        body["reasoning"] = {"effort": request.effort}
    return body


class ResponsesParser(EventParser):
    """`response.*` events; function call arguments arrive as deltas keyed by item id."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, str]] = {}
        self.finish: str | None = None
        self.usage: Usage | None = None

    def feed(self, event: SseEvent) -> list[Parsed]:
        try:
            payload = json.loads(event.data)
        except ValueError:
            return [StreamFailure("protocol", f"an event that is not JSON: {event.data[:120]!r}")]
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event.event
        if kind == "response.output_text.delta" and payload.get("delta"):
            return [TextDelta(payload["delta"])]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and payload.get("delta"):
            return [Thinking(payload["delta"])]
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = payload.get("item") or {}
            if item.get("type") == "function_call":
                call = self.calls.setdefault(item.get("id") or item.get("call_id", ""), {"call_id": "", "name": "", "arguments": ""})
                call["call_id"] = item.get("call_id") or call["call_id"]
                call["name"] = item.get("name") or call["name"]
                if kind == "response.output_item.done" and item.get("arguments") is not None:
                    call["arguments"] = item["arguments"]
        elif kind == "response.function_call_arguments.delta":
            call = self.calls.setdefault(payload.get("item_id", ""), {"call_id": "", "name": "", "arguments": ""})
            call["arguments"] += payload.get("delta") or ""
        elif kind == "response.function_call_arguments.done":
            call = self.calls.setdefault(payload.get("item_id", ""), {"call_id": "", "name": "", "arguments": ""})
            call["arguments"] = payload.get("arguments", call["arguments"])
        elif kind in ("response.completed", "response.incomplete"):
            response = payload.get("response") or {}
            usage = response.get("usage") or {}
            if usage:
                self.usage = Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
            reason = (response.get("incomplete_details") or {}).get("reason")
            self.finish = "length" if kind == "response.incomplete" and reason == "max_output_tokens" else "stop"
        elif kind in ("response.failed", "error"):
            error = (payload.get("response") or {}).get("error") or payload.get("error") or payload
            message = error.get("message") if isinstance(error, dict) else str(error)
            return [StreamFailure("server", str(message or "the response failed"))]
        return []

    def close(self) -> list[Parsed]:
        out: list[Parsed] = [
            ToolCall(call["call_id"] or item_id, call["name"], call["arguments"] or "{}")
            for item_id, call in self.calls.items()
        ]
        if self.usage is not None:
            out.append(self.usage)
        out.append(Finish(self.finish))
        return out


class ResponsesProvider(LLMProvider):
    kind = "responses"
    path = "/responses"

    def build_body(self, request: WireRequest) -> dict[str, Any]:
        return build_body(request)

    def parser(self) -> EventParser:
        return ResponsesParser()
