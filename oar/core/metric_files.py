"""The folder where a machine's relay processes write their figures for `/metrics` (docs/operations.md#watching-it).

prometheus-client's multiprocess mode: every process writes its counters, histograms and
gauges to files of its own in one folder (`PROMETHEUS_MULTIPROC_DIR`), and the web process
that answers `/metrics` reads them all. The web's gunicorn processes, the RQ workers and the
clock of one machine share the folder; each file is named after its process by
`identity()` — the process kind, pid and start time — so that a pid the system gives again
to a later process never continues a file that was not its own.

Nothing here imports prometheus-client: the arbiter of gunicorn and a relay without metrics
pay nothing for it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import psutil

# A file of the multiprocess folder: `<type>_<identity>.db`, `<type>` holding `gauge_<mode>`
# for gauges; the identity is `<kind>-<pid>-<start>`.
_FILE = re.compile(r"(?P<type>[a-z]+(?:_[a-z]+)?)_(?P<kind>[a-z]+)-(?P<pid>[0-9]+)-(?P<start>[0-9]+)\.db")
# Gauges kept only while their process runs (prometheus-client's `live…` modes).
_LIVE_MODES = ("gauge_livesum", "gauge_liveall", "gauge_livemin", "gauge_livemax", "gauge_livemostrecent")

_kind = "web"
_known: tuple[int, str] = (-1, "")


def set_kind(kind: str) -> None:
    """What this process is (web, worker, clock): the first part of its files' names."""
    global _kind, _known
    _kind, _known = kind, (-1, "")


def identity() -> str:
    """This process's name in the folder, worked out again after a fork (asked at every count,
    so it costs a call of os.getpid once known)."""
    global _known
    pid = os.getpid()
    if _known[0] != pid:
        _known = (pid, f"{_kind}-{pid}-{started_at(pid)}")
    return _known[1]


def started_at(pid: int) -> int:
    """When the process started, in hundredths of a second since the epoch (0 when it is gone)."""
    try:
        return round(psutil.Process(pid).create_time() * 100)
    except (psutil.Error, OSError):
        return 0


def _gone(pid: str, start: str) -> bool:
    return started_at(int(pid)) != int(start)


def sweep_kind(folder: Path, kind: str) -> int:
    """Remove every file of the processes of `kind` that are gone: what the previous run of that
    kind counted. Called once as the kind starts on this machine (gunicorn's arbiter, the worker
    pool, the clock), so that its totals start again with it; the other kinds' files are left as
    they are. Returns how many files went."""
    return _remove(folder, lambda match: match["kind"] == kind)


def sweep_live(folder: Path) -> int:
    """Remove the live gauges (waits open, memory, processes) of any process that is gone, so that
    a replaced process's figures do not stay summed in; its counters stay until its kind starts
    again, so totals never go down while the kind runs."""
    return _remove(folder, lambda match: match["type"] in _LIVE_MODES)


def _remove(folder: Path, chosen: Callable[[re.Match[str]], bool]) -> int:
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for path in folder.iterdir():
            match = _FILE.fullmatch(path.name)
            if match is None or not chosen(match) or not _gone(match["pid"], match["start"]):
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed


def prepare(folder: Path) -> None:
    """The folder, made if need be, readable by the relay's user only."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
