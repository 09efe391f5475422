"""Traces (docs/operations.md#tracing): three real paired relays ("desk" → "build-box" → "lab",
each its gunicorn web and RQ worker) send their spans over OTLP/HTTP to a receiver in the test,
which decodes what it receives; a send that crosses all three arrives as one trace."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.fakes.llm import FakeLLM
from tests.support.clients import Agent
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.relays import Relay, named_relays
from tests.test_paired_relays import owner_writes, pair

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    running = OtlpReceiver()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, redis_url: str, receiver: OtlpReceiver) -> Iterator[dict[str, Relay]]:
    # The SDK's own variables: the endpoint, and batches sent a tenth of a second after a span ends.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with named_relays(tmp_path_factory.mktemp("traced"), ("desk", "build-box", "lab"), redis_url, env) as stacks:
        relays = {name: stack.relay for name, stack in stacks.items() if stack.relay is not None}
        pair(relays["desk"], relays["build-box"])
        pair(relays["build-box"], relays["lab"])
        for relay in relays.values():
            relay.owner.settings(accept_agent_prompts=True)
        yield relays


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def only(spans: list[ReceivedSpan], relay: str, name: str) -> ReceivedSpan:
    found = [span for span in spans if span.relay == relay and span.name == name]
    assert len(found) == 1, (relay, name, [(s.relay, s.name) for s in spans])
    return found[0]


def test_a_send_from_desk_through_build_box_to_lab_is_one_trace(chain: dict[str, Relay], receiver: OtlpReceiver) -> None:
    desk, build_box, lab = chain["desk"], chain["build-box"], chain["lab"]
    agent = desk.conversation("traced")
    owner_writes(desk, agent, "@build-box")
    on_box = build_box.owner.conversation("hop 1")
    owner_writes(build_box, on_box, "you may use @lab")
    on_lab = lab.owner.post("/api/v1/owner/sessions", {"title": "hop 2"})["session"]["id"]
    onward = {"action": "send", "relay": "lab", "session": on_lab, "text": "hello lab", "wait_seconds": 60}

    # The agent's own trace context, in the call's headers: the chain continues it.
    header, trace_id, root = traceparent()
    status, sent = agent.request("POST", "/api/v1/relay_tool", {
        "action": "send", "relay": "build-box", "session": on_box.session_id,
        "text": "!relay " + json.dumps(onward), "wait_seconds": 90,
    }, headers={"traceparent": header})
    assert status == 200 and sent["status"] == "done", sent
    relayed_answer = json.loads(sent["reply"]["text"].split("relay: ", 1)[1])
    assert relayed_answer["ok"] is True and relayed_answer["status"] == "done", sent

    expected = {
        ("desk", "tools/call relay_tool"), ("desk", "POST /api/peer/v1/call"),
        ("build-box", "tools/call relay_tool"), ("build-box", "invoke_agent"), ("build-box", "execute_tool relay_tool"),
        ("build-box", "POST /api/peer/v1/call"), ("lab", "tools/call relay_tool"), ("lab", "invoke_agent"),
    }

    def whole(spans: list[ReceivedSpan]) -> list[ReceivedSpan] | None:
        mine = [span for span in spans if span.trace_id == trace_id]
        return mine if expected <= {(span.relay, span.name) for span in mine} else None

    spans = receiver.wait_for("every span of the chain, desk to lab's turn", whole)
    by_id = {span.span_id: span for span in spans}
    called_desk = only(spans, "desk", "tools/call relay_tool")
    assert called_desk.parent_span_id == root and called_desk.attributes["oar.action"] == "send"
    assert called_desk.attributes["gen_ai.conversation.id"] == agent.session_id
    assert called_desk.attributes["gen_ai.tool.name"] == "relay_tool"
    to_box = only(spans, "desk", "POST /api/peer/v1/call")
    assert to_box.parent_span_id == called_desk.span_id
    called_box = only(spans, "build-box", "tools/call relay_tool")
    assert called_box.parent_span_id == to_box.span_id and called_box.attributes["oar.via"] == "peer"
    turn_on_box = only(spans, "build-box", "invoke_agent")
    assert turn_on_box.parent_span_id == called_box.span_id
    assert turn_on_box.resource["oar.process"] == "worker" and turn_on_box.attributes["oar.outcome"] == "done"
    relayed = only(spans, "build-box", "execute_tool relay_tool")
    assert relayed.parent_span_id == turn_on_box.span_id and relayed.attributes["oar.via"] == "provider"
    to_lab = only(spans, "build-box", "POST /api/peer/v1/call")
    assert to_lab.parent_span_id == relayed.span_id
    called_lab = only(spans, "lab", "tools/call relay_tool")
    assert called_lab.parent_span_id == to_lab.span_id
    turn_on_lab = only(spans, "lab", "invoke_agent")
    assert turn_on_lab.parent_span_id == called_lab.span_id
    assert turn_on_lab.attributes["gen_ai.conversation.id"] == on_lab
    # Every span of the chain hangs from the agent's own: one tree, nothing dangling.
    for span in spans:
        assert span.parent_span_id == root or span.parent_span_id in by_id, span
    # No prompt, title or token in any span.
    shown = json.dumps([[span.name, span.attributes, span.resource] for span in receiver.spans])
    for secret in ("hello lab", "hop 1", "traced", agent.token, desk.config.owner_token or ""):
        assert secret not in shown, secret


def mcp_call(relay: Relay, agent: Agent, meta: dict[str, Any], **headers: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "relay_tool", "arguments": {"action": "relay_info", "relay": "this"}, "_meta": meta}}
    response = requests.post(f"{relay.url}/mcp", json=body, timeout=30, headers={
        "Authorization": f"Bearer {agent.token}", "Accept": "application/json, text/event-stream", **headers,
    })
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_an_mcp_call_continues_the_trace_in_its_meta(chain: dict[str, Relay], receiver: OtlpReceiver) -> None:
    desk = chain["desk"]
    agent = desk.conversation("mcp traced")
    header, trace_id, root = traceparent()
    other, _other_trace, _ = traceparent()
    # `_meta` wins over a traceparent header the same request carries.
    answered = mcp_call(desk, agent, {"traceparent": header}, traceparent=other)
    assert answered["result"]["isError"] is False, answered

    span = receiver.wait_for("the MCP call's span", lambda spans: [s for s in spans if s.trace_id == trace_id])[0]
    assert span.name == "tools/call relay_tool" and span.parent_span_id == root, span
    assert span.attributes["mcp.method.name"] == "tools/call" and span.attributes["oar.action"] == "relay_info"
    # A `_meta` whose traceparent is not one (or not a string) is ignored: the call is traced on its own.
    bad = mcp_call(desk, agent, {"traceparent": "00-not-a-trace"})
    assert bad["result"]["isError"] is False, bad
    wrong_type = mcp_call(desk, agent, {"traceparent": 42})
    assert wrong_type["result"]["isError"] is False, wrong_type


def test_a_turn_on_a_model_api_has_a_span_per_provider_request(chain: dict[str, Relay], receiver: OtlpReceiver) -> None:
    desk = chain["desk"]
    llm = FakeLLM().start()
    try:
        status, made = desk.owner.request("PUT", "/api/v1/owner/providers/model-api", {
            "kind": "chat", "base_url": llm.base_url, "api_key": llm.api_key,
        })
        assert status == 200, made
        agent = desk.conversation("model traced")
        header, trace_id, root = traceparent()
        status, started = agent.request("POST", "/api/v1/relay_tool", {
            "action": "create_session", "relay": "this", "provider": "model-api", "text": "hello model", "wait_seconds": 30,
        }, headers={"traceparent": header})
        assert status == 200 and started["status"] == "done", started
        failing = agent.ok("send", relay="this", session=started["session"], text="#500", wait_seconds=30)
        assert failing["status"] == "failed", failing
    finally:
        llm.stop()

    def chats(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [span for span in spans if span.name.startswith("chat ") and span.relay == "desk"]

    spans = receiver.wait_for("the model requests' spans", lambda found: len(chats(found)) >= 2 and found)
    [turn] = [span for span in spans if span.trace_id == trace_id and span.name == "invoke_agent"]
    [request] = [span for span in chats(spans) if span.trace_id == trace_id]
    assert request.parent_span_id == turn.span_id and request.kind == 3, request  # SPAN_KIND_CLIENT
    assert request.name == "chat fake-large" and request.attributes["gen_ai.request.model"] == "fake-large"
    assert request.attributes["server.address"] == "127.0.0.1" and request.attributes["http.response.status_code"] == 200
    assert only([s for s in spans if s.trace_id == trace_id], "desk", "tools/call relay_tool").parent_span_id == root
    [refused] = [span for span in chats(spans) if span.trace_id != trace_id]
    assert refused.error and refused.attributes["error.type"] == "server", refused
