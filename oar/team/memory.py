"""Memory (docs/team-runs.md#memory): one markdown file per agent and one for the project, kept in
the database; sections are `## key` headings, replaced or added by key; dated entries appended.

Memory belongs to the relay, not to one run: what an agent learnt in one run is there in the next.
A file is kept by the team of conversations that first wrote it (oar.team.access): another
team's file reads as none and is not written, unless the owner shares team runs.
"""

from __future__ import annotations

import re
from datetime import datetime

from oar.core import defaults
from oar.core.db import write_transaction
from oar.team.access import OWNER, Scope
from oar.team.models import TeamMemory
from oar.team.runs import NOTHING, refuse

PROJECT = ""  # the project's memory (`project.md`)
PROJECT_FILE = "project"
HEADING = re.compile(r"^## (?P<key>.+?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def replace_section(document: str, key: str, content: str) -> str:
    """`document` with the section `## key` holding `content`: its body replaced up to the next
    `## ` heading, or the section added at the end. Headings inside fenced code blocks are text."""
    lines = document.splitlines()
    start = end = None
    fenced = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading is None:
            continue
        if start is not None:
            end = index
            break
        if heading.group("key") == key:
            start = index
    body = content.strip("\n").splitlines()
    if start is None:
        kept = document.rstrip("\n")
        prefix = f"{kept}\n\n" if kept else ""
        return prefix + "\n".join([f"## {key}", "", *body]) + "\n"
    end = len(lines) if end is None else end
    after = lines[end:]
    section = [f"## {key}", "", *body] + ([""] if after else [])
    return "\n".join(lines[:start] + section + after) + "\n"


def dated_entry(document: str, content: str, now: datetime) -> str:
    """`document` with `content` appended as a new section headed by the UTC date and time (always
    added, even when an entry of the same second exists)."""
    kept = document.rstrip("\n")
    prefix = f"{kept}\n\n" if kept else ""
    return prefix + "\n".join([f"## {now:%Y-%m-%d %H:%M:%S} UTC", "", *content.strip(chr(10)).splitlines()]) + "\n"


def memory_owner(agent_id: str | None) -> str:
    if agent_id == PROJECT_FILE:
        raise refuse(f'agent_id "{PROJECT_FILE}" names the project\'s memory file; leave agent_id out for the '
                     f"project's memory. {NOTHING}")
    return agent_id or PROJECT


def read(owner: str, scope: Scope = OWNER) -> str | None:
    """The memory file's text, or None when there is none that `scope` sees (another team's file
    reads as none)."""
    row = TeamMemory.get_or_none(TeamMemory.owner == owner)
    return row.content if row is not None and scope.sees_memory(row) else None


def whose(owner: str) -> str:
    return "the project's" if owner == PROJECT else f"{owner}'s"


def file_of(owner: str) -> str:
    """The memory file's name (`project.md` or `<agent>.md`, as the owner's export writes it)."""
    return f"{PROJECT_FILE if owner == PROJECT else owner}.md"


def store(owner: str, content: str, now: datetime, keeper: str | None = None) -> None:
    """Replace the file's text; a new file is kept by `keeper` (a team; None: nobody's, the owner's
    import), a file kept before keeps its keeper."""
    if len(content) > defaults.TEAM_MEMORY_MAX_CHARS:
        raise refuse(f"{whose(owner)} memory would be {len(content):,} characters; the limit is "
                     f"{defaults.TEAM_MEMORY_MAX_CHARS:,}. {NOTHING}")
    TeamMemory.insert(owner=owner, content=content, updated_at=now, team_root=keeper).on_conflict(
        conflict_target=[TeamMemory.owner], update={TeamMemory.content: content, TeamMemory.updated_at: now},
    ).execute()


def writable(owner: str, scope: Scope) -> str:
    """The file's text as `scope` may change it ("" when new); a refusal when another team keeps
    it, or when a new file would pass the team's TEAM_MEMORY_FILES_PER_TEAM. Inside the writing
    transaction."""
    row = TeamMemory.get_or_none(TeamMemory.owner == owner)
    if not scope.may_write_memory(row):
        raise refuse(f"The memory file {file_of(owner)} is kept by another team of conversations (the one that wrote "
                     f"it first): this conversation may not change it. {NOTHING}")
    if scope.team is not None and (row is None or row.team_root is None):
        kept = TeamMemory.select().where(TeamMemory.team_root == scope.team).count()
        if kept >= defaults.TEAM_MEMORY_FILES_PER_TEAM:
            raise refuse(f"This conversation's team keeps {defaults.TEAM_MEMORY_FILES_PER_TEAM} memory files, the most a "
                         f"team may: write to one of them. {NOTHING}")
    return row.content if row is not None else ""


def keeper_of(owner: str, scope: Scope) -> str | None:
    """Who keeps the file after `scope` writes it: its keeper, or the writer's team for a file nobody kept."""
    row = TeamMemory.get_or_none(TeamMemory.owner == owner)
    return row.team_root if row is not None and row.team_root is not None else scope.team


def write_section(owner: str, key: str, content: str, now: datetime, scope: Scope) -> None:
    key = key.strip()
    if "\n" in key or "\r" in key:
        raise refuse(f"key must be one line (it becomes the section's heading). {NOTHING}")
    with write_transaction():
        before = writable(owner, scope)
        keep(owner, replace_section(before, key, content), now, scope)


def append(owner: str, content: str, now: datetime, scope: Scope) -> None:
    with write_transaction():
        before = writable(owner, scope)
        keep(owner, dated_entry(before, content, now), now, scope)


def keep(owner: str, content: str, now: datetime, scope: Scope) -> None:
    """Store an agent's write: a file nobody kept becomes the writer's team's."""
    keeper = keeper_of(owner, scope)
    store(owner, content, now, keeper)
    if keeper is not None:
        TeamMemory.update(team_root=keeper).where(
            (TeamMemory.owner == owner) & TeamMemory.team_root.is_null()).execute()


def everything() -> dict[str, str]:
    """Every memory file's text by owner ("" the project's)."""
    return {row.owner: row.content for row in TeamMemory.select().order_by(TeamMemory.owner)}
