"""The bad-input table of subscribe, unsubscribe, list_subscriptions and transfer_subscriptions
(docs/calling.md, docs/events.md#subscriptions, docs/errors.md). A table of its own because these actions take `relay` as optional (= "this")."""

from __future__ import annotations

from typing import Any

from tests.support.bad_input.world import INVALID, NOT_FOUND, OWN, UNKNOWN_RELAY, Case


def sub(name: str, changes: dict[str, Any], code: str = INVALID, says: str = "") -> Case:
    return Case(f"subscribe-{name}", "subscribe", {"sessions": ["<child>"], **changes}, code, says)


QUIET = {"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}
CASES = [
    Case("subscribe-sessions-missing", "subscribe", {}, INVALID, "subscribe needs sessions"),
    sub("sessions-text", {"sessions": "all"}, says="sessions must be a list"),
    sub("sessions-numbers", {"sessions": [1, 2]}, says='sessions must be a list of session ids, or ["all"]'),
    sub("sessions-all-and-more", {"sessions": ["all", "<child>"]}, says='["all"] alone'),
    sub("sessions-unknown", {"sessions": ["nosuchsession"]}, NOT_FOUND, 'has no session "nosuchsession"'),
    sub("sessions-archived", {"sessions": ["<archived>"]}, NOT_FOUND, "is archived"),
    sub("sessions-itself", {"sessions": ["<desk>"]}, OWN, "never watched"),
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
    sub("relay-unknown", {"relay": "build-box"}, UNKNOWN_RELAY, 'No relay is named "build-box"'),
    sub("relay-number", {"relay": 7}, says="relay must be text"),
    Case("unsubscribe-unknown", "unsubscribe", {"subscription_id": "sub_nosuch"}, NOT_FOUND, "has no subscription"),
    Case("unsubscribe-missing", "unsubscribe", {}, INVALID, "unsubscribe needs subscription_id"),
    Case("unsubscribe-id-number", "unsubscribe", {"subscription_id": 5}, INVALID, "subscription_id must be text"),
    Case("unsubscribe-relay-unknown", "unsubscribe", {"subscription_id": "sub_nosuch", "relay": "build-box"},
         UNKNOWN_RELAY, 'No relay is named "build-box"'),
    Case("list-watcher-unknown", "list_subscriptions", {"watcher": "nosuchsession"}, NOT_FOUND, "has no session"),
    Case("list-watcher-number", "list_subscriptions", {"watcher": 5}, INVALID, "watcher must be text"),
    Case("list-relay-unknown", "list_subscriptions", {"relay": "build-box"}, UNKNOWN_RELAY,
         'No relay is named "build-box"'),
    Case("transfer-unknown", "transfer_subscriptions", {"from": "nosuchsession"}, NOT_FOUND, "has no session"),
    Case("transfer-from-missing", "transfer_subscriptions", {}, INVALID, "transfer_subscriptions needs from"),
    Case("transfer-from-number", "transfer_subscriptions", {"from": 5}, INVALID, "from must be text"),
    Case("transfer-relay-unknown", "transfer_subscriptions", {"from": "<other>", "relay": "build-box"}, UNKNOWN_RELAY,
         'No relay is named "build-box"'),
]
