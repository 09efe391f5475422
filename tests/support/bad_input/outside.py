"""The bad-input table of take and reply (docs/sessions.md#agents-outside-the-relay): the caller's own
conversation, its agent outside the relay. "nested" is a conversation the relay runs (an agent started
it), so it may take and reply nothing; desk's refused arguments are refused before anything is looked at."""

from __future__ import annotations

from typing import Any

from tests.support.bad_input.world import INVALID, REMOVE, Case, spoil

VALID = {
    "take": {"wait_seconds": 0},
    "reply": {"message_id": "msg_0123456789abcdef", "text": "done"},
}
NOT_OUTSIDE = "This conversation's agent is not outside the relay"


def case(action: str, name: str, code: str, changes: dict[str, Any], **options: Any) -> Case:
    return Case(id=f"{action}-{name}", action=action, args=spoil(VALID[action], changes), code=code, **options)


CASES: list[Case] = [
    case("take", "wait_seconds-negative", INVALID, {"wait_seconds": -1}, says="wait_seconds must be"),
    case("take", "wait_seconds-string", INVALID, {"wait_seconds": "10"}, says="wait_seconds must be"),
    case("take", "wait_seconds-too-big", INVALID, {"wait_seconds": 86_401}, says="wait_seconds must be"),
    case("take", "max_items-zero", INVALID, {"max_items": 0}, says="max_items must be"),
    case("take", "max_items-too-many", INVALID, {"max_items": 101}, says="max_items must be"),
    case("take", "max_items-text", INVALID, {"max_items": "5"}, says="max_items must be"),
    case("take", "by-a-conversation-the-relay-runs", INVALID, {}, caller="nested", says=NOT_OUTSIDE),
    case("reply", "message_id-missing", INVALID, {"message_id": REMOVE}, says="reply needs message_id"),
    case("reply", "message_id-number", INVALID, {"message_id": 5}, says="message_id must be text"),
    case("reply", "message_id-too-long", INVALID, {"message_id": "m" * 65}, says="the limit is 64"),
    case("reply", "text-missing", INVALID, {"text": REMOVE}, says="reply needs text"),
    case("reply", "text-too-long", INVALID, {"text": "x" * 100_001}, says="the limit is 100,000"),
    case("reply", "by-a-conversation-the-relay-runs", INVALID, {}, caller="nested", says=NOT_OUTSIDE),
]
