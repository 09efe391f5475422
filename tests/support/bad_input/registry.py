"""Every bad-input table, gathered: which registered actions have cases."""

from __future__ import annotations

from collections import Counter

from tests.support.bad_input import outside, questions, schedules, sessions, subscriptions
from tests.support.bad_input.world import Case

TABLES: dict[str, list[Case]] = {
    "sessions": sessions.CASES,
    "schedules": schedules.CASES,
    "subscriptions": subscriptions.CASES,
    "questions": questions.CASES,
    "outside": outside.CASES,
}
ALL_CASES: list[Case] = [case for table in TABLES.values() for case in table]


def cases_per_action() -> Counter[str]:
    return Counter(case.action for case in ALL_CASES)
