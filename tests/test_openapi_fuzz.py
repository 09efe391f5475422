"""A schemathesis run against a live relay (loopback), with the agent token and the owner token,
then with no token and with a wrong one: no 5xx, and no answer that contradicts the OpenAPI document (status codes, content types,
response schemas), for valid requests and for requests the document says are invalid. The
counts go to the test's output (`-s`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support import logcheck, suites
from tests.support.clients import Agent
from tests.support.relays import Relay

# Examples per operation: valid requests, and requests the document says are invalid
# (more with OAR_SUITE=full); without the right token, fewer: each is refused before its body is read.
EXAMPLES = {GenerationMode.POSITIVE: suites.scale(25, 200), GenerationMode.NEGATIVE: suites.scale(15, 100)}
UNAUTHENTICATED = {GenerationMode.POSITIVE: suites.scale(4, 50), GenerationMode.NEGATIVE: suites.scale(3, 30)}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Saving a provider discovers its models over HTTP at the `base_url` it is given, and pairing asks
# the relay at the `url` it is given who it is: generated URLs would leave loopback, so those
# operations are only validated, not called (pairing's bad input: tests/test_paired_relays.py).
NOT_CALLED = {"PUT /api/v1/owner/providers/{name}", "POST /api/v1/owner/relays"}
# The readiness check answers 503 (in its documented shape) while a part of the relay is not there:
# the shared relay runs no clock. Every other check applies to it.
NOT_THERE_IS_AN_ANSWER = {"GET /readyz"}
# Settings change what every other operation may do (shell tasks, rate limits): called last.
LAST = "PATCH /api/v1/owner/settings"


@dataclass
class Tally:
    operations: int = 0
    examples: int = 0
    # Operations that answered 2xx at least once: the run reached past the refusals.
    answered: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)


def run_operation(
    operation: Any, relay: Relay, headers: dict[str, str], mode: GenerationMode, ids: dict[str, str], tally: Tally,
    examples: dict[GenerationMode, int] = EXAMPLES,
) -> None:
    """Up to EXAMPLES[mode] generated requests; each answer checked, failures collected. Path
    parameters named in `ids` are real ids (so the run reaches past "not found"), others generated."""
    fixed = {name: value for name, value in ids.items() if f"{{{name}}}" in operation.path}

    @settings(
        max_examples=examples[mode], deadline=None, database=None, derandomize=True,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed or None))
    def call(case: Any) -> None:
        # Answer at once: a generated wait of an hour (or a long poll of a minute) tests nothing more.
        if isinstance(case.body, dict) and "wait_seconds" in _arguments_of(case):
            case.body["wait_seconds"] = 0
        if isinstance(case.query, dict) and "wait_seconds" in case.query:
            case.query["wait_seconds"] = 0
        response = case.call(base_url=relay.url, headers=headers, timeout=60)
        tally.examples += 1
        tally.statuses[response.status_code] = tally.statuses.get(response.status_code, 0) + 1
        if response.status_code < 300:
            tally.answered.add(operation.label)
        try:
            checks = CHECKS[1:] if operation.label in NOT_THERE_IS_AN_ANSWER else CHECKS
            case.validate_response(response, checks=checks, headers=headers)
        except BaseException as failure:  # noqa: BLE001 - every failed check is collected, not just the first
            shown = f"{operation.label}: {response.status_code} {response.text[:300]} ← {case.body!r:.200}"
            tally.failures.append(f"{shown}\n    {failure}")

    try:
        call()
    except Unsatisfiable:  # nothing can be invalid about it (no parameters, no body)
        if mode is GenerationMode.POSITIVE:
            raise


def headers_for(operation: Any, relay: Relay, desk: Agent, outside: Agent) -> dict[str, str]:
    """The token the operation's security names: the owner's, else an agent token (the external
    session's for the external agents' API, so that its routes answer more than "not external")."""
    security = operation.definition.raw.get("security", [])
    if {"ownerToken": []} in security:
        token = relay.owner.token
    else:
        token = outside.token if "external" in operation.definition.raw.get("tags", []) else desk.token
    return {"Authorization": f"Bearer {token}"}


def external_session(relay: Relay) -> Agent:
    """A conversation on an external provider with a prompt waiting for its agent."""
    status, body = relay.owner.request("PUT", "/api/v1/owner/providers/outside", {"kind": "external", "models": ["own-model"]})
    assert status == 200, body
    outside = relay.conversation("outside agent", provider="outside")
    relay.owner.post(f"/api/v1/owner/sessions/{outside.session_id}/messages", {"text": "a turn for the external agent"})
    return outside


def _arguments_of(case: Any) -> set[str]:
    schema = case.operation.schema.raw_schema["components"]["schemas"].get(case.body.get("action"), {})
    return set(schema.get("properties", {}))


def test_it_finds_no_server_error_and_no_answer_the_document_contradicts(
    relay: Relay, desk: Agent, logged: logcheck.Logged,
) -> None:
    schema = schemathesis.openapi.from_url(f"{relay.url}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda operation: operation.label == LAST)
    outside = external_session(relay)
    # Real ids for the owner's routes: a conversation of its own (it may end up archived or
    # deleted, its tokens revoked) and a group.
    target = relay.conversation("schemathesis target")
    ids = {"session_id": target.session_id, "group_id": relay.owner.post("/api/v1/owner/groups", {"name": "g"})["group"]["id"]}
    tally = Tally()
    skipped = [operation.label for operation in operations if operation.label in NOT_CALLED]
    called = [operation for operation in operations if operation.label not in NOT_CALLED]
    for mode in EXAMPLES:
        for operation in called:
            run_operation(operation, relay, headers_for(operation, relay, desk, outside), mode, ids, tally)
    tally.operations = len(called)
    print(f"\nschemathesis: {tally.operations} operations called ({len(skipped)} not called: {skipped}), "
          f"{tally.examples} examples, {len(tally.failures)} failures; "
          f"{len(tally.answered)} operations answered 2xx at least once")
    assert "GET /api/v1/external/next" in tally.answered
    assert len(operations) > 30
    assert tally.examples > 10 * tally.operations
    assert not tally.failures, "\n".join(tally.failures[:20])


@pytest.mark.parametrize("token", [None, "oar_s_not-a-token-of-this-relay"], ids=["no token", "wrong token"])
def test_without_the_right_token_every_operation_is_refused_as_documented(
    relay: Relay, desk: Agent, logged: logcheck.Logged, token: str | None,
) -> None:
    """Every operation with no token or a wrong one: no 5xx, nothing the document contradicts,
    and every operation that needs a token answers 401 (none answers 2xx)."""
    schema = schemathesis.openapi.from_url(f"{relay.url}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    target = relay.conversation("schemathesis target")
    ids = {"session_id": target.session_id, "group_id": relay.owner.post("/api/v1/owner/groups", {"name": "g"})["group"]["id"]}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    guarded = [operation for operation in operations if operation.definition.raw.get("security") != []]
    tally = Tally()
    for mode in UNAUTHENTICATED:
        for operation in operations:
            run_operation(operation, relay, headers, mode, ids, tally, UNAUTHENTICATED)
    print(f"\nschemathesis ({'no' if token is None else 'a wrong'} token): {len(operations)} operations, "
          f"{tally.examples} examples, statuses {dict(sorted(tally.statuses.items()))}, {len(tally.failures)} failures")
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert len(guarded) > 30
    reached = tally.answered & {operation.label for operation in guarded}
    assert not reached, f"answered 2xx without the right token: {sorted(reached)}"
    assert 401 in tally.statuses
    # The relay is unchanged: the target is still there, its token still works.
    assert target.ok("read_session", relay="this", session=target.session_id)["session"]["id"] == target.session_id


def test_the_checks_catch_an_answer_the_document_does_not_allow(relay: Relay) -> None:
    """The run above would see a contradiction: an undocumented status and a wrong answer fail."""
    schema = schemathesis.openapi.from_url(f"{relay.url}/api/v1/openapi.json")
    case = schema["/api/v1/owner/groups"]["GET"].Case()
    headers = {"Authorization": f"Bearer {relay.owner.token}"}

    def answer(status: int | None = None, body: bytes | None = None) -> requests.Response:
        response = requests.get(f"{relay.url}/api/v1/owner/groups", headers=headers, timeout=30)
        if status is not None:
            response.status_code = status
        if body is not None:
            response._content = body
        return response

    case.validate_response(answer(), checks=CHECKS, headers=headers)  # the real answer conforms
    with pytest.raises(BaseException, match="418"):
        case.validate_response(answer(status=418), checks=CHECKS, headers=headers)
    with pytest.raises(BaseException, match="groups|schema"):
        case.validate_response(answer(body=b'{"ok": true, "groups": "none"}'), checks=CHECKS, headers=headers)
