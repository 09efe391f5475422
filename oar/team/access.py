"""Who may see and act in a team run, and as which agent (docs/team-runs.md#runs-and-teams).

A **team** is a tree of conversations: one the owner started (or another relay's agent started),
and every conversation its agents started, and theirs. Its root names it. A run belongs to the
team of the conversation that started it, and a memory file to the team that first wrote it; a
conversation sees and acts in its team's runs and memory only, unless the owner shares them with
every conversation of the relay (`team_runs_shared`). Within a run, an agent id belongs to the
conversation whose token used it there first: another conversation cannot speak, claim or review
as that agent, shared or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from oar.core import defaults
from oar.core.db import lock_rows, write_transaction
from oar.core.errors import ActionError, invalid
from oar.core.models import Session
from oar.team.models import TeamAgent, TeamMemory, TeamRun

NOTHING = "Nothing was changed."


def team_root(session_id: str) -> str:
    """The conversation at the root of `session_id`'s tree: the first of its starters (following
    `created_by_session` up) that nobody on this relay started."""
    current = session_id
    seen = {current}
    for _ in range(defaults.TEAM_TREE_MAX_DEPTH):
        parent = Session.select(Session.created_by_session).where(Session.id == current).scalar()
        if not parent or parent in seen:
            break
        seen.add(parent)
        current = parent
    return str(current)


@dataclass(frozen=True)
class Scope:
    """What one calling conversation sees: its team's runs and memory, or everything while the
    owner shares them. `team` None: the owner, who sees everything."""

    session_id: str | None
    team: str | None
    shared: bool

    def sees_run(self, run: TeamRun) -> bool:
        return self.team is None or self.shared or run.team_root == self.team

    def sees_memory(self, row: TeamMemory) -> bool:
        # A file nobody keeps yet (the owner's import) is everyone's to read.
        return self.team is None or self.shared or row.team_root is None or row.team_root == self.team

    def may_write_memory(self, row: TeamMemory | None) -> bool:
        return row is None or self.sees_memory(row)


OWNER = Scope(session_id=None, team=None, shared=True)


def scope_of(session_id: str, shared: bool) -> Scope:
    return Scope(session_id=session_id, team=team_root(session_id), shared=shared)


def not_open(run_id: str) -> ActionError:
    return invalid(
        f'Team run "{run_id[:80]}" belongs to another team of conversations (it was started from a conversation '
        "this one was not started from): this conversation may not see or join it. Start a run of its own with "
        f"start_session without session_id, or ask the owner to share team runs. {NOTHING}"
    )


def bind_agent(run: TeamRun, agent_id: str, scope: Scope) -> TeamAgent | None:
    """`agent_id` in `run` is this conversation's: bound to it now if nobody used it in the run
    before (the new binding is answered, so that a call refused afterwards can take it back), else
    it must be bound to it already. The owner binds nothing."""
    if scope.session_id is None:
        return None
    bound = TeamAgent.get_or_none((TeamAgent.run == run.id) & (TeamAgent.agent_id == agent_id))
    made = None
    if bound is None:
        with write_transaction():
            # Concurrent first uses count each other (PostgreSQL): the run's row is the lock.
            lock_rows(TeamRun.select().where(TeamRun.id == run.id))
            if TeamAgent.select().where(TeamAgent.run == run.id).count() >= defaults.TEAM_AGENTS_PER_RUN:
                raise invalid(f"Team run {run.id} has {defaults.TEAM_AGENTS_PER_RUN} agent ids already, the most a run "
                              f"may have; use one of them. {NOTHING}")
            made = TeamAgent.insert(run=run.id, agent_id=agent_id, session_id=scope.session_id) \
                .on_conflict_ignore().execute()
        bound = TeamAgent.get((TeamAgent.run == run.id) & (TeamAgent.agent_id == agent_id))
    if bound.session_id != scope.session_id:
        raise invalid(
            f'agent_id "{agent_id}" is another conversation\'s in team run {run.id}: an agent id belongs to the '
            f"conversation that used it there first, and only it may act as that agent. Use an agent id of your own. "
            f"{NOTHING}"
        )
    return bound if made and bound.id == made else None


def unbind(binding: TeamAgent | None) -> None:
    """Take back a binding made by a call that was refused afterwards (a refused call changes nothing)."""
    if binding is not None:
        with write_transaction():
            TeamAgent.delete().where(TeamAgent.id == binding.id).execute()
