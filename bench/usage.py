"""CPU time, wake-ups and memory of the relay's processes, read with psutil.

A role (web, worker, clock, redis) is a process and all its descendants: gunicorn's
workers and RQ's pool workers are children of the processes `bench.stack` starts. CPU is
user + system time; wake-ups are voluntary context switches summed over every thread (a
thread that sleeps with a timeout and wakes up counts one each time), read from
`/proc/<pid>/task/*/status`, so that a loop waking many times a second shows even when each
wake costs little CPU. Memory is both RSS, which counts a page shared by forked processes
once in each of them, and PSS, which divides it among them: what the relay takes from the
machine (its worker processes share the modules imported before the fork).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Sample:
    cpu_seconds: float
    wakeups: int
    rss_bytes: int
    pss_bytes: int


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wakeups(pid: int) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total


def sample(pid: int) -> Sample:
    cpu = 0.0
    wakeups = rss = pss = 0
    for process in tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            cpu += times.user + times.system
            memory = process.memory_full_info()
            rss += memory.rss
            pss += memory.pss
            wakeups += _wakeups(process.pid)
    return Sample(cpu, wakeups, rss, pss)


def sample_all(pids: dict[str, int]) -> dict[str, Sample]:
    return {role: sample(pid) for role, pid in pids.items()}


def memory_total(pids: dict[str, int]) -> tuple[int, int]:
    """RSS and PSS of all the processes."""
    samples = sample_all(pids).values()
    return sum(sample.rss_bytes for sample in samples), sum(sample.pss_bytes for sample in samples)


def megabytes(count: int) -> str:
    return f"{count / 1_048_576:,.0f} MB"
