"""GET /api/v1/openapi.json (docs/calling.md#openapi): a valid OpenAPI 3.1 document, generated from
the app's routes, the action registry and the owner API's declared bodies, covering every route."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from flask import Flask
from openapi_spec_validator import validate

from oar.actions.catalog import ordered_actions
from oar.core import settings
from oar.core.errors import STATUS_BY_CODE
from oar.owner import conversations, groups
from oar.web.openapi import document
from tests.support.relays import Relay, RelayStack

HTTP_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


def fetched(relay: Relay) -> dict[str, Any]:
    response = requests.get(f"{relay.url}/api/v1/openapi.json", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()


def app_of(stack: RelayStack) -> Flask:
    assert stack.app is not None
    return stack.app


@pytest.fixture
def spec(relay: Relay) -> dict[str, Any]:
    return fetched(relay)


def test_it_is_served_without_a_token_and_validates_as_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"] == "3.1.0"
    validate(spec)


def test_it_covers_every_route_under_api_v1_and_the_health_checks(stack: RelayStack, spec: dict[str, Any]) -> None:
    app = app_of(stack)
    routes = [
        (rule.rule, method) for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/v1/") or rule.rule in ("/healthz", "/readyz")
        for method in sorted((rule.methods or set()) & HTTP_METHODS)
    ]
    assert len(routes) > 30
    missing = []
    for path, method in routes:
        documented_path = path.replace("<", "{").replace(">", "}")
        if method.lower() not in spec["paths"].get(documented_path, {}):
            missing.append(f"{method} {path}")
    assert not missing, f"routes missing from the OpenAPI document (add @described to them): {missing}"
    documented = sum(len(methods) for methods in spec["paths"].values())
    assert documented == len(routes), "the document names a route the app does not have"


def test_relay_tool_takes_one_schema_per_action_with_action_a_constant(spec: dict[str, Any]) -> None:
    body = spec["paths"]["/api/v1/relay_tool"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    names = [spec_.name for spec_ in ordered_actions()]
    assert [choice["$ref"].rsplit("/", 1)[1] for choice in body["oneOf"]] == names
    assert body["discriminator"]["propertyName"] == "action"
    schemas = spec["components"]["schemas"]
    for action in ordered_actions():
        schema = schemas[action.name]
        assert schema["properties"]["action"] == {"const": action.name}
        assert schema["required"][0] == "action"
        assert set(schema["properties"]) == {"action", *action.params}
    assert schemas["create_session"]["additionalProperties"] is False  # a strict action
    assert schemas["Error"]["properties"]["code"]["enum"] == list(STATUS_BY_CODE)


def test_owner_bodies_are_the_tables_the_service_checks(spec: dict[str, Any]) -> None:
    def body_of(path: str, method: str) -> dict[str, Any]:
        return spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]

    settings_body = body_of("/api/v1/owner/settings", "patch")
    assert list(settings_body["properties"]) == list(settings.VALIDATORS)
    assert settings_body["properties"]["max_turn_seconds"] == {
        "type": "integer", "minimum": 60, "maximum": 86_400, "description": "a turn's own time limit",
    }
    assert list(body_of("/api/v1/owner/sessions", "post")["properties"]) == list(conversations.NEW_SESSION)
    assert body_of("/api/v1/owner/groups", "post")["required"] == ["name"]
    assert list(body_of("/api/v1/owner/groups/{group_id}", "patch")["properties"]) == list(groups.GROUP_CHANGES)
    assert body_of("/api/v1/owner/cards/{card_id}", "post")["properties"]["decision"]["enum"] == ["allow", "allow_once", "deny"]


def test_it_names_the_two_bearer_schemes_and_who_takes_which(spec: dict[str, Any]) -> None:
    schemes = spec["components"]["securitySchemes"]
    assert {name: (s["type"], s["scheme"]) for name, s in schemes.items()} == {
        "sessionToken": ("http", "bearer"), "ownerToken": ("http", "bearer"),
    }
    paths = spec["paths"]
    assert paths["/api/v1/relay_tool"]["post"]["security"] == [{"sessionToken": []}]
    assert paths["/api/v1/tasks"]["post"]["security"] == [{"sessionToken": []}]
    assert paths["/api/v1/external/next"]["get"]["security"] == [{"sessionToken": []}]
    assert paths["/api/v1/owner/sessions/{session_id}/tokens"]["delete"]["security"] == [{"ownerToken": []}]
    assert paths["/healthz"]["get"]["security"] == []
    assert paths["/api/v1/openapi.json"]["get"]["security"] == []


def test_it_is_built_once_per_process(stack: RelayStack, relay: Relay) -> None:
    app = app_of(stack)
    with app.app_context():
        assert document(app) is document(app)
    assert fetched(relay) == fetched(relay)
