"""A worker process kept on one core of its own (docs/operations.md#a-worker-on-one-core).

A worker's turns run in threads of one process, which share one GIL: a streamed turn takes the
GIL back at every token its socket hands over. Left to the scheduler, those threads run on
whichever core is free, and the GIL went from core to core at each hand-over; on one core the
same 50 streams took half the CPU per token (docs/benchmarks.md#streams-a-worker-on-one-core-2026-12-07).
A process of one GIL uses about one core anyway, so `claim_core` keeps a worker on one core
nobody else of this relay claimed (the last free one: the web processes, left to the scheduler,
move to the others). Claims are locks on files of the data directory, held while the process
lives and freed by the kernel when it ends, so several `oar worker` processes of one relay
take different cores, and a process that finds every core claimed stays where the scheduler puts
it.

What a worker starts (a background task, an agent CLI) runs on every core the worker could
before: it is started under `unpinned()`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator, Set
from pathlib import Path

log = logging.getLogger(__name__)

CLAIMS_FOLDER = "cpu-claims"

# The cores this process could run on before it claimed one (None: it claimed none), and the
# claim's open lock file, kept open as long as the process lives.
_allowed_before: frozenset[int] | None = None
_claim_fd: int | None = None


def claim_order(allowed: Set[int]) -> list[int]:
    """The cores a worker tries, in turn: none when there is only one (nothing to keep it off),
    else from the last, leaving the first ones to what the scheduler places."""
    return sorted(allowed, reverse=True) if len(allowed) > 1 else []


def claim_core(data_dir: Path) -> int | None:
    """Keep this process (its calling thread and the threads it starts afterwards) on a core
    no other process of this relay claimed; the core, or None when none was free or the
    system cannot say which cores a process runs on. Call it first thing in the process's
    main thread: threads started before keep every core."""
    global _allowed_before, _claim_fd
    if _claim_fd is not None or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(0))
    order = claim_order(allowed)
    if not order:
        return None
    folder = data_dir / CLAIMS_FOLDER
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for core in order:
            fd = _locked(folder / f"cpu-{core}.lock")
            if fd is None:
                continue
            try:
                os.sched_setaffinity(0, {core})
            except OSError:
                os.close(fd)
                raise
            _allowed_before, _claim_fd = allowed, fd
            return core
    except OSError as error:  # a folder without locks (some network file systems): run unheld
        log.warning("the worker runs on every core: no core could be claimed in %s (%s)", folder, error)
    return None


def _locked(path: Path) -> int | None:
    """The lock file at `path` opened and locked by this process, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """Inside, the calling thread may run on every core the process could before its claim:
    a process it starts inherits that, not the worker's one core."""
    if _allowed_before is None:
        yield
        return
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _allowed_before)
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


def forget_inherited() -> None:
    """In a forked child: the claim is the parent's. The child runs on every core the parent
    could before it, drops its copy of the lock (the parent's lock stays) and may claim a core
    of its own."""
    global _allowed_before, _claim_fd
    if _claim_fd is not None:
        os.close(_claim_fd)
    if _allowed_before is not None:
        os.sched_setaffinity(0, _allowed_before)
    _allowed_before, _claim_fd = None, None


os.register_at_fork(after_in_child=forget_inherited)
