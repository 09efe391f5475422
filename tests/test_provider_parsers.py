"""The SSE framing and each protocol's pure event parser, on recorded streams in the APIs'
documented formats (docs/providers.md): tool calls split across chunks, usage in the final chunk,
a stream cut mid-event; and the error classification of refused requests."""

from __future__ import annotations

from oar.actions.schema import relay_tool, system_prompt
from oar.providers.anthropic import AnthropicParser
from oar.providers.anthropic import build_body as anthropic_body
from oar.providers.base import TextDelta, Usage
from oar.providers.chat import ChatParser
from oar.providers.chat import build_body as chat_body
from oar.providers.llm import (
    EventParser,
    Finish,
    Parsed,
    Thinking,
    ToolCall,
    TurnConversation,
    WireMessage,
    WireRequest,
)
from oar.providers.responses import ResponsesParser
from oar.providers.responses import build_body as responses_body
from oar.providers.sse import SseEvent, budget_cap, classify, sse_events


def cut_everywhere(stream: str, size: int = 7) -> list[bytes]:
    raw = stream.encode()
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def parse(parser: EventParser, stream: str) -> list[Parsed]:
    out: list[Parsed] = []
    for event in sse_events(cut_everywhere(stream)):
        out.extend(parser.feed(event))
    return out + parser.close()


def text_of(parsed: list[Parsed]) -> str:
    return "".join(item.text for item in parsed if isinstance(item, TextDelta))


# Framing ------------------------------------------------------------------------------


def test_it_joins_multi_line_data_and_ignores_comments_and_keep_alives() -> None:
    stream = ": keep-alive\r\n\r\nevent: note\r\ndata: first\r\ndata:second\r\n\r\n:ping\n\ndata: {\"a\":\ndata: 1}\n\n"
    events = list(sse_events(cut_everywhere(stream, 3)))
    assert events == [SseEvent("note", "first\nsecond"), SseEvent("message", '{"a":\n1}')]


def test_it_handles_crlf_split_across_chunks_and_multi_byte_characters() -> None:
    chunks = [b"data: caf\xc3", b"\xa9\r", b"\n\r", b"\ndata: two\r\r"]
    assert list(sse_events(chunks)) == [SseEvent("message", "café"), SseEvent("message", "two")]


def test_an_event_cut_off_by_the_end_of_the_stream_is_dropped() -> None:
    assert list(sse_events([b"data: whole\n\ndata: {\"cho"])) == [SseEvent("message", "whole")]


# chat -----------------------------------------------------------------------------------

CHAT_STREAM = """data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"Hmm."},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Let me look."},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"relay_tool","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"action\\": \\"list_"}}]},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"sessions\\"}"}}]},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}

data: [DONE]

"""


def test_chat_parses_text_reasoning_a_split_tool_call_and_the_final_usage() -> None:
    parsed = parse(ChatParser(), CHAT_STREAM)
    assert text_of(parsed) == "Let me look."
    assert Thinking("Hmm.") in parsed
    assert ToolCall("call_abc", "relay_tool", '{"action": "list_sessions"}') in parsed
    assert Usage(120, 30) in parsed
    assert parsed[-1] == Finish("tool_calls")


def test_chat_cut_mid_event_has_no_finish_reason() -> None:
    cut = CHAT_STREAM.split("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},")[0]
    parsed = parse(ChatParser(), cut + 'data: {"id":"c1","obj')
    assert text_of(parsed) == "Let me look."
    assert parsed[-1] == Finish(None)


def test_chat_length_is_reported() -> None:
    stream = 'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    assert parse(ChatParser(), stream)[-1] == Finish("length")


# responses ------------------------------------------------------------------------------

RESPONSES_STREAM = """event: response.created
data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi "}

event: response.output_item.added
data: {"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_9","name":"relay_tool","arguments":""}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\\"action\\":"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"\\"usage\\"}"}

event: response.completed
data: {"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":50,"output_tokens":9,"total_tokens":59}}}

"""


def test_responses_parses_text_a_split_function_call_and_usage() -> None:
    parsed = parse(ResponsesParser(), RESPONSES_STREAM)
    assert text_of(parsed) == "Hi "
    assert ToolCall("call_9", "relay_tool", '{"action":"usage"}') in parsed
    assert Usage(50, 9) in parsed
    assert parsed[-1] == Finish("stop")


def test_responses_incomplete_at_the_budget_is_length_and_a_cut_stream_has_no_finish() -> None:
    incomplete = 'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}\n\n'
    assert parse(ResponsesParser(), incomplete)[-1] == Finish("length")
    cut = RESPONSES_STREAM.split("event: response.completed")[0] + "event: response.completed\ndata: {\"type\""
    assert parse(ResponsesParser(), cut)[-1] == Finish(None)


# anthropic ------------------------------------------------------------------------------

ANTHROPIC_STREAM = """event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":20,"cache_read_input_tokens":100,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Considering."}}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking"}}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"relay_tool","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"action\\": \\"rel"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ay_info\\"}"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}

event: message_stop
data: {"type":"message_stop"}

"""


def test_anthropic_parses_thinking_text_a_split_tool_use_and_cumulative_usage() -> None:
    parsed = parse(AnthropicParser(), ANTHROPIC_STREAM)
    assert text_of(parsed) == "Checking"
    assert Thinking("Considering.") in parsed
    assert ToolCall("toolu_1", "relay_tool", '{"action": "relay_info"}') in parsed
    assert Usage(120, 42) in parsed
    assert parsed[-1] == Finish("tool_calls")


