"""The statuses and kinds the team tools record and answer, defined once."""

from __future__ import annotations

from enum import StrEnum


class WorkStatus(StrEnum):
    """A task's status on a run's board (`WorkItem.status`)."""

    TODO = "todo"
    IN_PROGRESS = "in_progress"
    IN_REVIEW = "in_review"
    DONE = "done"


class Priority(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class ArtifactType(StrEnum):
    FIGMA_SPEC = "figma_spec"
    PR = "pr"
    REPORT = "report"
    ANALYTICS_PLAN = "analytics_plan"
    DESIGN = "design"
    DOCUMENT = "document"


class ReviewStatus(StrEnum):
    """`pending` until the named reviewer submits one of the others, once."""

    PENDING = "pending"
    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"


def values(kind: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in kind)
