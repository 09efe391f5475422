"""Artifacts and their reviews (docs/team-runs.md#artifacts-and-reviews)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from oar.core import defaults
from oar.core.db import lock_rows, write_transaction
from oar.team.board import task_in_run
from oar.team.kinds import ReviewStatus
from oar.team.models import TeamArtifact, TeamReview, TeamRun
from oar.team.runs import NOTHING, charge_text, checked_agent, refuse, refuse_past


def post(run: TeamRun, agent_id: str, args: dict[str, Any], now: datetime) -> tuple[str, bool]:
    """The artifact's id, and whether an artifact of that name was replaced (its id kept)."""
    task_id = task_in_run(run, args["task_id"]).id if args.get("task_id") else None
    name = args["name"].strip()
    with write_transaction():
        # The run's row first: two posts of one new name at once then find each other's.
        lock_rows(TeamRun.select().where(TeamRun.id == run.id))
        existing = TeamArtifact.get_or_none((TeamArtifact.run == run.id) & (TeamArtifact.name == name))
        charge_text(run, len(args["content"]) - (len(existing.content) if existing else 0))
        if existing is not None:
            TeamArtifact.update(type=args["type"], content=args["content"], created_by=agent_id, task=task_id,
                                updated_at=now).where(TeamArtifact.id == existing.id).execute()
            return existing.id, True
        refuse_past(TeamArtifact.select().where(TeamArtifact.run == run.id).count(), defaults.TEAM_ARTIFACTS_PER_RUN,
                    "artifacts", run)
        artifact_id = f"art_{secrets.token_hex(6)}"
        TeamArtifact.create(id=artifact_id, run=run.id, name=name, type=args["type"], content=args["content"],
                            created_by=agent_id, task=task_id, created_at=now, updated_at=now)
    return artifact_id, False


def artifact_view(row: TeamArtifact) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "type": row.type, "content": row.content, "created_by": row.created_by,
            "task_id": row.task_id}


def by_name(run: TeamRun, name: str) -> TeamArtifact | None:
    return TeamArtifact.get_or_none((TeamArtifact.run == run.id) & (TeamArtifact.name == name.strip()))


def request_review(run: TeamRun, agent_id: str, artifact_id: str, reviewer: str, now: datetime) -> str:
    artifact = TeamArtifact.get_or_none(TeamArtifact.id == artifact_id)
    if artifact is None:
        raise refuse(f'artifact_id: there is no artifact "{artifact_id[:80]}". {NOTHING}')
    if artifact.run_id != run.id:
        raise refuse(f'artifact_id: artifact "{artifact_id[:80]}" belongs to another team run, not {run.id}. {NOTHING}')
    reviewer = checked_agent("reviewer", reviewer)
    review_id = f"rev_{secrets.token_hex(6)}"
    with write_transaction():
        lock_rows(TeamRun.select().where(TeamRun.id == run.id))
        refuse_past(TeamReview.select().where(TeamReview.run == run.id).count(), defaults.TEAM_REVIEWS_PER_RUN,
                    "reviews", run)
        TeamReview.create(id=review_id, run=run.id, artifact=artifact.id, requested_by=agent_id, reviewer=reviewer,
                          status=ReviewStatus.PENDING, created_at=now)
    return review_id


def review_view(row: TeamReview) -> dict[str, Any]:
    return {"id": row.id, "status": row.status, "reviewer": row.reviewer, "comments": row.comments}


def submit_review(run: TeamRun, agent_id: str, review_id: str, status: str, comments: str | None,
                  now: datetime) -> dict[str, Any]:
    """Only the named reviewer, only while pending: a conditional UPDATE, so two submissions at once
    cannot both land."""
    review = TeamReview.get_or_none(TeamReview.id == review_id)
    if review is None or review.run_id != run.id:
        elsewhere = " in this team run" if review is None else f" in team run {run.id} (it is another run's)"
        raise refuse(f'review_id: there is no review "{review_id[:80]}"{elsewhere}. {NOTHING}')
    if review.reviewer != agent_id:
        raise refuse(f'Permission denied: review "{review.id}" is for {review.reviewer}, not {agent_id}; only the named '
                     f"reviewer may submit it. {NOTHING}")
    with write_transaction():
        lock_rows(TeamReview.select().where(TeamReview.id == review.id))
        charge_text(run, len(comments or ""))
        changed = TeamReview.update(status=status, comments=comments, submitted_at=now).where(
            (TeamReview.id == review.id) & (TeamReview.status == ReviewStatus.PENDING)
        ).execute()
        if changed != 1:  # raised inside: the comments' charge is rolled back
            done = TeamReview.get(TeamReview.id == review.id)
            raise refuse(f'Review "{review.id}" was submitted already ({done.status}); a review is submitted once. '
                         f"{NOTHING}")
    return review_view(TeamReview.get(TeamReview.id == review.id))


def of_run(run: TeamRun) -> list[dict[str, Any]]:
    """The run's artifacts with their reviews, for the page."""
    reviews: dict[str, list[dict[str, Any]]] = {}
    for row in TeamReview.select().where(TeamReview.run == run.id).order_by(TeamReview.created_at):
        reviews.setdefault(row.artifact_id, []).append({**review_view(row), "requested_by": row.requested_by})
    return [
        {**artifact_view(row), "updated_at": row.updated_at, "reviews": reviews.get(row.id, [])}
        for row in TeamArtifact.select().where(TeamArtifact.run == run.id).order_by(TeamArtifact.created_at)
    ]
