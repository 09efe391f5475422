"""Where tasks' output files live and how the relay opens them (docs/tasks.md#agent-output-files).

A task the relay runs writes `<data dir>/tasks/<id>.log`. A `cli` agent's own tasks write
wherever the agent says; the relay gives each session's agent a folder of its own as its
temporary folder (`<data dir>/agent-tasks/<session id>/`) and reads an agent's output file
only inside that folder. Whatever the agent names, the relay opens a file by walking from
the folder down, one component at a time, without following any link (`O_NOFOLLOW`), and
reads only a regular file: a path outside, a symlink (the file or a folder on the way, even
one swapped in after the report) or a FIFO is refused, so an agent cannot make the relay
serve its database or any other file to the agents that read the task's output.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import BinaryIO

from oar.core.models import Task
from oar.core.runtime import Runtime

log = logging.getLogger(__name__)

AGENT_FOLDER = "agent-tasks"


class OutputRefused(FileNotFoundError):
    """The path is not a regular file reachable inside the folder without following a link."""


def relay_folder(runtime: Runtime) -> Path:
    """Where the relay's own tasks write their output."""
    return runtime.config.data_dir / "tasks"


def agent_folder(runtime: Runtime, session_id: str) -> Path:
    """The session's folder for its agent's task output (not created)."""
    return (runtime.config.data_dir / AGENT_FOLDER).resolve() / session_id


def prepare_agent_folder(runtime: Runtime, session_id: str) -> str | None:
    """The session's agent folder, created private to the relay's user; None if it cannot be."""
    folder = agent_folder(runtime, session_id)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        log.warning("session %s: the agent's task output folder could not be made: %s", session_id[:8], error)
        return None
    return str(folder)


def accepted_agent_file(runtime: Runtime, session_id: str, path: str | None) -> str | None:
    """The path an agent reported, normalised, when it lies in the session's agent folder; else
    None (logged): such a task is recorded without an output file."""
    if not path:
        return None
    normal = os.path.normpath(path)
    if os.path.isabs(normal) and _inside(agent_folder(runtime, session_id), normal):
        return normal
    log.warning(
        "session %s: the agent reported an output file outside the relay's folder for it (%r); recorded without a file",
        session_id[:8], path[:200],
    )
    return None


def kept_here(runtime: Runtime, task: Task) -> bool:
    """Whether the task's output file is named in this machine's folder for it: on a relay of
    several nodes, another node's file is that node's to read (docs/tasks.md#where-the-output-is-kept)."""
    return task.output_path is not None and _inside(_root_of(runtime, task), os.path.normpath(task.output_path))


def _root_of(runtime: Runtime, task: Task) -> Path:
    root = relay_folder(runtime) if task.command is not None else agent_folder(runtime, task.session_id)
    return Path(os.path.realpath(root))


def open_output(runtime: Runtime, task: Task) -> BinaryIO:
    """The task's output file opened for reading; raises FileNotFoundError (OutputRefused when
    the file is not one the relay may read). `task.output_path` must be set."""
    if task.output_path is None:
        raise FileNotFoundError("the task has no output file")
    return open_inside(_root_of(runtime, task), task.output_path)


def open_inside(root: Path, path: str) -> BinaryIO:
    """`path` opened read-only when it is a regular file inside `root`, reached from `root` one
    component at a time without following a link. Raises FileNotFoundError / OutputRefused."""
    real_root = os.path.realpath(root)
    normal = os.path.normpath(path)
    if not _inside(Path(real_root), normal):
        raise OutputRefused(f"{path} is outside {real_root}")
    parts = os.path.relpath(normal, real_root).split(os.sep)
    folder = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = _open_component(part, folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            os.close(folder)
            folder = inner
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        handle = _open_component(parts[-1], folder, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise OutputRefused(f"{path} is not a regular file")
    return os.fdopen(handle, "rb")


def _open_component(name: str, folder: int, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except FileNotFoundError:
        raise
    except OSError as error:  # ELOOP: a link; ENOTDIR: a file or a link where a folder should be
        raise OutputRefused(f"{name}: {error.strerror}") from None


def _inside(root: Path, normal: str) -> bool:
    """Lexically inside (no `..` left after normalising), not the folder itself."""
    base = str(root).rstrip(os.sep) + os.sep
    return normal.startswith(base) and len(normal) > len(base)
