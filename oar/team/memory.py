"""Memory (docs/team-runs.md#memory): one markdown file per agent and one for the project, kept in
the database; sections are `## key` headings, replaced or added by key; dated entries appended.

Memory belongs to the relay, not to one run: what an agent learnt in one run is there in the next.
"""

from __future__ import annotations

import re
from datetime import datetime

from oar.core import defaults
from oar.core.db import write_transaction
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


def read(owner: str) -> str | None:
    row = TeamMemory.get_or_none(TeamMemory.owner == owner)
    return row.content if row else None


def store(owner: str, content: str, now: datetime) -> None:
    if len(content) > defaults.TEAM_MEMORY_MAX_CHARS:
        whose = "the project's" if owner == PROJECT else f"{owner}'s"
        raise refuse(f"{whose} memory would be {len(content):,} characters; the limit is "
                     f"{defaults.TEAM_MEMORY_MAX_CHARS:,}. {NOTHING}")
    TeamMemory.insert(owner=owner, content=content, updated_at=now).on_conflict(
        conflict_target=[TeamMemory.owner], update={TeamMemory.content: content, TeamMemory.updated_at: now},
    ).execute()


def write_section(owner: str, key: str, content: str, now: datetime) -> None:
    key = key.strip()
    if "\n" in key or "\r" in key:
        raise refuse(f"key must be one line (it becomes the section's heading). {NOTHING}")
    with write_transaction():
        store(owner, replace_section(read(owner) or "", key, content), now)


def append(owner: str, content: str, now: datetime) -> None:
    with write_transaction():
        store(owner, dated_entry(read(owner) or "", content, now), now)


def everything() -> dict[str, str]:
    """Every memory file's text by owner ("" the project's)."""
    return {row.owner: row.content for row in TeamMemory.select().order_by(TeamMemory.owner)}
