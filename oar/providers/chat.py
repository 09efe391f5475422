"""`chat`: any OpenAI-compatible `/chat/completions` server (OpenAI, DeepSeek, Ollama, vLLM,
llama.cpp). A request builder and a pure event parser; the rest is `oar.providers.llm`.

DeepSeek-style `reasoning_content` (and `reasoning`, as some servers spell it) is thinking.
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

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls",
                  "content_filter": "stop", "eos": "stop"}


def build_body(request: WireRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}] if request.system else []
    for message in request.messages:
        if message.role == "tool":
            messages.append({"role": "tool", "tool_call_id": message.call_id, "content": message.text})
        elif message.tool_calls:
            messages.append({
                "role": "assistant",
                "content": message.text or None,
                "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                    for call in message.tool_calls
                ],
            })
        else:
            messages.append({"role": message.role, "content": message.text})
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": request.max_tokens,
    }
    if request.tool is not None:
        body["tools"] = [{
            "type": "function",
            "function": {
                "name": request.tool.name, "description": request.tool.description, "parameters": request.tool.parameters,
            },
        }]
    if request.effort:
        body["reasoning_effort"] = request.effort
    return body


class ChatParser(EventParser):
    """Chunks of `chat.completion.chunk`; tool calls arrive in pieces keyed by `index`."""

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: str | None = None
        self.done = False

    def feed(self, event: SseEvent) -> list[Parsed]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            chunk = json.loads(event.data)
        except ValueError:
            return [StreamFailure("protocol", f"a chunk that is not JSON: {event.data[:120]!r}")]
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            return [StreamFailure("server", str(message))]
        out: list[Parsed] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                out.append(Thinking(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(TextDelta(content))
            for piece in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(piece.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                function = piece.get("function") or {}
                call["id"] = piece.get("id") or call["id"]
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish = FINISH_REASONS.get(choice["finish_reason"], "stop")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            out.append(Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))
        return out

    def close(self) -> list[Parsed]:
        out: list[Parsed] = [
            ToolCall(call["id"] or f"call_{index}", call["name"], call["arguments"])
            for index, call in sorted(self.calls.items())
        ]
        # A stream that said [DONE] without a finish_reason (some servers) is complete.
        out.append(Finish(self.finish or ("stop" if self.done else None)))
        return out


class ChatProvider(LLMProvider):
    kind = "chat"
    path = "/chat/completions"

    def build_body(self, request: WireRequest) -> dict[str, Any]:
        return build_body(request)

    def parser(self) -> EventParser:
        return ChatParser()