def test_anthropic_cut_mid_event_has_no_finish_and_an_error_event_is_a_failure() -> None:
    cut = ANTHROPIC_STREAM.split("event: message_delta")[0] + 'event: message_delta\ndata: {"type":"mess'
    assert parse(AnthropicParser(), cut)[-1] == Finish(None)
    error = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    failure = parse(AnthropicParser(), error)[0]
    assert (failure.kind, failure.message) == ("overloaded", "Overloaded")  # type: ignore[union-attr]


# Request builders -------------------------------------------------------------------------


def wire(messages: list[WireMessage]) -> WireRequest:
    return WireRequest(model="m", system=system_prompt(), messages=messages, max_tokens=32768, tool=relay_tool(), effort=None)


def test_anthropic_marks_the_system_block_and_the_last_message_for_caching() -> None:
    body = anthropic_body(wire([WireMessage("user", "a"), WireMessage("assistant", "b"), WireMessage("user", "c")]))
    assert body["system"] == [{"type": "text", "text": system_prompt(), "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][-1]["content"][-1] == {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}}
    assert all("cache_control" not in block for m in body["messages"][:-1] for block in m["content"])
    assert body["max_tokens"] == 32768 and body["tools"][0]["name"] == "relay_tool"


def test_each_builder_carries_a_tool_round_in_its_own_spelling() -> None:
    call = ToolCall("call_1", "relay_tool", '{"action":"usage"}')
    messages = [WireMessage("user", "go"), WireMessage("assistant", "", tool_calls=[call]), WireMessage("tool", '{"ok":true}', call_id="call_1")]
    chat = chat_body(wire(messages))["messages"]
    assert chat[2]["tool_calls"][0]["function"] == {"name": "relay_tool", "arguments": '{"action":"usage"}'}
    assert chat[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"ok":true}'}
    responses = responses_body(wire(messages))
    assert responses["input"][0] == {"role": "user", "content": [{"type": "input_text", "text": "go"}]}
    assert responses["input"][1]["type"] == "function_call" and responses["input"][2]["type"] == "function_call_output"
    assert responses["max_output_tokens"] == 32768
    anthropic = anthropic_body(wire(messages))["messages"]
    assert anthropic[1]["content"][0] == {"type": "tool_use", "id": "call_1", "name": "relay_tool", "input": {"action": "usage"}}
    assert anthropic[2]["content"][0]["type"] == "tool_result"


def test_each_builder_offers_the_relay_tool_it_is_given_and_nothing_without_one() -> None:
    tool = relay_tool()
    request = wire([WireMessage("user", "go")])
    assert chat_body(request)["tools"] == [{"type": "function", "function": {
        "name": "relay_tool", "description": tool.description, "parameters": tool.parameters}}]
    assert chat_body(request)["messages"][0] == {"role": "system", "content": system_prompt()}
    assert responses_body(request)["tools"][0] == {
        "type": "function", "name": "relay_tool", "description": tool.description, "parameters": tool.parameters}
    assert responses_body(request)["instructions"] == system_prompt()
    assert anthropic_body(request)["tools"] == [{"name": "relay_tool", "description": tool.description, "input_schema": tool.parameters}]
    bare = WireRequest(model="m", system="", messages=[WireMessage("user", "go")], max_tokens=1024, tool=None, effort=None)
    assert "tools" not in chat_body(bare) and chat_body(bare)["messages"] == [{"role": "user", "content": "go"}]
    assert "tools" not in responses_body(bare) and "instructions" not in responses_body(bare)
    assert "tools" not in anthropic_body(bare) and "system" not in anthropic_body(bare)


def test_the_overflow_rebuild_drops_the_older_half_of_the_history_once() -> None:
    history = [{"role": r, "text": t} for r, t in [("user", "1"), ("assistant", "2"), ("user", "3"), ("assistant", "4")]]
    conversation = TurnConversation(history, "now")
    assert conversation.rebuild_without_oldest()
    assert [m.text for m in conversation.messages] == ["3", "4", "now"]
    assert not conversation.rebuild_without_oldest()


# Error classification -----------------------------------------------------------------


def test_a_400_naming_the_output_cap_is_a_budget_refusal_with_that_cap() -> None:
    assert budget_cap("max_tokens: 32768 > 8192, which is the maximum allowed number of output tokens for claude-3", 32768) == 8192
    assert budget_cap("max_tokens must be at most 4,096", 32768) == 4096
    assert budget_cap("messages: field required", 32768) is None
    body = b'{"error": {"message": "max_tokens is too large: 32768. This model supports at most 16384 completion tokens."}}'
    error = classify("lab", 400, {"content-type": "application/json"}, body, 32768, None)
    assert (error.kind, error.cap) == ("budget", 16384)


def test_statuses_are_classified_and_the_key_is_never_quoted() -> None:
    key = "sk-secret-123456"
    auth = classify("lab", 401, {}, f'{{"error": {{"message": "Incorrect API key provided: {key}"}}}}'.encode(), 32768, key)
    assert auth.kind == "auth" and key not in auth.message and "Check the key" in auth.message
    limited = classify("lab", 429, {"retry-after": "7"}, b"slow down", 32768, None)
    assert (limited.kind, limited.retry_after, limited.retryable) == ("rate_limit", 7.0, True)
    assert classify("lab", 529, {}, b"", 32768, None).kind == "overloaded"
    overflow = classify("lab", 400, {}, b'{"error":{"message":"prompt is too long: 250000 tokens > 200000 maximum"}}', 32768, None)
    assert overflow.kind == "overflow"
    html = classify("lab", 502, {"content-type": "text/html"}, b"<html>Bad gateway</html>", 32768, None)
    assert "HTML page" in html.message and "<html>" not in html.message
