"""A child process that dies with its parent (docs/operations.md#when-the-launcher-dies).

`python app.py` starts gunicorn, the RQ worker pool, the clock and redis-server. When the
launcher is killed (SIGKILL, the OOM killer) nothing runs its cleanup, so each child looks
after itself twice over:

- `die_with_parent()` asks the kernel (Linux `PR_SET_PDEATHSIG`) to send SIGTERM the moment
  the parent exits. The kernel watches the parent *thread* that forked the child, so the
  launcher starts its children from its main thread, which lives as long as it does.
- `watch_parent()` polls the parent's pid from a thread, for systems without `prctl` and for
  a child whose parent died before it could ask (its first look is at once). An orphan gets
  SIGTERM (its own graceful stop), and if it is still there `ORPHAN_EXIT_SECONDS` later it
  exits hard. Where the kernel watches too, it looks only every `BACKSTOP_CHECK_SECONDS`: an
  idle relay's processes woke ten times a second for these looks alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading

from oar.core.numbers import read_whole

log = logging.getLogger("oar.lifeline")

# The environment variable by which the launcher tells its children its pid: a child started
# by something else (a bare `gunicorn wsgi:app`, a Procfile runner) does not watch its parent.
LAUNCHER_PID_VARIABLE = "OAR_LAUNCHER_PID"
# How often an orphan check runs; and where the kernel signals the orphan itself.
PARENT_CHECK_SECONDS = 0.5
BACKSTOP_CHECK_SECONDS = 5.0
# How long an orphan's graceful stop may take before it exits hard (its requests and turns
# get 10 s; Redis died with the launcher anyway).
ORPHAN_EXIT_SECONDS = 15.0
# linux/prctl.h
_PR_SET_PDEATHSIG = 1


def _load_libc() -> ctypes.CDLL | None:
    # Loaded once, in the parent: a `preexec_fn` runs between fork and exec, where loading a
    # library could wait on a lock another thread of the parent held at fork.
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def die_with_parent() -> bool:
    """Ask for SIGTERM when the parent exits; whether the system could promise it.

    Safe between fork and exec (a `preexec_fn`): no locks, no allocation beyond ctypes'.
    The setting survives `exec`, and is cleared in a child's own children.
    """
    if _LIBC is None:
        return False
    try:
        return bool(_LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0)
    except AttributeError:
        return False


def take_launcher_pid() -> int | None:
    """The pid of the launcher that started this process, when one did.

    Taken out of the environment, so that what this process starts (gunicorn's workers, a
    task's shell command) does not take the launcher for its own parent.
    """
    return read_whole(os.environ.pop(LAUNCHER_PID_VARIABLE, ""), 1)


def watch_parent(parent_pid: int) -> threading.Thread:
    """Stop this process once its parent is no longer `parent_pid` (a daemon thread).

    A dead parent's children are handed to init or a subreaper, so a changed `getppid()` is
    the sign; it is also right when the parent died before this was called.
    """
    every = BACKSTOP_CHECK_SECONDS if die_with_parent() else PARENT_CHECK_SECONDS
    thread = threading.Thread(target=_watch, args=(parent_pid, every), name="parent-watch", daemon=True)
    thread.start()
    return thread


def _watch(parent_pid: int, every: float) -> None:
    stop = threading.Event()
    while os.getppid() == parent_pid:
        stop.wait(every)
    log.warning("parent %s is gone; stopping", parent_pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(os.getpid(), signal.SIGTERM)
    stop.wait(ORPHAN_EXIT_SECONDS)
    os._exit(1)
