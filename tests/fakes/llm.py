"""A fake LLM API for tests: `/v1/chat/completions`, `/v1/responses`, `/v1/messages` and
`/v1/models` over real HTTP with SSE, in each API's documented wire format.

What it answers depends on markers in the latest prompt, so a test picks the case by what
it sends: `#cap` (400 naming an output cap of 4096 while the budget is higher), `#length`
(cut at the budget once), `#alwayslength`, `#overflow` (400 context overflow while the
text `hello-old` is in the request), `#429` (rate limited once, retry-after 0),
`#429always`, `#401` (quotes the key back), `#500` (a server error echoing the key), `#html`, `#drop` (connection dropped
mid-stream), `#cut` (stream ends mid-event), `#stall` (sends a little, then only
keep-alives), `#silent` (sends a little, then not a byte),
`#think` (reasoning first), `#long <n>` (n one-token deltas, for the benchmark; sent at
`tokens_per_second` when that is set, else as fast as the socket takes them), `#tool {json}` (calls relay_tool with that JSON, then answers
with the tool's result). Anything else: `fake: <prompt>`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import WSGIRequestHandler, make_server

CONTINUATION_START = "Your previous answer was cut off"
CAP = 4096
USAGE = (11, 7)


@dataclass
class Plan:
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    tool_args: list[str] = field(default_factory=list)
    # The Responses API names the tool set a called tool came from, when the request gave its tools
    # in one (`{"type": "namespace", "name": "mcp__relay", "tools": [...]}`, as the Codex CLI does).
    tool_namespace: str | None = None
    finish: str = "stop"  # stop | length | tool_calls
    ending: str = "done"  # done | cut | drop | stall | silent


class QuietHandler(WSGIRequestHandler):
    """A fake's handler: no access log line per request (a fake records what it was sent
    itself; the lines filled the benchmarks' output), and no traceback for a client that went
    away first (a stopped turn) while the end of an answer was still buffered."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def finish(self) -> None:
        with contextlib.suppress(ConnectionError):
            super().finish()


class WholeChunkHandler(QuietHandler):
    """Sends each chunk of a streamed answer in one write, and the end of the answer at once,
    as API servers do.

    werkzeug's handler writes a chunk's size line, data and end unbuffered (four sends, often
    two TCP segments); it flushes after each chunk, so a buffered writer sends one each. It
    does not flush the last chunk (the end of a chunked body): that waited in the buffer while
    werkzeug looked for unread request bytes for 10 ms, and every streamed turn then ended
    10 ms after the fake's `last_byte` (docs/benchmarks.md#provider-streaming-python--m-bench-providers).
    """

    wbufsize = -1

    def setup(self) -> None:
        super().setup()
        self.wfile = _EndFlushed(self.wfile)  # type: ignore[assignment]


class _EndFlushed:
    """A buffered writer that sends the last chunk of a chunked body as soon as it is written."""

    LAST_CHUNK = b"0\r\n\r\n"

    def __init__(self, buffered: Any) -> None:
        self._buffered = buffered

    def write(self, data: bytes) -> int:
        written = self._buffered.write(data)
        if data == self.LAST_CHUNK:
            self._buffered.flush()
        return int(written)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buffered, name)


