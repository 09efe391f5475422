"""A schemathesis run against a live relay (loopback), with the agent token and the owner token:
no 5xx, and no answer that contradicts the OpenAPI document (status codes, content types,
response schemas). The counts go to the test's output (`-s`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.clients import Agent
from tests.support.relays import Relay

EXAMPLES_PER_OPERATION = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Saving a provider discovers its models over HTTP at the `base_url` it is given: generated URLs
# would leave loopback, so that one operation is only validated, not called.
NOT_CALLED = {"PUT /api/v1/owner/providers/{name}"}
# Settings change what every other operation may do (shell tasks, rate limits): called last.
LAST = "PATCH /api/v1/owner/settings"


@dataclass
class Tally:
    operations: int = 0
    examples: int = 0
    failures: list[str] = field(default_factory=list)


def run_operation(operation: Any, relay: Relay, headers: dict[str, str], tally: Tally) -> None:
    """Up to EXAMPLES_PER_OPERATION generated requests; each answer checked, failures collected."""

    @settings(
        max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def call(case: Any) -> None:
        if isinstance(case.body, dict) and "wait_seconds" in _arguments_of(case):
            case.body["wait_seconds"] = 0  # answer at once: a generated wait of hours tests nothing more
        response = case.call(base_url=relay.url, headers=headers, timeout=60)
        tally.examples += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except BaseException as failure:  # noqa: BLE001 - every failed check is collected, not just the first
            shown = f"{operation.label}: {response.status_code} {response.text[:300]} ← {case.body!r:.200}"
            tally.failures.append(f"{shown}\n    {failure}")

    tally.operations += 1
    call()


def _arguments_of(case: Any) -> set[str]:
    schema = case.operation.schema.raw_schema["components"]["schemas"].get(case.body.get("action"), {})
    return set(schema.get("properties", {}))


def test_it_finds_no_server_error_and_no_answer_the_document_contradicts(relay: Relay, desk: Agent) -> None:
    schema = schemathesis.openapi.from_url(f"{relay.url}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda operation: operation.label == LAST)
    tally = Tally()
    skipped = []
    for operation in operations:
        if operation.label in NOT_CALLED:
            skipped.append(operation.label)
            continue
        security = operation.definition.raw.get("security", [])
        token = relay.owner.token if {"ownerToken": []} in security else desk.token
        run_operation(operation, relay, {"Authorization": f"Bearer {token}"}, tally)
    print(f"\nschemathesis: {tally.operations} operations called ({len(skipped)} not called: {skipped}), "
          f"{tally.examples} examples, {len(tally.failures)} failures")
    assert len(operations) > 30
    assert tally.examples > 10 * tally.operations
    assert not tally.failures, "\n".join(tally.failures[:20])
