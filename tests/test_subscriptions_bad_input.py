"""Bad input to subscribe, unsubscribe, list_subscriptions and transfer_subscriptions is
refused in the SPEC shape and creates nothing (SPEC §3, §8.1, §14). A table of its own
because these actions take `relay` as optional (= "this")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.test_bad_input import INVALID, NOT_FOUND, World, assert_refused, snapshot, world  # noqa: F401

SUBSCRIBED = "Nothing was subscribed."


@dataclass(frozen=True)
class Case:
    id: str
    action: str
    args: dict[str, Any]
    code: str
    says: str
    ends: str | None = None


def sub(name: str, changes: dict[str, Any], code: str = INVALID, says: str = "") -> Case:
    return Case(f"subscribe-{name}", "subscribe", {"sessions": ["<child>"], **changes}, code, says, ends=SUBSCRIBED)


QUIET = {"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}
CASES = [
    Case("subscribe-sessions-missing", "subscribe", {}, INVALID, "subscribe needs sessions", ends=SUBSCRIBED),
    sub("sessions-text", {"sessions": "all"}, says="sessions must be a list"),
    sub("sessions-numbers", {"sessions": [1, 2]}, says='sessions must be a list of session ids, or ["all"]'),
    sub("sessions-all-and-more", {"sessions": ["all", "<child>"]}, says='["all"] alone'),
    sub("sessions-unknown", {"sessions": ["nosuchsession"]}, NOT_FOUND, 'has no session "nosuchsession"'),
    sub("sessions-archived", {"sessions": ["<archived>"]}, NOT_FOUND, "is archived"),
    sub("sessions-itself", {"sessions": ["<desk>"]}, "REMOTE_RELAY_OWN_SESSION", "never watched"),
    sub("events-unknown", {"events": ["turn_end", "explosion"]}, says="Unknown events: 'explosion'"),
    sub("events-text", {"events": "turn_end"}, says="events must be a list"),
    sub("exclude-with-a-list", {"exclude": ["<other>"]},
        says='exclude goes with sessions ["all"] only; a list of sessions names what it watches'),
    sub("exclude-unknown", {"sessions": ["all"], "exclude": ["nosuchsession"]}, NOT_FOUND, "has no session"),
    sub("quiet-bad-time", {"quiet_hours": {**QUIET, "from": "25:00"}},
        says='quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)'),
    sub("quiet-same", {"quiet_hours": {**QUIET, "to": "23:00"}}, says="quiet_hours from and to must differ"),
    sub("quiet-zone", {"quiet_hours": {**QUIET, "tz": "Berlin"}},
        says='quiet_hours tz "Berlin" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")'),
    sub("quiet-partial", {"quiet_hours": {"from": "23:00"}}, says="quiet_hours needs from, to and tz"),
    sub("quiet-text", {"quiet_hours": "23:00-06:00"}, says="quiet_hours must be an object"),
    sub("digest-negative", {"digest_minutes": -5}, says="digest_minutes must be a whole number from 1 to 1,440"),
    sub("digest-huge", {"digest_minutes": 10**9}, says="digest_minutes must be"),
    sub("stalled-zero", {"stalled_minutes": 0}, says="stalled_minutes must be a whole number from 1 to 1,440"),
    sub("heartbeat-four", {"heartbeat_minutes": 4}, says="heartbeat_minutes must be a whole number from 5 to 1,440"),
    sub("once-text", {"once": "yes"}, says="once must be true or false"),
    sub("match-bad-regex", {"match": "/(unclosed/"}, says="is not a valid regular expression"),
    sub("relay-unknown", {"relay": "build-box"}, "REMOTE_RELAY_UNKNOWN", 'No relay is named "build-box"'),
    Case("unsubscribe-unknown", "unsubscribe", {"subscription_id": "sub_nosuch"}, NOT_FOUND, "has no subscription",
         ends="Nothing was unsubscribed."),
    Case("unsubscribe-missing", "unsubscribe", {}, INVALID, "unsubscribe needs subscription_id",
         ends="Nothing was unsubscribed."),
    Case("list-watcher-unknown", "list_subscriptions", {"watcher": "nosuchsession"}, NOT_FOUND, "has no session"),
    Case("transfer-unknown", "transfer_subscriptions", {"from": "nosuchsession"}, NOT_FOUND, "has no session",
         ends="Nothing was transferred."),
]


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_bad_subscription_input_is_refused_and_creates_nothing(world: World, bad: Case) -> None:  # noqa: F811
    world.refs["<desk>"] = world.desk.session_id
    before = snapshot(world.relay)
    status, body = world.desk.call(bad.action, **world.fill(bad.args))
    assert_refused(status, body, bad.code, ends=bad.ends, says=world.fill(bad.says))
    assert snapshot(world.relay) == before


def test_the_21st_subscription_is_refused_and_creates_nothing(world: World) -> None:  # noqa: F811
    for _ in range(20):
        world.desk.ok("subscribe", sessions=[world.refs["<child>"]])
    before = snapshot(world.relay)
    body = world.desk.refused("subscribe", "REMOTE_RELAY_SUBSCRIPTION_LIMIT", sessions=["all"])
    assert body["error"].endswith(SUBSCRIBED)
    assert snapshot(world.relay) == before


def test_transfer_is_refused_before_any_card_when_there_is_nothing_to_move_or_too_much(world: World) -> None:  # noqa: F811
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
