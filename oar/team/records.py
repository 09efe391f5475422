"""Run records (docs/team-runs.md#run-records): a run's summary and the orchestrator's saved
state, on the run's row, so that both survive restarts (the seed kept the state in memory)."""

from __future__ import annotations

from datetime import datetime

from oar.core.db import lock_rows, write_transaction
from oar.team.access import Scope
from oar.team.models import TeamRun
from oar.team.runs import charge_text, checked_run_id, refuse, visible_run


def save_summary(run: TeamRun, agent_id: str, summary: str, now: datetime) -> None:
    """The run's summary, replacing the one before (its text counted against the run's cap)."""
    with write_transaction():
        lock_rows(TeamRun.select().where(TeamRun.id == run.id))
        before = TeamRun.get(TeamRun.id == run.id).summary or ""
        charge_text(run, len(summary) - len(before))
        TeamRun.update(summary=summary, summary_by=agent_id, summary_at=now).where(TeamRun.id == run.id).execute()


def summary_of(scope: Scope, run_id: str) -> str:
    run = visible_run(scope, checked_run_id(run_id))
    if run is None:
        raise refuse(f'There is no team run "{run_id[:80]}" for this conversation. Nothing was read.')
    if run.summary is None:
        raise refuse(f"Team run {run.id} has no summary yet (save_session_summary saves one). Nothing was read.")
    return run.summary


def save_state(run: TeamRun, agent_id: str, state: str, now: datetime) -> None:
    with write_transaction():
        lock_rows(TeamRun.select().where(TeamRun.id == run.id))
        before = TeamRun.get(TeamRun.id == run.id).orchestrator_state or ""
        charge_text(run, len(state) - len(before))
        TeamRun.update(orchestrator_state=state, state_by=agent_id, state_at=now).where(TeamRun.id == run.id).execute()


def state_of(run: TeamRun) -> str | None:
    return TeamRun.get(TeamRun.id == run.id).orchestrator_state
