"""The embedded relay's children forked from the launcher, which has loaded the code once: the web
(gunicorn's arbiter, which forks its workers) and the worker share the launcher's pages of the
modules they import, where each had loaded its own copy when started as a program
(docs/operations.md#what-the-relay-needs).

A `ForkedChild` answers as much of `subprocess.Popen` as the launcher uses (`pid`, `returncode`,
`poll`, `wait`, `send_signal`), so that it starts, watches and stops forked children and the
embedded redis-server (a program) the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from oar.core import jobs, lifeline
from oar.core.collector import freeze_loaded_objects
from oar.core.db import database

PROJECT = Path(__file__).resolve().parents[2]

# What the web and the worker import at their start, imported by the launcher before it forks
# them: gunicorn's threaded worker, the worker, the clock and every job's module (which RQ
# imports by name; `oar` never imports `workers` by statement), and every module of `oar.web`
# (create_app imports its blueprints when it runs).
SHARED_MODULES = ("gunicorn.arbiter", "gunicorn.app.base", "gunicorn.workers.gthread",
                  "oar.engine.worker", "oar.engine.clock", "oar.engine.embedded_web",
                  *(name.rpartition(".")[0] for name in jobs.EVERY_JOB))
# Imported by the first process that needs them, never before a fork: /metrics' module brings
# prometheus-client, which only a relay with metrics on loads.
NOT_SHARED = frozenset({"oar.web.metrics_page"})


def load_shared_code() -> None:
    """Import what the children import, then move every object made so far out of the
    collector's way: a collection in a child would otherwise touch (and so copy) the pages
    of objects it shares with the launcher."""
    web = importlib.import_module("oar.web")
    web_modules = [f"oar.web.{module.name}" for module in pkgutil.iter_modules(web.__path__)]
    for name in (*SHARED_MODULES, *web_modules):
        if name not in NOT_SHARED:
            importlib.import_module(name)
    freeze_loaded_objects()


class ForkedChild:
    """A child process running `run` in a fork of this one, leading a process group of its own."""

    def __init__(self, run: Callable[[], int | None], close: tuple[int, ...] = ()) -> None:
        """`close`: descriptors the child must not hold (the data directory's lock)."""
        # A connection of the launcher must not be used by a child: give them back before the fork
        # (SQLite's pool also forgets inherited ones in the child; PostgreSQL's would share sockets).
        if not database.is_closed():
            database.close()
        with contextlib.suppress(AttributeError):
            database.obj.close_all()
        sys.stdout.flush()
        sys.stderr.flush()
        self.returncode: int | None = None
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; it never returns from here
            _run_child(run, close)
        self.pid = pid

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)


def _run_child(run: Callable[[], int | None], close: tuple[int, ...]) -> None:
    """In the forked child: a session of its own (stopping reaches all of it), SIGTERM when the
    launcher dies, the default signal handlers (what runs here installs its own), the project's
    folder as a program started by the launcher had; then `run`, and exit with its status
    without returning into the launcher's code."""
    code = 1
    try:
        for descriptor in close:
            os.close(descriptor)
        os.setsid()
        lifeline.die_with_parent()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        os.chdir(PROJECT)
        if str(PROJECT) not in sys.path:
            sys.path.insert(0, str(PROJECT))
        code = run() or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - whatever ends the child is reported, then it exits
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
