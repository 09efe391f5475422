"""Memory as files (docs/team-runs.md#memory-as-files): `.relay/memory/project.md` and
`.relay/memory/<agent>.md` under a folder the owner names, so that a team can commit its memory to
git and bring it back, as the seed's users keep it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from oar.core import defaults
from oar.core.db import write_transaction
from oar.core.timeutil import utcnow
from oar.team import memory
from oar.team.runs import AGENT_ID

MEMORY_FOLDER = Path(".relay") / "memory"


def file_name(owner: str) -> str:
    return f"{memory.PROJECT_FILE if owner == memory.PROJECT else owner}.md"


def export(folder: Path) -> list[str]:
    """Write every memory file under `folder`/.relay/memory (each replaced whole, by a rename);
    answers the files' paths relative to `folder`. Files of agents the relay has no memory of stay."""
    target = folder / MEMORY_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for owner, content in memory.everything().items():
        path = target / file_name(owner)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(content, encoding="utf-8")
        os.replace(partial, path)
        written.append(str(MEMORY_FOLDER / path.name))
    return written


@dataclass
class Imported:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "<file>: why"


def import_from(folder: Path) -> Imported:
    """Read `folder`/.relay/memory/*.md into memory, each file replacing that agent's (or the
    project's) memory whole; files that name no agent or are too large are skipped and said so.
    Memory the folder has no file for stays as it is."""
    source = folder / MEMORY_FOLDER
    found = Imported()
    if not source.is_dir():
        return found
    chosen: dict[str, str] = {}
    for path in sorted(source.glob("*.md")):
        stem = path.stem
        owner = memory.PROJECT if stem == memory.PROJECT_FILE else stem
        if owner and not AGENT_ID.match(owner):
            found.skipped.append(f"{path.name}: its name is not an agent id")
            continue
        if path.stat().st_size > defaults.TEAM_MEMORY_MAX_CHARS * 4:
            found.skipped.append(f"{path.name}: larger than the memory limit")
            continue
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            found.skipped.append(f"{path.name}: not UTF-8 text")
            continue
        if len(content) > defaults.TEAM_MEMORY_MAX_CHARS or "\x00" in content:
            found.skipped.append(f"{path.name}: larger than the memory limit or holds a NUL character")
            continue
        chosen[owner] = content
        found.imported.append(str(MEMORY_FOLDER / path.name))
    now = utcnow()
    with write_transaction():
        for owner, content in chosen.items():
            memory.store(owner, content, now)
    return found
