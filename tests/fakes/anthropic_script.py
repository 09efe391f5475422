"""A fake Anthropic Messages API whose answers a test scripts, for driving the Claude Code CLI:
`POST /v1/messages` over real HTTP, streamed in the API's SSE wire format (`message_start`,
`content_block_start` / `_delta` / `_stop` with `text_delta` or `input_json_delta`,
`message_delta` with the stop reason and usage, `message_stop`), or as one JSON message when
the request does not ask for a stream.

The script is a list of steps, one per answer of the model: the answer to a request is step
n, n being how many answers of the model the request's history holds already (so a request
sent again gets the same answer). A step calls a tool (`use_tool`) or answers with text
(`say`). What a step says, or the input of the tool it calls, may depend on what the client
sent back last (`latest`): the content of the tool_result of the previous step, or the text
of a message the client added itself, such as Claude Code's notice that a background task
completed. Requests that offer no tools (a client's side requests) are answered with a short
text and take no step.

Every request is recorded (path, headers, body); `sent_back()` is what the client passed back
to the model, in order, and `finished()` says whether the script's last step was answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import make_server

from tests.fakes.llm import WholeChunkHandler, sse

MODEL = "claude-fake-1"
USAGE = {"input_tokens": 21, "output_tokens": 9}
SIDE_ANSWER = "ok"
# Stands for `latest` in the text of `say`.
LATEST = "{latest}"

# What the client sent back last → the input of the tool to call.
ToolInput = dict[str, Any] | Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class Step:
    """One answer of the model: a tool it calls (name and input), else its text."""

    text: str = ""
    tool: str | None = None
    tool_input: ToolInput | None = None

    def blocks(self, latest: str, number: int) -> list[dict[str, Any]]:
        """The content blocks of answer `number`, given what the client sent back last."""
        if self.tool is None:
            return [{"type": "text", "text": self.text.replace(LATEST, latest)}]
        given = self.tool_input(latest) if callable(self.tool_input) else self.tool_input
        return [{"type": "tool_use", "id": f"toolu_fake{number:04d}", "name": self.tool, "input": given or {}}]


def use_tool(name: str, tool_input: ToolInput) -> Step:
    return Step(tool=name, tool_input=tool_input)


def say(text: str) -> Step:
    """Text; `{latest}` in it is replaced by what the client sent back last."""
    return Step(text=text)


class ScriptedAnthropic:
    """The server: start it, point the client's `ANTHROPIC_BASE_URL` at `base_url`."""

    def __init__(self, steps: list[Step], api_key: str = "sk-ant-fake-0123456789abcdefghij") -> None:
        self.steps = steps
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        # Answers given so far: each has ids of its own (a client merges answers that share an id).
        self.answers = 0
        self.served: set[int] = set()
        self.lock = threading.Lock()
        self.server = make_server("127.0.0.1", 0, self._make_app(), threaded=True, request_handler=WholeChunkHandler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()

    # What the client sent ----------------------------------------------------------------

    def scripted_bodies(self) -> list[dict[str, Any]]:
        """The bodies of the requests that offered tools (the agent's own loop), in order."""
        with self.lock:
            return [entry["body"] for entry in self.requests if entry["body"] and entry["body"].get("tools")]

    def sent_back(self) -> list[str]:
        """What the client sent the model in the longest conversation it sent: the prompt, then each
        tool_result's content and each message the client added, as text, in order."""
        bodies = self.scripted_bodies()
        longest = max(bodies, key=lambda body: len(body.get("messages", [])), default={})
        return user_turns(longest)

    def tool_names(self) -> list[list[str]]:
        """The names of the tools each scripted request offered the model."""
        return [[tool.get("name", "") for tool in body["tools"]] for body in self.scripted_bodies()]

    def finished(self) -> bool:
        """Whether the script's last step was answered."""
        with self.lock:
            return len(self.steps) - 1 in self.served

    # The app -----------------------------------------------------------------------------

    def _make_app(self) -> Flask:
        app = Flask("fake-anthropic")

        @app.post("/v1/messages")
        def messages() -> Any:
            body = request.get_json(force=True)
            with self.lock:
                self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
            if not self._key_ok():
                return {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, 401
            number, blocks = self._answer(body)
            if body.get("stream"):
                return Response(stream(blocks, number), content_type="text/event-stream")
            return message(blocks, number)

        @app.post("/v1/messages/count_tokens")
        def count_tokens() -> Any:
            return {"input_tokens": USAGE["input_tokens"]}

        return app

    def _key_ok(self) -> bool:
        sent = request.headers.get("x-api-key") or request.headers.get("Authorization", "").removeprefix("Bearer ")
        return sent == self.api_key

    def _answer(self, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
        """The answer's number and content blocks."""
        with self.lock:
            self.answers += 1
            number = self.answers
            if not body.get("tools"):
                return number, say(SIDE_ANSWER).blocks("", number)
            index = answered(body)
            self.served.add(index)
        turns = user_turns(body)
        step = self.steps[index] if index < len(self.steps) else say("(the script has ended)")
        return number, step.blocks(turns[-1] if turns else "", number)


def answered(body: dict[str, Any]) -> int:
    """How many answers of the model the request's history holds."""
    return sum(1 for item in body.get("messages", []) if item.get("role") == "assistant")


def user_turns(body: dict[str, Any]) -> list[str]:
    """The text of each user message of the request's history (tool_results' content included)."""
    return [content_text(item.get("content")) for item in body.get("messages", []) if item.get("role") == "user"]


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            parts.append(content_text(block.get("content")))
        elif block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def stop_reason(blocks: list[dict[str, Any]]) -> str:
    return "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"


def message(blocks: list[dict[str, Any]], number: int) -> dict[str, Any]:
    return {"id": f"msg_fake{number:04d}", "type": "message", "role": "assistant", "model": MODEL, "content": blocks,
            "stop_reason": stop_reason(blocks), "stop_sequence": None, "usage": USAGE}


def stream(blocks: list[dict[str, Any]], number: int) -> Iterator[str]:
    """The answer as the Messages API streams it; a tool's input arrives in two JSON pieces."""
    start = {**message([], number), "stop_reason": None, "usage": {**USAGE, "output_tokens": 1}}
    yield sse({"type": "message_start", "message": start}, "message_start")
    yield sse({"type": "ping"}, "ping")
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            opened = {**block, "input": {}}
            arguments = json.dumps(block["input"])
            half = len(arguments) // 2
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in (arguments[:half], arguments[half:])]
        else:
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        yield sse({"type": "content_block_start", "index": index, "content_block": opened}, "content_block_start")
        for delta in deltas:
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason(blocks), "stop_sequence": None},
             "usage": {"output_tokens": USAGE["output_tokens"]}}
    yield sse(delta, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
