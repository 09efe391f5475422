"""Fixtures: relays (tests/support/relays.py) and the actors and worlds the tests use.

`stack` is the session's shared relay (the Flask app in a thread, RQ worker processes, Redis,
database); `relay` empties it for each test. `recovery` and `two_relays` start relays of their
own. Every test that uses one of the relay fixtures (or is marked `stack` itself) is a
`stack` test: `python -m pytest -m "not stack"` runs the in-process part alone. So is a test
whose own code starts a relay or its processes (`own_relay`, `RelayStack`…), and a guard fails
a test not marked `stack` that started any all the same (through a helper of its module, say).
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from oar.core import keys
from oar.core.db import database, open_database
from tests.support import browser, logcheck, processes, write_counts
from tests.support.bad_input.in_process import WorldKeeper
from tests.support.bad_input.world import World, build_world
from tests.support.clients import Agent
from tests.support.relays import (
    Relay,
    RelayStack,
    make_config,
    named_relays,
    own_relay,
    private_redis,
    redis_url_of,
)
from tests.support.servers import create_postgres_database
from tests.support.snapshots import reset_database

# werkzeug gives its logger a handler of its own on the stderr of the moment it first logs,
# unless one is there: that was a test's captured stderr, closed by the time another test's
# server logged ("--- Logging error ---"). With this one its lines go to pytest's log capture.
logging.getLogger("werkzeug").addHandler(logging.NullHandler())

# Fixtures that start relays, their processes or Redis: a test that uses any of them is a
# `stack` test. Modules whose tests start relays of their own say so with `pytestmark`.
STACK_FIXTURES = frozenset({"stack", "recovery", "two_relays", "redis_url"})


# What a test's own code calls to start a relay, its processes or a Redis inline.
STACK_HELPERS = frozenset({"own_relay", "named_relays", "RelayStack", "ManagedProcess", "Launcher", "private_redis"})


def names_used(code: types.CodeType) -> set[str]:
    """The global and attribute names `code` and the functions defined in it refer to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= names_used(constant)
    return names


def starts_processes(item: pytest.Item) -> bool:
    """Whether the test uses a relay fixture or its own code calls one of STACK_HELPERS."""
    if STACK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is not None and bool(STACK_HELPERS & names_used(code))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes(item):
            item.add_marker(pytest.mark.stack)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    processes.STARTED.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The guard: a test that started a relay, its processes or a Redis (its fixtures' included)
    fails at teardown unless it is marked `stack`, so that `-m "not stack"` stays in-process."""
    report = yield
    if call.when == "teardown" and processes.STARTED and item.get_closest_marker("stack") is None:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started {', '.join(sorted(set(processes.STARTED)))} but is not marked `stack`: "
            "mark it (or its module, with `pytestmark = pytest.mark.stack`)"
        )
    return report


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("OAR_TEST_REDIS_URL")
    if external:
        yield external
        return
    with private_redis(tmp_path_factory.mktemp("redis")) as server:
        yield redis_url_of(server)


@pytest.fixture(scope="session")
def database_url() -> str | None:
    external = os.environ.get("OAR_TEST_DATABASE_URL")
    return create_postgres_database(external) if external else None


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str, database_url: str | None) -> Iterator[RelayStack]:
    """The shared relay "desk": the web in this process's thread, two worker processes."""
    running = RelayStack(make_config(tmp_path_factory.mktemp("relay"), redis_url, database_url))
    try:
        running.start_web_thread()
        running.start_worker()
        yield running
    finally:
        running.discard()


@pytest.fixture
def relay(stack: RelayStack) -> Relay:
    """The shared relay, emptied, with agent sessions on and no rate limits: the decision links'
    count of this address's requests too, which an earlier test's many calls (a fuzzer's) may
    have used up within its window."""
    assert stack.relay is not None and stack.relay.runtime is not None
    open_database(stack.config)
    reset_database()
    stack.relay.runtime.redis.delete(keys.decision_requests(stack.config.namespace, "127.0.0.1"))
    stack.relay.owner.open_for_agents()
    return stack.relay


@pytest.fixture
def desk(relay: Relay) -> Agent:
    """The owner's conversation "desk" and its agent."""
    return relay.conversation("desk")


@pytest.fixture
def world(relay: Relay, desk: Agent) -> World:
    """The bad-input tables' world (tests/support/bad_input/world.py)."""
    return build_world(relay, desk)


@pytest.fixture(scope="module")
def kept_worlds(stack: RelayStack) -> Iterator[WorldKeeper]:
    """For a module of bad-input cases run in-process: the database's write counts
    (tests/support/write_counts.py) while it runs, and one world kept while nothing writes."""
    open_database(stack.config)
    with write_counts.counting_writes():
        yield WorldKeeper(stack)


@pytest.fixture
def recovery(tmp_path: Path) -> Iterator[tuple[RelayStack, Relay, object]]:
    """A relay of its own (a private Redis, its own database) whose workers and clock a test may kill."""
    with own_relay(tmp_path) as running:
        assert running.relay is not None
        yield running, running.relay, running.redis_server


@pytest.fixture(scope="module")
def two_relays(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, Relay]]:
    """Two relays on loopback, "desk" and "build-box", each its own processes (gunicorn web and a
    worker), data folder, database and Redis namespace, by name; for tests of paired relays."""
    with named_relays(tmp_path_factory.mktemp("relays"), ("desk", "build-box"), redis_url) as stacks:
        relays = {name: running.relay for name, running in stacks.items()}
        assert all(relays.values())
        yield {name: relay for name, relay in relays.items() if relay is not None}


@pytest.fixture
def own_database_binding() -> Iterator[None]:
    """For tests that bind the process-wide database proxy themselves: the other tests get
    theirs back afterwards."""
    previous = database.obj
    yield
    if database.obj is not None and not database.is_closed():  # unbound when the test failed first
        database.close()
    if previous is not None:
        database.initialize(previous)


@pytest.fixture
def logged(stack: RelayStack) -> Iterator[logcheck.Logged]:
    """What the relay logs during the test; afterwards: no traceback, no internal error."""
    with logcheck.watching(stack.logs) as logs:
        yield logs
        logs.assert_no_traceback()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """Headless Chromium for a module's page tests (skipped where the machine has none)."""
    if not Path(browser.CHROMIUM).exists():
        pytest.skip("no Chromium on this machine")
    with browser.launched() as launched:
        yield launched
