"""Statuses keep the strings that database rows, JSON answers and events already hold, and the
sets of them are defined once, in oar.core.statuses."""

from __future__ import annotations

import ast
import json
from enum import StrEnum
from pathlib import Path

from oar.core import statuses
from oar.core.statuses import (
    CardStatus,
    QuestionStatus,
    ScheduleEndReason,
    SessionState,
    SubscriptionEndReason,
    TaskStatus,
    TurnStatus,
)

OAR = Path(statuses.__file__).resolve().parents[1]
ENUMS: list[type[StrEnum]] = [
    TurnStatus, TaskStatus, QuestionStatus, CardStatus, SessionState, ScheduleEndReason, SubscriptionEndReason,
]


def test_each_enum_keeps_its_documented_values() -> None:
    assert [s.value for s in TurnStatus] == [
        "queued", "running", "waiting_for_answer", "done", "failed", "stopped", "cancelled",
    ]
    assert [s.value for s in TaskStatus] == ["running", "completed", "failed", "killed"]
    assert [s.value for s in QuestionStatus] == ["pending", "answered", "dismissed", "withdrawn", "ended"]
    assert [s.value for s in CardStatus] == ["pending", "allowed", "denied", "expired", "withdrawn"]
    assert [s.value for s in SessionState] == ["running_turn", "background_only", "idle"]
    assert [s.value for s in ScheduleEndReason] == ["unscheduled", "fired", "archived", "deleted"]
    assert [s.value for s in SubscriptionEndReason] == ["unsubscribed", "archived", "fired", "unpaired", "transferred"]


def test_the_shared_sets_keep_their_members() -> None:
    assert statuses.OPEN_TURN == ("queued", "running", "waiting_for_answer")
    assert statuses.LIVE_TURN == ("running", "waiting_for_answer")
    assert statuses.IN_PROGRESS_TURN == ("queued", "running")
    assert statuses.FINISHED_TURN == ("done", "failed", "stopped", "cancelled")
    assert statuses.SETTLED_TURN == ("done", "failed", "stopped", "cancelled", "waiting_for_answer")
    assert statuses.ERRED_TURN == ("failed", "cancelled")
    assert statuses.UNANSWERED_TURN == ("failed", "stopped", "cancelled")
    assert statuses.TASK_ENDED == ("completed", "failed", "killed")
    assert statuses.SCHEDULE_ENDED_WITH_SESSION == ("archived", "deleted")


def test_a_member_is_its_string_in_json_formatting_and_lookups() -> None:
    assert json.dumps({"status": TurnStatus.WAITING_FOR_ANSWER}) == '{"status": "waiting_for_answer"}'
    assert f"{TaskStatus.KILLED}" == str(TaskStatus.KILLED) == "killed"
    assert "pending" == CardStatus.PENDING and {"pending": 1}[QuestionStatus.PENDING] == 1


def _literal_sets(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """Tuples, lists and sets written as two or more string literals, with their line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) >= 2:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.elts):
                found.append((node.lineno, values))
    return found


def test_no_module_writes_its_own_set_of_statuses() -> None:
    enum_values = [{member.value for member in enum} for enum in ENUMS]
    offenders = []
    for path in sorted(OAR.rglob("*.py")):
        if path == Path(statuses.__file__).resolve():
            continue
        for line, values in _literal_sets(ast.parse(path.read_text(), str(path))):
            if any(set(values) <= known for known in enum_values):
                offenders.append(f"{path.relative_to(OAR.parent)}:{line} {tuple(values)}")
    assert not offenders, "use the enums and sets of oar.core.statuses:\n" + "\n".join(offenders)
