"""Run records (docs/team-runs.md#run-records): a run's summary and the orchestrator's saved
state, on the run's row, so that both survive restarts (the seed kept the state in memory)."""

from __future__ import annotations

from datetime import datetime

from oar.core.db import write_transaction
from oar.team.models import TeamRun
from oar.team.runs import checked_run_id, ensure_run, refuse


def save_summary(run_id: str, agent_id: str, summary: str, session_id: str, now: datetime) -> None:
    """A summary for any run id (a run saved before it was declared here is created with it)."""
    run = ensure_run(checked_run_id(run_id), agent_id, session_id, now)
    with write_transaction():
        TeamRun.update(summary=summary, summary_by=agent_id, summary_at=now).where(TeamRun.id == run.id).execute()


def summary_of(run_id: str) -> str:
    run = TeamRun.get_or_none(TeamRun.id == checked_run_id(run_id))
    if run is None:
        raise refuse(f'There is no team run "{run_id[:80]}". Nothing was read.')
    if run.summary is None:
        raise refuse(f"Team run {run.id} has no summary yet (save_session_summary saves one). Nothing was read.")
    return run.summary


def save_state(run: TeamRun, agent_id: str, state: str, now: datetime) -> None:
    with write_transaction():
        TeamRun.update(orchestrator_state=state, state_by=agent_id, state_at=now).where(TeamRun.id == run.id).execute()


def state_of(run: TeamRun) -> str | None:
    return TeamRun.get(TeamRun.id == run.id).orchestrator_state