class FakeLLM:
    def __init__(self, api_key: str = "sk-fake-test-key-0123456789", tokens_per_second: float = 0.0) -> None:
        self.api_key = api_key
        # The pace of `#long` replies, one event per token; 0: as fast as possible.
        self.tokens_per_second = tokens_per_second
        self.requests: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        # time.time() when the first and the last byte of the answer to a prompt were handed to the server.
        self.first_byte: dict[str, float] = {}
        self.last_byte: dict[str, float] = {}
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.app = self._make_app()
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True, request_handler=WholeChunkHandler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeLLM:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [entry["body"] for entry in self.requests if entry["path"].endswith(path)]

    # The app --------------------------------------------------------------------------

    def _make_app(self) -> Flask:
        app = Flask("fake-llm")

        @app.get("/v1/models")
        def models() -> Any:
            if not self._key_ok("anthropic" if request.headers.get("anthropic-version") else "openai"):
                return self._unauthorized()
            return {"object": "list", "data": [{"id": "fake-large", "object": "model"}, {"id": "fake-small", "object": "model"}]}

        @app.post("/v1/chat/completions")
        def chat() -> Any:
            return self._answer("chat", "max_tokens", self._chat_texts)

        @app.post("/v1/responses")
        def responses() -> Any:
            return self._answer("responses", "max_output_tokens", self._responses_texts)

        @app.post("/v1/messages")
        def messages() -> Any:
            if request.headers.get("anthropic-version") != "2023-06-01":
                return {"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version header is required"}}, 400
            return self._answer("anthropic", "max_tokens", self._anthropic_texts)

        return app

    def _key_ok(self, style: str) -> bool:
        if style == "anthropic":
            return request.headers.get("x-api-key") == self.api_key
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _unauthorized(self, sent: str | None = None) -> Any:
        sent = sent or request.headers.get("x-api-key") or request.headers.get("Authorization", "")
        return {"error": {"message": f"Incorrect API key provided: {sent}.", "type": "invalid_request_error"}}, 401

    def _answer(self, protocol: str, budget_field: str, texts: Any) -> Any:
        body = request.get_json(force=True)
        with self.lock:
            self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
        user_texts, tool_result = texts(body)
        prompts = [text for text in user_texts if not text.startswith(CONTINUATION_START)]
        prompt = prompts[-1] if prompts else ""
        continued = any(text.startswith(CONTINUATION_START) for text in user_texts)
        with self.lock:
            self.counts[prompt] = self.counts.get(prompt, 0) + 1
            seen = self.counts[prompt]
        if "#401" in prompt:
            return self._unauthorized(self.api_key)
        if "#500" in prompt:
            return {"error": {"message": f"internal error while serving key {self.api_key}", "type": "server_error"}}, 500
        if not self._key_ok("anthropic" if protocol == "anthropic" else "openai"):
            return self._unauthorized()
        budget = int(body.get(budget_field) or 0)
        if "#cap" in prompt and budget > CAP:
            return {"error": {"message": f"{budget_field}: {budget} > {CAP}, which is the maximum allowed number of output tokens for fake-large", "type": "invalid_request_error"}}, 400
        if "#overflow" in prompt and "hello-old" in json.dumps(body):
            return {"error": {"message": "This model's maximum context length is 100 tokens. Please reduce the length of the messages.", "code": "context_length_exceeded"}}, 400
        if ("#429" in prompt and seen == 1) or "#429always" in prompt:
            return Response(json.dumps({"error": {"message": "Rate limit reached"}}), status=429, headers={"retry-after": "0"}, content_type="application/json")
        if "#html" in prompt:
            return Response("<html><body>Welcome to nginx</body></html>", content_type="text/html")
        plan = self._plan(prompt, continued, tool_result, budget)
        if protocol == "responses":
            plan.tool_namespace = _namespace_of(body, "relay_tool")
        writer = {"chat": chat_stream, "responses": responses_stream, "anthropic": anthropic_stream}[protocol]
        events = writer(plan)
        if "#long" in prompt and self.tokens_per_second > 0:
            events = paced(events, self.tokens_per_second)
        return Response(self._ending(events, plan, prompt), content_type="text/event-stream")

    def _plan(self, prompt: str, continued: bool, tool_result: str | None, budget: int) -> Plan:
        if "#cap" in prompt:
            return Plan(text=["budget ", str(budget)])
        if "#long" in prompt:  # `#long <n>`: n one-token deltas
            count = int(prompt.split("#long", 1)[1].split()[0])
            return Plan(text=[f" t{number}" for number in range(count)])
        if "#alwayslength" in prompt:
            return Plan(text=["still ", "going "], finish="length")
        if "#length" in prompt:
            return Plan(text=["part two."]) if continued else Plan(text=["part ", "one, "], finish="length")
        if "#overflow" in prompt:
            return Plan(text=["fit"])
        if "#429" in prompt:
            return Plan(text=["after ", "retry"])
        if "#drop" in prompt:
            return Plan(text=["partial "], ending="drop")
        if "#cut" in prompt:
            return Plan(text=["partial "], ending="cut")
        if "#stall" in prompt:
            return Plan(text=["waiting "], ending="stall")
        if "#silent" in prompt:
            return Plan(text=["waiting "], ending="silent")
        if "#unstorable" in prompt:  # a NUL and a lone surrogate, as JSON escapes carry them
            return Plan(text=["bad ", "\ud800", " and ", "\x00", " end"])
        if "#think" in prompt:
            return Plan(thinking=["Let me ", "think."], text=["thought ", "through"])
        if "#tool" in prompt:
            if tool_result is not None:
                return Plan(text=["tool said: ", tool_result[:2000]])
            arguments = prompt.split("#tool", 1)[1].strip()
            third = max(len(arguments) // 3, 1)
            return Plan(tool_args=[arguments[:third], arguments[third : 2 * third], arguments[2 * third :]], finish="tool_calls")
        words = ("fake: " + prompt).split(" ")
        return Plan(text=[word + " " for word in words[:-1]] + [words[-1]])

    def _ending(self, events: Iterator[str], plan: Plan, prompt: str) -> Iterator[str]:
        self.first_byte[prompt] = time.time()
        yield from events
        self.last_byte[prompt] = time.time()
        if plan.ending == "stall":  # alive (keep-alive comments) but never finishing
            while not self.release.wait(0.2):
                yield ": keep-alive\n\n"
        elif plan.ending == "silent":  # not a byte more
            self.release.wait(60)

    # What each protocol's request says ------------------------------------------------

    @staticmethod
    def _chat_texts(body: dict[str, Any]) -> tuple[list[str], str | None]:
        texts = [m["content"] for m in body["messages"] if m["role"] == "user"]
        tools = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return texts, tools[-1] if tools else None

    @staticmethod
    def _responses_texts(body: dict[str, Any]) -> tuple[list[str], str | None]:
        texts = [part["text"] for item in body["input"] if item.get("role") == "user" for part in item["content"] if part["type"] == "input_text"]
        tools = [_output_text(item["output"]) for item in body["input"] if item.get("type") == "function_call_output"]
        return texts, tools[-1] if tools else None

    @staticmethod
    def _anthropic_texts(body: dict[str, Any]) -> tuple[list[str], str | None]:
        texts, tools = [], []
        for message in body["messages"]:
            if message["role"] != "user":
                continue
            for block in message["content"]:
                if block["type"] == "text":
                    texts.append(block["text"])
                elif block["type"] == "tool_result":
                    tools.append(block["content"])
        return texts, tools[-1] if tools else None


def _namespace_of(body: dict[str, Any], tool: str) -> str | None:
    """The tool set (`"type": "namespace"`) of a Responses request that holds `tool`, if any."""
    for entry in body.get("tools") or []:
        if entry.get("type") == "namespace" and any(inner.get("name") == tool for inner in entry.get("tools") or []):
            return str(entry.get("name"))
    return None


def _output_text(output: Any) -> str:
    """A function_call_output's `output`: text, or a list of content parts with text."""
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, dict))
    return str(output)


