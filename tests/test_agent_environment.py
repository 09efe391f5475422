"""What an agent's CLI sees of the relay's environment (docs/providers.md#the-agents-environment): the
variables a program needs, the provider's own as the owner configured them, and nothing of the
relay's: not the owner token, the database's or Redis's URL, nor a key the relay's environment holds."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oar.core.config import KEPT_FOR_CHILDREN
from oar.core.db import database
from oar.core.models import Message
from oar.core.models import Provider as ProviderRow
from oar.providers.cli import TMPDIR_VARIABLES
from tests.support.clients import Agent
from tests.support.relays import Relay, RelayStack, own_relay
from tests.support.snapshots import snapshot

FAKE_AGENT = str(Path(__file__).resolve().parent / "fakes" / "cli_agent.py")
COMMAND = [sys.executable, FAKE_AGENT, "-p", "{prompt}", "--output-format", "stream-json", "--verbose"]
PROVIDER = "/api/v1/owner/providers/coder"
# A key the relay's own environment holds (another provider's, say), and the one the owner gives the agent.
RELAY_KEY = "sk-ant-api03-" + "R" * 48
AGENT_KEY = "sk-ant-api03-" + "A" * 48
# What the relay's processes hold that no agent may see: the relay's own settings, and its secrets
# (DATABASE_URL when the relay runs on PostgreSQL), whose values must not show up anywhere either.
RELAY_ONLY = ("OAR_OWNER_TOKEN", "OAR_DATA_DIR", "OAR_NAMESPACE", "REDIS_URL", "DATABASE_URL", "ANTHROPIC_API_KEY")
SECRET_VALUES = ("OAR_OWNER_TOKEN", "REDIS_URL", "DATABASE_URL", "ANTHROPIC_API_KEY")


pytestmark = pytest.mark.stack


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[RelayStack]:
    """A relay of its own whose worker's environment holds a provider key besides the relay's secrets."""
    with own_relay(tmp_path, worker_processes=1, env={"ANTHROPIC_API_KEY": RELAY_KEY, "LC_TIME": "C"}) as running:
        yield running


def configure(relay: Relay, **extra: Any) -> tuple[int, dict[str, Any]]:
    return relay.owner.request("PUT", PROVIDER, {"kind": "cli", "command": COMMAND, "models": ["agent-default"], **extra})


def agent_environment(desk: Agent) -> tuple[str, dict[str, str]]:
    """A new session on the cli provider whose agent replies with its environment: the reply's
    whole text as stored, and the environment it names."""
    created = desk.ok("create_session", relay="this", provider="coder", text="#environment", wait_seconds=30)
    assert created["status"] == "done", created
    with database.connection_context():
        text = Message.get((Message.session == created["session"]) & (Message.role == "assistant")).text
    assert text.startswith("environment "), text[:200]
    return text, json.loads(text.removeprefix("environment "))


def test_an_agent_cli_gets_none_of_the_relays_secrets_and_its_providers_own_variables(keyed: RelayStack) -> None:
    relay = keyed.relay
    assert relay is not None
    desk = relay.conversation("desk")
    of_the_relay = {name: keyed.env[name] for name in RELAY_ONLY if keyed.env.get(name)}
    assert {"OAR_OWNER_TOKEN", "REDIS_URL", "ANTHROPIC_API_KEY"} <= set(of_the_relay)

    assert configure(relay)[0] == 200
    text, environment = agent_environment(desk)
    for name, value in of_the_relay.items():
        assert name not in environment, name
        assert name not in SECRET_VALUES or value not in text, name
    assert not [name for name in environment if name.startswith("OAR_")]
    assert environment["PATH"] == keyed.env["PATH"] and environment["LC_TIME"] == "C"
    assert set(environment) <= {*KEPT_FOR_CHILDREN, *TMPDIR_VARIABLES, "LC_TIME", "LC_CTYPE"}, sorted(environment)

    # The provider's own variables, as the owner configured them, and its key for the agent.
    status, answer = configure(relay, environment={"AGENT_PROFILE": "review", "ANTHROPIC_API_KEY": AGENT_KEY})
    assert status == 200, answer
    text, environment = agent_environment(desk)
    assert environment["AGENT_PROFILE"] == "review" and environment["ANTHROPIC_API_KEY"] == AGENT_KEY
    assert RELAY_KEY not in text and relay.config.owner_token not in text


def test_a_secret_variable_is_write_only_and_null_keeps_it(keyed: RelayStack) -> None:
    relay = keyed.relay
    assert relay is not None
    proxy = "http://ann:hunter2@proxy.example:3128"
    status, answer = configure(relay, environment={"AGENT_PROFILE": "review", "ANTHROPIC_API_KEY": AGENT_KEY,
                                                   "HTTPS_PROXY": proxy})
    assert status == 200, answer
    shown = {"AGENT_PROFILE": "review", "ANTHROPIC_API_KEY": None, "HTTPS_PROXY": None}
    assert answer["provider"]["environment"] == shown
    listed = relay.owner.get("/api/v1/owner/providers")["providers"]
    assert next(p for p in listed if p["name"] == "coder")["environment"] == shown
    assert AGENT_KEY not in json.dumps(listed) and "hunter2" not in json.dumps(listed)

    # What the owner got back, sent back with a change: the hidden values stay as stored.
    status, answer = configure(relay, environment={**shown, "AGENT_PROFILE": "build"})
    assert status == 200, answer
    with database.connection_context():
        stored = ProviderRow.get_by_id("coder").options["environment"]
    assert stored == {"AGENT_PROFILE": "build", "ANTHROPIC_API_KEY": AGENT_KEY, "HTTPS_PROXY": proxy}
    # Left out, a variable is gone: a PUT replaces the configuration.
    assert configure(relay, environment={"AGENT_PROFILE": "build"})[0] == 200
    with database.connection_context():
        assert ProviderRow.get_by_id("coder").options["environment"] == {"AGENT_PROFILE": "build"}


BAD_ENVIRONMENTS = [
    ({"ANTHROPIC_API_KEY": None}, 'environment ANTHROPIC_API_KEY is null, but "coder" has no stored value'),
    ({"1ST": "x"}, "environment variable names are 1–128 letters"),
    ({"A-B": "x"}, "environment variable names are 1–128 letters"),
    ({"A=B": "x"}, "environment variable names are 1–128 letters"),
    ({"": "x"}, "environment variable names are 1–128 letters"),
    ({"N" * 129: "x"}, "environment variable names are 1–128 letters"),
    ({"TMPDIR": "/tmp"}, "environment cannot set TMPDIR"),
    ({"CLAUDE_CODE_TMPDIR": "/tmp"}, "environment cannot set CLAUDE_CODE_TMPDIR"),
    ({"MODE": 5}, "environment MODE must be text"),
    ({"MODE": ["a"]}, "environment MODE must be text"),
    ({"MODE": "a\u0000b"}, "cannot store (a NUL character"),
    ({"MODE": "x" * 10_001}, "environment MODE must be text of at most 10,000 characters"),
    ({f"V{n}": "x" for n in range(51)}, "environment holds 51 variables; the limit is 50"),
    (["MODE=x"], "environment must be an object"),
    ("MODE=x", "environment must be an object"),
]


@pytest.mark.parametrize(("environment", "says"), BAD_ENVIRONMENTS, ids=lambda value: repr(value)[:40])
def test_a_bad_environment_is_refused_and_changes_nothing(relay: Relay, environment: Any, says: str) -> None:
    assert configure(relay, environment={"MODE": "kept"})[0] == 200
    before = snapshot(relay)
    status, answer = configure(relay, environment=environment)
    assert status == 400 and answer["code"] == "REMOTE_RELAY_INVALID_INPUT", answer
    assert says in answer["error"] and answer["error"].endswith("Nothing was changed."), answer
    assert snapshot(relay) == before


def test_environment_is_for_cli_providers_only(relay: Relay) -> None:
    before = snapshot(relay)
    status, answer = relay.owner.request("PUT", "/api/v1/owner/providers/lab", {"kind": "echo", "environment": {"A": "b"}})
    assert status == 400 and "environment is for cli providers only" in answer["error"], answer
    assert snapshot(relay) == before
