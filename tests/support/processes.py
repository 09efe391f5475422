"""A child process of the tests in a process group of its own, stopped or killed with its whole tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

PROJECT = Path(__file__).resolve().parent.parent.parent

# What this test process has started since the current test began (relay processes, in-thread
# webs, private Redis servers): the conftest's guard fails a test not marked `stack` that started
# any, so that `-m "not stack"` stays the in-process part.
STARTED: list[str] = []


class ManagedProcess:
    """`python <args>` run from the project's folder, leading a process group of its own.

    Its output goes to `log` (appended), or to a pipe when `pipe_stdout` is set. A group of its
    own lets a test kill it as a crash would (every process at once) without touching pytest;
    the tree is also walked, because RQ work horses lead groups of their own.
    """

    def __init__(
        self, name: str, args: Sequence[str], env: Mapping[str, str], *, log: Path, pipe_stdout: bool = False,
    ) -> None:
        STARTED.append(f"process {name!r}")
        self.name = name
        self.log_path = log
        self._log: IO[bytes] = open(log, "ab")  # closed when the process is reaped
        self.popen: subprocess.Popen[Any] = subprocess.Popen(
            [sys.executable, *args], cwd=PROJECT, env=dict(env),
            stdout=subprocess.PIPE if pipe_stdout else self._log,
            stderr=self._log if pipe_stdout else subprocess.STDOUT,
            start_new_session=True, text=pipe_stdout,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log(self, tail: int = 3000) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def tree(self) -> list[psutil.Process]:
        """The process and every descendant still alive."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        return []

    def kill(self) -> None:
        """SIGKILL the group and the tree at once, as a crash or the OOM killer would."""
        tree = self.tree()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for process in tree:  # anything that left the group
            with contextlib.suppress(psutil.Error):
                process.kill()
        self._reap(tree, timeout=10)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM and wait up to `timeout`; then kill whatever of the tree is left."""
        tree = self.tree()
        if self.running():
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        for leftover in tree[1:]:
            with contextlib.suppress(psutil.Error):
                if leftover.is_running() and leftover.status() != psutil.STATUS_ZOMBIE:
                    leftover.kill()
        self._reap(tree, timeout=10)

    def _reap(self, tree: list[psutil.Process], timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)
        wait_until_dead(tree[1:], timeout)
        self._log.close()


def alive(process: psutil.Process) -> bool:
    """Whether `process` still runs: neither gone nor a zombie."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_dead(processes: list[psutil.Process], timeout: float) -> None:
    """Wait up to `timeout` until none of `processes` runs.

    Unlike `psutil.wait_procs` it does not wait for a zombie to be reaped: processes that are not
    our children (a worker's work horses, a daemonised Redis) are reaped by init in its own time,
    and a zombie is dead already (its memory, files and sockets freed).
    """
    deadline = time.monotonic() + timeout
    while any(alive(process) for process in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
