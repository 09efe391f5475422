"""One launcher per data directory, and nothing left running from the one before.

`launcher.lock` in the data directory is locked (`flock`) for as long as a launcher runs, and
holds its pid: the kernel drops the lock when the process dies, however it dies, so a held
lock always means a live launcher. `launcher.json` lists the children the launcher started
(pid and start time, so that a pid the system gave to another program since is never
touched) and folders of its own. A new launcher that gets the lock stops whatever of that
list still runs before it starts anything (docs/operations.md#when-the-launcher-dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import IO, Any

import psutil

log = logging.getLogger("oar.launcher")

LOCK_FILE = "launcher.lock"
RECORD_FILE = "launcher.json"
# How long a previous run's processes get to stop on SIGTERM before SIGKILL.
LEFTOVER_STOP_SECONDS = 15.0


def _running(process: psutil.Process) -> bool:
    # A zombie holds no port and no file; whoever adopted it reaps it in its own time.
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wait_gone(processes: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Until none of `processes` runs, for at most `seconds`; those still running."""
    deadline = time.monotonic() + seconds
    alive = [p for p in processes if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _running(p)]
    return alive


class AnotherLauncher(Exception):
    """A launcher still runs on this data directory."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(pid)
        self.pid = pid


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or raise `AnotherLauncher` with the holder's pid."""
        lock = open(self.data_dir / LOCK_FILE, "a+")  # held until release()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()
            lock.close()
            raise AnotherLauncher(int(holder) if holder.isdigit() else None) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock

    def stop_leftovers(self) -> list[str]:
        """Stop what the previous launcher's record names and is still running; what it stopped.

        Each is sent SIGTERM (and SIGCONT, in case it is stopped), then SIGKILL if it is still
        there after `LEFTOVER_STOP_SECONDS`; their own children (gunicorn's workers, the RQ
        pool's workers) with them.
        """
        record = self._read()
        for folder in record.get("folders", []):
            shutil.rmtree(folder, ignore_errors=True)
        found: list[psutil.Process] = []
        for entry in record.get("children", []):
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(entry["pid"])
                if abs(process.create_time() - entry["started"]) < 0.01:
                    found.extend([process, *process.children(recursive=True)])
        stopped = []
        for process in found:
            with contextlib.suppress(psutil.Error):
                stopped.append(f"{process.pid} ({' '.join(process.cmdline()[:4])})")
                process.send_signal(signal.SIGTERM)
                process.send_signal(signal.SIGCONT)
        alive = _wait_gone(found, LEFTOVER_STOP_SECONDS)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        _wait_gone(alive, 5.0)
        return stopped

    def record(self, children: list[tuple[str, int]], folders: list[Path]) -> None:
        """Write the list of what this launcher started (replacing it whole)."""
        entries = []
        for name, pid in children:
            with contextlib.suppress(psutil.Error):
                entries.append({"name": name, "pid": pid, "started": psutil.Process(pid).create_time()})
        path = self.data_dir / RECORD_FILE
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps({"launcher": os.getpid(), "children": entries, "folders": [str(f) for f in folders]}))
        partial.replace(path)

    def fileno(self) -> int | None:
        """The held lock's file descriptor: a child forked from the launcher closes its copy, so that
        the lock is free once the launcher is gone, whatever its children still do."""
        return self._lock.fileno() if self._lock is not None else None

    def release(self) -> None:
        """After a clean stop: nothing is left to stop, and the lock is free."""
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / RECORD_FILE).unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _read(self) -> dict[str, Any]:
        try:
            record = json.loads((self.data_dir / RECORD_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}
