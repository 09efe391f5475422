"""Bad input to subscribe, unsubscribe, list_subscriptions and transfer_subscriptions is
refused in the documented shape and creates nothing (docs/calling.md, docs/events.md#subscriptions, docs/errors.md): the table of
tests/support/bad_input/subscriptions.py.

Every case runs in-process through the dispatcher with the database's write counts
(tests/support/bad_input/in_process.py); one also runs over real HTTP with the full snapshot."""

from __future__ import annotations

import pytest

from tests.support.bad_input.in_process import WorldKeeper, assert_case_refused_in_process
from tests.support.bad_input.subscriptions import CASES
from tests.support.bad_input.world import NOTHING, Case, World, assert_case_refused
from tests.support.snapshots import snapshot

# Over real HTTP too: a case refused deep in the handler (the sessions are looked up).
OVER_HTTP = ("subscribe-sessions-archived",)


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_subscription_input_is_refused_and_creates_nothing(kept_worlds: WorldKeeper, bad: Case) -> None:
    assert_case_refused_in_process(kept_worlds.get("tables"), bad)


@pytest.mark.parametrize("bad", [c for c in CASES if c.id in OVER_HTTP], ids=lambda c: c.id)
def test_over_http_bad_subscription_input_is_refused_and_creates_nothing(world: World, bad: Case) -> None:
    assert_case_refused(world, bad)


def test_the_21st_subscription_is_refused_and_creates_nothing(world: World) -> None:
    for _ in range(20):
        world.desk.ok("subscribe", sessions=[world.refs["<child>"]])
    before = snapshot(world.relay)
    body = world.desk.refused("subscribe", "REMOTE_RELAY_SUBSCRIPTION_LIMIT", sessions=["all"])
    assert body["error"].endswith(NOTHING["subscribe"])
    assert snapshot(world.relay) == before


def test_transfer_is_refused_before_any_card_when_there_is_nothing_to_move_or_too_much(world: World) -> None:
    other = world.relay.agent_for(world.refs["<other>"])
    before = snapshot(world.relay)
    body = world.desk.refused("transfer_subscriptions", "REMOTE_RELAY_INVALID_INPUT", **{"from": other.session_id})
    assert body["error"] == f"Session {other.session_id[:8]} has no active subscriptions. Nothing was transferred."
    assert snapshot(world.relay) == before
    for _ in range(12):
        other.ok("subscribe", sessions=[world.refs["<child>"]])
        world.desk.ok("subscribe", sessions=[world.refs["<child>"]])
    before = snapshot(world.relay)
    body = world.desk.refused("transfer_subscriptions", "REMOTE_RELAY_SUBSCRIPTION_LIMIT", **{"from": other.session_id})
    assert body["error"].endswith("unsubscribe one first. Nothing was transferred.")
    assert snapshot(world.relay) == before
