"""Memory as files (docs/team-runs.md#memory-as-files): `.relay/memory/project.md` and
`.relay/memory/<agent>.md` under a folder the owner names, so that a team can commit its memory to
git and bring it back, as the seed's users keep it.

The folder is one agents may write in (the default is every default session's folder), so every
file is opened without following a link (`oar.core.safe_files`): a link planted anywhere on the
way refuses the export or the import, and nothing is written or read through it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from oar.core import defaults, safe_files
from oar.core.db import write_transaction
from oar.core.safe_files import UnsafeFile
from oar.core.timeutil import utcnow
from oar.team import memory
from oar.team.runs import AGENT_ID

MEMORY_FOLDER = PurePosixPath(".relay") / "memory"
# A file larger than this many bytes cannot hold the memory limit's characters (UTF-8: at most 4 bytes each).
MAX_FILE_BYTES = defaults.TEAM_MEMORY_MAX_CHARS * 4


file_name = memory.file_of


class ExportStopped(Exception):
    """The export stopped at a file after writing `written` (each replaced whole)."""

    def __init__(self, error: OSError, written: list[str]) -> None:
        super().__init__(error.strerror)
        self.error = error
        self.written = written


def export(folder: Path) -> list[str]:
    """Write every memory file under `folder`/.relay/memory (each replaced whole, by a rename);
    answers the files' paths relative to `folder`. Files of agents the relay has no memory of stay.
    Every file is checked before the first is written, so a planted link refuses the whole export;
    an error while writing raises `ExportStopped` with the files written before it."""
    files = {file_name(owner): content.encode("utf-8") for owner, content in memory.everything().items()}
    # `folder` is resolved (it held no link when it was checked): walked from `/` without following
    # one, a link planted since on the way refuses the export; missing folders are made.
    with safe_files.opened_dir(folder / MEMORY_FOLDER, create=True) as target:
        for name in files:
            try:
                safe_files.refuse_unsafe_target(target, name)
            except UnsafeFile as error:
                raise error.under(str(folder / MEMORY_FOLDER)) from None
        written: list[str] = []
        for name, data in files.items():
            try:
                safe_files.write_file_atomic(target, name, data)
            except UnsafeFile as error:
                raise ExportStopped(error.under(str(folder / MEMORY_FOLDER)), written) from None
            except OSError as error:
                raise ExportStopped(error, written) from None
            written.append(str(MEMORY_FOLDER / name))
    return written


@dataclass
class Imported:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "<file>: why"


def import_from(folder: Path) -> Imported:
    """Read `folder`/.relay/memory/*.md into memory, each file replacing that agent's (or the
    project's) memory whole; files that name no agent or are too large are skipped and said so.
    Memory the folder has no file for stays as it is. A link (symbolic or hard) or a non-regular
    file among them refuses the whole import (`UnsafeFile`): nothing is read through it and
    nothing is changed."""
    found = Imported()
    try:
        source = safe_files.open_dir_nofollow(folder / MEMORY_FOLDER)
    except FileNotFoundError:
        return found
    try:
        chosen = read_files(source, str(folder / MEMORY_FOLDER), found)
    finally:
        os.close(source)
    now = utcnow()
    with write_transaction():
        for owner, content in chosen.items():
            memory.store(owner, content, now)
    return found


def read_files(source: int, shown: str, found: Imported) -> dict[str, str]:
    """Every `*.md` in the open folder `source` (`shown` in errors) that names an agent (or the
    project), by owner."""
    chosen: dict[str, str] = {}
    for name in safe_files.names_in(source):
        if not name.endswith(".md"):
            continue
        stem = name[: -len(".md")]
        if stem != memory.PROJECT_FILE and not AGENT_ID.match(stem):
            found.skipped.append(f"{name}: its name is not an agent id")
            continue
        owner = memory.PROJECT if stem == memory.PROJECT_FILE else stem
        try:
            raw = safe_files.read_regular_file(source, name, MAX_FILE_BYTES)
        except safe_files.TooLarge:
            found.skipped.append(f"{name}: larger than the memory limit")
            continue
        except FileNotFoundError:
            continue  # removed since the folder was listed
        except UnsafeFile as error:
            raise error.under(shown) from None
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            found.skipped.append(f"{name}: not UTF-8 text")
            continue
        if len(content) > defaults.TEAM_MEMORY_MAX_CHARS or "\x00" in content:
            found.skipped.append(f"{name}: larger than the memory limit or holds a NUL character")
            continue
        chosen[owner] = content
        found.imported.append(str(MEMORY_FOLDER / name))
    return chosen