def paced(events: Iterator[str], per_second: float) -> Iterator[str]:
    """`events` at `per_second`, each due at a fixed time from the start so that a late one
    (a busy machine) is followed at once by the next, not by a whole interval: the rate holds."""
    started = time.monotonic()
    for number, event in enumerate(events):
        delay = started + number / per_second - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield event


def sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return head + "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"


def _cut_or_drop(plan: Plan, partial: str) -> Iterator[str]:
    if plan.ending == "cut":
        yield partial  # an event that never ends: the stream stops here
    elif plan.ending == "drop":
        raise ConnectionAbortedError("the fake drops the connection")


def chat_stream(plan: Plan) -> Iterator[str]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-large"}
    # The role chunk, its JSON spread over two data: lines (joined with a newline: still JSON).
    first = json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
    yield ": keep-alive\n\n"
    yield "data: " + first[:20] + "\ndata: " + first[20:] + "\n\n"
    for piece in plan.thinking:
        yield sse({**base, "choices": [{"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}]})
    for piece in plan.text:
        yield sse({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    if plan.tool_args:
        yield sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "relay_tool", "arguments": ""}}]}, "finish_reason": None}]})
        for piece in plan.tool_args:
            yield sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, "finish_reason": None}]})
    yield from _cut_or_drop(plan, 'data: {"id": "chatcmpl-1", "choi')
    if plan.ending in ("cut", "drop", "stall", "silent"):
        return
    yield sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": plan.finish}]})
    yield sse({**base, "choices": [], "usage": {"prompt_tokens": USAGE[0], "completion_tokens": USAGE[1], "total_tokens": sum(USAGE)}})
    yield sse("[DONE]")


