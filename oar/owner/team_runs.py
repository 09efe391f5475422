"""The owner's view of team runs (docs/team-runs.md#the-page): the runs, one run's board, messages,
artifacts, reviews and memory, and memory as files. The owner API and the page call these."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import redis

from oar.core.errors import invalid, not_found, refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.timeutil import iso
from oar.sessions.folders import check_folder
from oar.team import access, artifacts, board, memory, memory_files, messages, runs, thoughts
from oar.team.kinds import WorkStatus
from oar.team.models import TeamArtifact, TeamMemory, TeamMessage, TeamReview, TeamRun, WorkItem

MEMORY_FOLDER = {
    "folder": Param("str", required=True, max_length=4096,
                    description="an absolute folder under the allowed roots; its .relay/memory/ holds the files"),
}
MESSAGES_SHOWN = 200


def run_or_404(runtime: Runtime, run_id: str) -> TeamRun:
    run = runs.run_by_id(run_id)
    if run is None:
        raise not_found(f'Relay "{runtime.relay_name()}" has no team run "{run_id[:64]}". Nothing was read.')
    return run


def run_line(run: TeamRun) -> dict[str, Any]:
    counts = {status.value: 0 for status in WorkStatus}
    for row in WorkItem.select(WorkItem.status).where(WorkItem.run == run.id):
        counts[row.status] = counts.get(row.status, 0) + 1
    session = Session.get_or_none(Session.id == run.started_in_session) if run.started_in_session else None
    return {
        "id": run.id, "startedBy": run.started_by, "createdAt": iso(run.created_at),
        "session": {"id": session.id, "title": session.title} if session else None,
        "tasks": counts, "messages": TeamMessage.select().where(TeamMessage.run == run.id).count(),
        "hasSummary": run.summary is not None,
    }


def list_runs(runtime: Runtime) -> list[dict[str, Any]]:
    return [run_line(run) for run in runs.runs_newest_first(access.OWNER)]


def run_view(runtime: Runtime, run_id: str) -> dict[str, Any]:
    """One run as the owner sees it: the board by status, messages, artifacts with reviews, memory."""
    run = run_or_404(runtime, run_id)
    tasks = board.all_tasks(run)
    columns = {status.value: [task for task in tasks if task["status"] == status] for status in WorkStatus}
    return {
        **run_line(run),
        "summary": run.summary,
        "orchestratorState": run.orchestrator_state,
        "board": columns,
        "messagesShown": messages.latest(run, MESSAGES_SHOWN),
        "artifacts": [{**item, "updated_at": iso(item["updated_at"])} for item in artifacts.of_run(run)],
        "memory": [{"file": memory_files.file_name(owner), "content": content}
                   for owner, content in memory.everything().items()],
    }


def run_versions(runtime: Runtime, run_id: str) -> dict[str, str]:
    """A short digest per region of the run view, so that the page fetches a region again only when it changed."""
    run = run_or_404(runtime, run_id)

    def digest(*parts: Any) -> str:
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]

    items = list(WorkItem.select(WorkItem.id, WorkItem.updated_at).where(WorkItem.run == run.id).tuples())
    last_message = TeamMessage.select(TeamMessage.seq).where(TeamMessage.run == run.id).order_by(
        TeamMessage.seq.desc()).scalar()
    arts = list(TeamArtifact.select(TeamArtifact.id, TeamArtifact.updated_at).where(TeamArtifact.run == run.id).tuples())
    reviews = list(TeamReview.select(TeamReview.id, TeamReview.status).where(TeamReview.run == run.id).tuples())
    kept = list(TeamMemory.select(TeamMemory.owner, TeamMemory.updated_at).tuples())
    return {
        "board": digest(items), "messages": digest(last_message), "artifacts": digest(arts, reviews),
        "memory": digest(kept), "summary": digest(run.summary, run.orchestrator_state),
    }


def recent_thoughts(runtime: Runtime, run_id: str, after: int) -> list[dict[str, Any]]:
    """The run's thoughts after `after`; none while Redis does not answer (they are only ever there)."""
    run = run_or_404(runtime, run_id)
    try:
        return thoughts.recent(runtime.redis, runtime.config.namespace, run.id, after)
    except redis.RedisError:
        return []


def memory_folder(runtime: Runtime, payload: dict[str, Any], nothing: str) -> Path:
    args, _ignored = check_fields("memory files", MEMORY_FOLDER, payload, strict=True, nothing=nothing)
    try:
        with refusals_ending(nothing):
            return Path(check_folder(args["folder"], runtime.settings()["allowed_roots"]))
    except OSError as error:  # a name too long for the file system, a folder it may not look into
        raise invalid(f'The relay cannot use folder "{args["folder"][:300]}": {error.strerror}. {nothing}') from None


def export_memory(runtime: Runtime, payload: dict[str, Any]) -> tuple[str, list[str]]:
    nothing = "Nothing was written."
    folder = memory_folder(runtime, payload, nothing)
    try:
        return str(folder), memory_files.export(folder)
    except memory_files.ExportStopped as stopped:
        # Files are written one by one: those before the failure are written.
        before = (f"{len(stopped.written)} files before it were written; nothing more was." if stopped.written
                  else nothing)
        raise invalid(f"The memory files could not all be written under {folder}: {stopped.error.strerror}. "
                      f"{before}") from None
    except OSError as error:
        raise invalid(f"The memory files could not be written under {folder}: {error.strerror}. {nothing}") from None


def import_memory(runtime: Runtime, payload: dict[str, Any]) -> tuple[str, memory_files.Imported]:
    nothing = "Nothing was changed."
    folder = memory_folder(runtime, payload, nothing)
    try:
        return str(folder), memory_files.import_from(folder)
    except OSError as error:
        raise invalid(f"The memory files under {folder} could not be read: {error.strerror}. {nothing}") from None
