"""What the relay's processes count for `/metrics` (docs/operations.md#watching-it).

The figures that happen in a process are counted there, as they happen: requests, agent calls,
turns that ended, schedule firings, notification sends, answers that the database was busy,
waits open now, the process's memory. prometheus-client's multiprocess mode keeps them in files
of the process's own (`oar.core.metric_files`), and the web process that answers a scrape adds
them up. What is a state rather than an event — turns queued, queue depths, held events, lags,
paired relays — is read from the database and Redis at scrape time instead
(`oar.owner.gauges`): one indexed count then costs less than keeping a gauge right in every
process that changes it, and it is right after a crash or a flushed Redis.

Off unless `OAR_METRICS=on`: then every function here returns at its first line, and
prometheus-client is never imported. Labels are route templates, action names, outcome codes,
statuses and process kinds only: never a title, a prompt, a token or a URL.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oar.core import defaults
from oar.core.config import Config

# Buckets of request and agent call durations, in seconds: from a read (a millisecond) to the
# longest wait (an hour).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 3600)
# Buckets of turn durations, in seconds: an echo turn to the longest turn.
TURN_BUCKETS = (0.05, 0.25, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)


class _Figures:
    """The process's counters, histograms and gauges; made once metrics are on."""

    def __init__(self, kind: str) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.kind = kind
        self.requests = Histogram(
            "oar_http_request_duration_seconds", "HTTP requests answered by the web, by route template, method and status",
            ["route", "method", "status"], buckets=CALL_BUCKETS, registry=None,
        )
        self.calls = Histogram(
            "oar_agent_call_duration_seconds", "relay_tool calls, by action, outcome (ok or the error code) and the way they came",
            ["action", "outcome", "via"], buckets=CALL_BUCKETS, registry=None,
        )
        self.turns = Histogram(
            "oar_turn_duration_seconds", "Turns this relay's workers ran, by outcome, from their start to their outcome",
            ["outcome"], buckets=TURN_BUCKETS, registry=None,
        )
        self.firings = Counter(
            "oar_schedule_firings", "Schedules' due times handled, by outcome (fired, skipped, held, ended)",
            ["outcome"], registry=None,
        )
        self.notifications = Counter(
            "oar_notification_sends", "Notifications handed to a channel, by channel type and outcome (sent, retry, failed)",
            ["channel_type", "outcome"], registry=None,
        )
        self.busy = Counter(
            "oar_database_busy_answers", "Answers that the database was busy (503 REMOTE_RELAY_DATABASE_BUSY), by process kind",
            ["process"], registry=None,
        )
        self.waits = Gauge(
            "oar_open_waits", "Waits open now (a call waiting for a reply or a card, a turn waiting for an answer), by process kind",
            ["process"], multiprocess_mode="livesum", registry=None,
        )
        self.memory = Gauge(
            "oar_process_resident_memory_bytes", "Resident memory of the live processes of each kind, summed",
            ["process"], multiprocess_mode="livesum", registry=None,
        )
        self.processes = Gauge(
            "oar_processes", "Live relay processes of each kind on this machine", ["process"],
            multiprocess_mode="livesum", registry=None,
        )
        self._memory_read_at = 0.0
        self._process: Any = None

    def started(self) -> None:
        self.processes.labels(self.kind).set(1)
        self.waits.labels(self.kind).set(0)
        self.note_memory(force=True)

    def note_memory(self, force: bool = False) -> None:
        now = time.monotonic()
        # At most every METRICS_MEMORY_EVERY_SECONDS, when the process does something (a request, a
        # job, a clock tick): an idle process's figure is from its last work.
        if not force and now - self._memory_read_at < defaults.METRICS_MEMORY_EVERY_SECONDS:
            return
        self._memory_read_at = now
        import psutil

        if self._process is None or self._process.pid != os.getpid():
            self._process = psutil.Process()
        self.memory.labels(self.kind).set(self._process.memory_info().rss)


_figures: _Figures | None = None
_NOTHING = contextlib.nullcontext()


def start(kind: str, config: Config) -> None:
    """Count in this process, a `kind` (web, worker, clock), when metrics are on; once per process.

    Files go to `config.metrics_folder`, under this process's name (`metric_files.identity`);
    a fork is seen at the next count and goes on in files of its own."""
    global _figures
    if not config.metrics_on or _figures is not None:
        return
    from prometheus_client import values

    from oar.core import metric_files

    folder = config.metrics_folder
    metric_files.prepare(folder)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    metric_files.set_kind(kind)
    # Files named after the process kind, pid and start time rather than the pid alone
    # (prometheus-client's default): see metric_files.
    values.ValueClass = values.MultiProcessValue(process_identifier=metric_files.identity)
    metric_files.sweep_live(folder)
    _figures = _Figures(kind)
    _figures.started()


def started_after_fork() -> None:
    """In a process forked from one that counts (an RQ worker from its pool): its own gauges, and
    those of a process it replaces leave the sums."""
    if _figures is None:
        return
    from oar.core import metric_files

    metric_files.sweep_live(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    _figures.started()


def on() -> bool:
    return _figures is not None


def request_answered(route: str, method: str, status: int, seconds: float) -> None:
    if _figures is None:
        return
    _figures.requests.labels(route, method, str(status)).observe(seconds)
    _figures.note_memory()


def call_answered(action: str, outcome: str, via: str, seconds: float) -> None:
    if _figures is None:
        return
    _figures.calls.labels(action, outcome, via).observe(seconds)


def turn_ended(outcome: str, seconds: float) -> None:
    if _figures is None:
        return
    _figures.turns.labels(outcome).observe(max(0.0, seconds))


def schedule_handled(outcome: str) -> None:
    if _figures is None:
        return
    _figures.firings.labels(outcome).inc()


def notification_handed(channel_type: str, outcome: str) -> None:
    if _figures is None:
        return
    _figures.notifications.labels(channel_type, outcome).inc()


def database_busy() -> None:
    if _figures is None:
        return
    _figures.busy.labels(_figures.kind).inc()


def worked() -> None:
    """The process did some work (a job, a clock tick): its memory figure, if it is due."""
    if _figures is None:
        return
    _figures.note_memory()


def open_wait() -> contextlib.AbstractContextManager[None]:
    """Counts one open wait for the block."""
    if _figures is None:
        return _NOTHING
    return _counted_wait(_figures)


@contextlib.contextmanager
def _counted_wait(figures: _Figures) -> Iterator[None]:
    gauge = figures.waits.labels(figures.kind)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()