def responses_stream(plan: Plan) -> Iterator[str]:
    yield sse({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}, "response.created")
    for piece in plan.thinking:
        yield sse({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": piece}, "response.reasoning_summary_text.delta")
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    if plan.text:
        yield sse({"type": "response.output_item.added", "output_index": 0, "item": message}, "response.output_item.added")
    for piece in plan.text:
        yield sse({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": piece}, "response.output_text.delta")
    if plan.text and plan.ending == "done":
        content = [{"type": "output_text", "text": "".join(plan.text), "annotations": []}]
        done = {**message, "status": "completed", "content": content}
        yield sse({"type": "response.output_item.done", "output_index": 0, "item": done}, "response.output_item.done")
    if plan.tool_args:
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "relay_tool", "arguments": ""}
        if plan.tool_namespace:
            item["namespace"] = plan.tool_namespace
        yield sse({"type": "response.output_item.added", "output_index": 1, "item": item}, "response.output_item.added")
        for piece in plan.tool_args:
            yield sse({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": piece}, "response.function_call_arguments.delta")
        yield sse({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 1, "arguments": "".join(plan.tool_args)}, "response.function_call_arguments.done")
        done = {**item, "status": "completed", "arguments": "".join(plan.tool_args)}
        yield sse({"type": "response.output_item.done", "output_index": 1, "item": done}, "response.output_item.done")
    yield from _cut_or_drop(plan, 'event: response.output_text.delta\ndata: {"type": "resp')
    if plan.ending in ("cut", "drop", "stall", "silent"):
        return
    usage = {"input_tokens": USAGE[0], "output_tokens": USAGE[1], "total_tokens": sum(USAGE)}
    if plan.finish == "length":
        response = {"id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": usage}
        yield sse({"type": "response.incomplete", "response": response}, "response.incomplete")
    else:
        yield sse({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": usage}}, "response.completed")


def anthropic_stream(plan: Plan) -> Iterator[str]:
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "fake-large", "stop_reason": None, "usage": {"input_tokens": USAGE[0] - 3, "cache_read_input_tokens": 3, "output_tokens": 1}}}
    yield sse(start, "message_start")
    index = 0
    if plan.thinking:
        yield sse({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}, "content_block_start")
        for piece in plan.thinking:
            yield sse({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    yield sse({"type": "ping"}, "ping")
    if plan.text:
        yield sse({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}, "content_block_start")
        for piece in plan.text:
            yield sse({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    if plan.tool_args:
        yield sse({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "relay_tool", "input": {}}}, "content_block_start")
        for piece in plan.tool_args:
            yield sse({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield from _cut_or_drop(plan, 'event: content_block_delta\ndata: {"type": "content_blo')
    if plan.ending in ("cut", "drop", "stall", "silent"):
        return
    reason = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}[plan.finish]
    yield sse({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}, "usage": {"output_tokens": USAGE[1]}}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
