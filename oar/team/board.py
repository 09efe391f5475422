"""A run's task board (docs/team-runs.md#tasks): creating tasks under the circuit breaker,
dependencies within the run and without cycles, idempotency keys, updates and the atomic claim.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import peewee as pw

from oar.core import defaults
from oar.core.db import lock_rows, write_transaction
from oar.team.kinds import WorkStatus
from oar.team.models import TeamRun, WorkItem, WorkItemDependency
from oar.team.runs import NOTHING, charge_text, checked_agent, refuse, refuse_past


def new_task_id() -> str:
    return f"task_{secrets.token_hex(6)}"


def task_in_run(run: TeamRun, task_id: str, what: str = "task_id") -> WorkItem:
    """The run's task, or a refusal that says whether it is another run's."""
    task = WorkItem.get_or_none(WorkItem.id == task_id)
    if task is None:
        raise refuse(f'{what}: there is no task "{task_id[:80]}". {NOTHING}')
    if task.run_id != run.id:
        raise refuse(f'{what}: task "{task_id[:80]}" belongs to another team run, not {run.id}. {NOTHING}')
    return task


def checked_dependencies(run: TeamRun, given: Any) -> list[str]:
    """`depends_on` as task ids of this run, in the order given, each once."""
    if not isinstance(given, list) or not all(isinstance(item, str) and item.strip() for item in given):
        raise refuse(f"depends_on must be a list of task ids (text). {NOTHING}")
    wanted = list(dict.fromkeys(item.strip() for item in given))
    if len(wanted) > defaults.TEAM_DEPENDENCIES_MAX:
        raise refuse(f"depends_on names {len(wanted)} tasks; the limit is {defaults.TEAM_DEPENDENCIES_MAX}. {NOTHING}")
    found = {row.id: row.run_id for row in WorkItem.select(WorkItem.id, WorkItem.run).where(WorkItem.id.in_(wanted))}
    missing = [task for task in wanted if task not in found]
    if missing:
        raise refuse(f"depends_on names tasks that do not exist: {', '.join(missing[:10])}. {NOTHING}")
    elsewhere = [task for task in wanted if found[task] != run.id]
    if elsewhere:
        raise refuse(f"depends_on names tasks of another team run: {', '.join(elsewhere[:10])} "
                     f"(tasks may depend only on tasks of run {run.id}). {NOTHING}")
    return wanted


def create_task(run: TeamRun, agent_id: str, args: dict[str, Any], now: datetime) -> tuple[str, bool]:
    """A new task's id and False; or, for an idempotency key the run has seen, that task's id and True."""
    key = args.get("idempotency_key")
    if key:
        existing = WorkItem.get_or_none((WorkItem.run == run.id) & (WorkItem.idempotency_key == key))
        if existing is not None:
            return existing.id, True
    assignee = checked_agent("assignee", args["assignee"]) if args.get("assignee") else None
    needs = checked_dependencies(run, args["depends_on"]) if args.get("depends_on") else []
    parent_id = args.get("parent_task_id")
    if args.get("derived_reason") and not parent_id:
        raise refuse(f"derived_reason needs parent_task_id (the task this one is derived from). {NOTHING}")
    task_id = new_task_id()
    try:
        with write_transaction():
            charge_text(run, sum(len(args.get(name) or "") for name in ("title", "description", "derived_reason")))
            depth = 0
            if parent_id:
                parent = task_in_run(run, parent_id, "parent_task_id")
                # Two derived tasks created at once count each other (PostgreSQL): the parent row is the lock.
                lock_rows(WorkItem.select().where(WorkItem.id == parent.id))
                depth = parent.depth + 1
                if depth > defaults.TEAM_DERIVED_DEPTH:
                    raise refuse(
                        f'Circuit breaker: task "{parent.id}" is itself derived (from "{parent.parent_id}"), and derived '
                        f"tasks may nest only {defaults.TEAM_DERIVED_DEPTH} deep. Derive from the original task instead. "
                        "Nothing was created."
                    )
                siblings = WorkItem.select().where(WorkItem.parent == parent.id).count()
                if siblings >= defaults.TEAM_DERIVED_PER_PARENT:
                    raise refuse(
                        f'Circuit breaker: task "{parent.id}" has {siblings} derived tasks already, the most a task may '
                        f"have ({defaults.TEAM_DERIVED_PER_PARENT}). Finish or rethink those first. Nothing was created."
                    )
            refuse_past(WorkItem.select().where(WorkItem.run == run.id).count(), defaults.TEAM_WORK_ITEMS_PER_RUN,
                        "tasks", run)
            WorkItem.create(
                id=task_id, run=run.id, title=args["title"], description=args.get("description"), assignee=assignee,
                priority=args["priority"], status=WorkStatus.TODO, created_by=agent_id, parent=parent_id or None,
                derived_reason=args.get("derived_reason"), depth=depth, idempotency_key=key or None,
                created_at=now, updated_at=now,
            )
            if needs:
                WorkItemDependency.insert_many([{"item": task_id, "needs": need} for need in needs]).execute()
    except pw.IntegrityError:
        # The same idempotency key created by another call at the same moment: that one's task.
        if key:
            existing = WorkItem.get_or_none((WorkItem.run == run.id) & (WorkItem.idempotency_key == key))
            if existing is not None:
                return existing.id, True
        raise
    return task_id, False


def dependencies_of(task_ids: Iterable[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    ids = list(task_ids)
    if not ids:
        return found
    for row in WorkItemDependency.select().where(WorkItemDependency.item.in_(ids)).order_by(WorkItemDependency.id):
        found.setdefault(row.item_id, []).append(row.needs_id)
    return found


def would_cycle(run: TeamRun, task_id: str, needs: list[str]) -> list[str] | None:
    """A path task → … → task the new dependencies would close, or None (a pure walk of the run's edges)."""
    edges: dict[str, list[str]] = {}
    rows = WorkItemDependency.select().join(WorkItem, on=(WorkItemDependency.item == WorkItem.id)).where(
        WorkItem.run == run.id
    )
    for row in rows:
        if row.item_id != task_id:
            edges.setdefault(row.item_id, []).append(row.needs_id)
    edges[task_id] = list(needs)
    return find_cycle(edges, task_id)


def find_cycle(edges: dict[str, list[str]], start: str) -> list[str] | None:
    """The first path from `start` back to itself along `edges`, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, []):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def update_task(run: TeamRun, args: dict[str, Any], now: datetime) -> WorkItem:
    task = task_in_run(run, args["task_id"])
    if not any(name in args for name in ("status", "assignee", "depends_on")):
        raise refuse(f"update_task needs status, assignee or depends_on (what to change). {NOTHING}")
    changes: dict[Any, Any] = {WorkItem.updated_at: now}
    if "assignee" in args:
        changes[WorkItem.assignee] = checked_agent("assignee", args["assignee"])
    if "status" in args:
        changes[WorkItem.status] = args["status"]
        if args["status"] == WorkStatus.TODO:
            # Back on the board: claimable again.
            changes[WorkItem.claimed_by] = None
            changes[WorkItem.claimed_at] = None
    needs: list[str] | None = None
    if "depends_on" in args:
        needs = checked_dependencies(run, args["depends_on"])
        cycle = would_cycle(run, task.id, needs)
        if cycle:
            raise refuse(f"depends_on would make a cycle: {' → '.join(cycle)}. {NOTHING}")
    with write_transaction():
        WorkItem.update(changes).where(WorkItem.id == task.id).execute()
        if needs is not None:
            WorkItemDependency.delete().where(WorkItemDependency.item == task.id).execute()
            if needs:
                WorkItemDependency.insert_many([{"item": task.id, "needs": need} for need in needs]).execute()
    return WorkItem.get(WorkItem.id == task.id)


def claim_task(run: TeamRun, agent_id: str, task_id: str, now: datetime) -> tuple[bool, str | None]:
    """Claim with one conditional UPDATE: `todo`, unassigned or the caller's, every dependency done.
    Of any number of concurrent claims exactly one changes the row (its rowcount is 1); the others
    find it changed and say why."""
    task = task_in_run(run, task_id)
    needed = WorkItem.alias()
    pending = (
        WorkItemDependency.select(WorkItemDependency.id)
        .join(needed, on=(WorkItemDependency.needs == needed.id))
        .where((WorkItemDependency.item == task.id) & (needed.status != WorkStatus.DONE))
    )
    with write_transaction():
        claimed = WorkItem.update(
            status=WorkStatus.IN_PROGRESS, assignee=agent_id, claimed_by=agent_id, claimed_at=now, updated_at=now
        ).where(
            (WorkItem.id == task.id)
            & (WorkItem.status == WorkStatus.TODO)
            & (WorkItem.assignee.is_null() | (WorkItem.assignee == agent_id))
            & ~pw.fn.EXISTS(pending)
        ).execute()
    if claimed == 1:
        return True, None
    return False, why_not_claimed(WorkItem.get(WorkItem.id == task.id), agent_id)


def why_not_claimed(task: WorkItem, agent_id: str) -> str:
    if task.status != WorkStatus.TODO:
        by = f" by {task.claimed_by}" if task.claimed_by else ""
        return f"task is {task.status}{by}, not todo"
    if task.assignee and task.assignee != agent_id:
        return f"task is assigned to {task.assignee}"
    open_needs = [
        row.id for row in WorkItem.select(WorkItem.id).join(
            WorkItemDependency, on=(WorkItemDependency.needs == WorkItem.id)
        ).where((WorkItemDependency.item == task.id) & (WorkItem.status != WorkStatus.DONE))
    ]
    if open_needs:
        return f"dependencies not done: {', '.join(open_needs)}"
    return "task changed meanwhile; try again"


def task_view(task: WorkItem, needs: list[str]) -> dict[str, Any]:
    return {
        "id": task.id,
        "title": task.title,
        "status": task.status,
        "assignee": task.assignee,
        "priority": task.priority,
        "description": task.description,
        "depends_on": needs,
        "parent_task_id": task.parent_id,
        "derived_reason": task.derived_reason,
        "claimed_by": task.claimed_by,
        "created_by": task.created_by,
    }


def all_tasks(run: TeamRun, assignee: str | None = None) -> list[dict[str, Any]]:
    query = WorkItem.select().where(WorkItem.run == run.id)
    if assignee:
        query = query.where(WorkItem.assignee == assignee)
    tasks = list(query.order_by(WorkItem.created_at, WorkItem.id))
    needs = dependencies_of(task.id for task in tasks)
    return [task_view(task, needs.get(task.id, [])) for task in tasks]
