"""The bad-input tables in-process: each case through the real app's dispatcher, checked with the
database's write counts (tests/support/write_counts.py), in a world kept while nothing writes.

The app is the shared relay's own (`create_app(config)`, its database and Redis); its workers
built the world. A case calls the function both doors of the web's `relay_tool` call
(`api.answer_relay_tool`: the token check, the short-read gate, `dispatch`) with its JSON body,
without a socket; the answer goes through JSON as on the wire. A refused case must change no row: the write counts before and after are
equal. That is also why one world serves every case of a table: a case that wrote would fail
its own check, and the next case would find the counts moved and build the world again.

Refusals at the HTTP edge (bodies that are not JSON, the owner API) go through the real app's
Flask test client instead. A few cases of each table still run over real HTTP with the full
snapshot (the tables' modules), so the edge stays covered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask
from werkzeug.datastructures import Headers
from werkzeug.test import TestResponse

from oar.core.db import database, open_database
from oar.web.api import answer_relay_tool
from oar.web.plain_request import PlainRequest
from tests.support import write_counts
from tests.support.bad_input.world import Case, World, assert_refused, build_world
from tests.support.relays import RelayStack
from tests.support.snapshots import reset_database


def wire(value: Any) -> Any:
    """`value` as the other side of a JSON body reads it."""
    return json.loads(json.dumps(value))


def call(app: Flask, token: str, action: str, args: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """One relay_tool call of the agent whose token this is, answered by `api.answer_relay_tool`."""
    body = json.dumps({"action": action, **args}).encode()
    http = PlainRequest(headers=Headers({"Authorization": f"Bearer {token}"}), environ={}, read_body=lambda: body)
    with app.app_context(), database.connection_context():
        answered = answer_relay_tool(http)
    return answered.status, wire(answered.body)


def assert_case_refused_in_process(world: World, case: Case) -> None:
    """Call as the case says, in-process; it is refused as the case says, and no row changed."""
    assert world.app is not None, "an in-process world (WorldKeeper.get) has the app"
    agent = world.caller(case)
    before = write_counts.fingerprint()
    status, body = call(world.app, agent.token, case.action, world.fill(case.args))
    assert_refused(status, body, case.code, ends=case.ending, says=world.fill_in(case.says),
                   exact=world.fill_in(case.exact))
    assert write_counts.fingerprint() == before, f"{case.id} wrote to the database"


def assert_refused_by_app(world: World, send: Callable[[Any], TestResponse], code: str, says: str = "") -> dict[str, Any]:
    """`send(test_client)` is refused at the HTTP edge in the JSON failure shape, and no row changed."""
    assert world.app is not None, "an in-process world (WorldKeeper.get) has the app"
    before = write_counts.fingerprint()
    response = send(world.app.test_client())
    assert response.headers["Content-Type"].startswith("application/json"), response.get_data(as_text=True)[:300]
    body = response.get_json()
    assert_refused(response.status_code, body, code, says=says)
    assert write_counts.fingerprint() == before, "the refused request wrote to the database"
    return body


class WorldKeeper:
    """One world at a time, kept from case to case while the database has had no write since it was built.

    `get(kind, extend)` gives the kept world when it is of that kind and the write counts have
    not moved; else it empties the relay, builds the tables' world (`build_world`) with the
    relay's own services and workers, lets `extend` add a table's own things, and keeps that.
    """

    def __init__(self, stack: RelayStack) -> None:
        assert stack.relay is not None and stack.app is not None, "the shared relay's web runs in this process"
        self.stack = stack
        self.kind: str | None = None
        self.world: World | None = None
        self.counts: dict[str, int] = {}

    def get(self, kind: str, extend: Callable[[World], None] | None = None) -> World:
        if self.world is not None and self.kind == kind and write_counts.fingerprint() == self.counts:
            return self.world
        relay = self.stack.relay
        assert relay is not None
        open_database(self.stack.config)
        reset_database()
        relay.owner.open_for_agents()
        world = build_world(relay, relay.conversation("desk"))
        world.app = self.stack.app
        if extend is not None:
            extend(world)
        self.kind, self.world, self.counts = kind, world, write_counts.fingerprint()
        return world
