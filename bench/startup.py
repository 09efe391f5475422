"""`python -m bench startup`: how long `python app.py` takes to be healthy (docs/benchmarks.md#startup-python--m-bench-startup).

Each run starts the embedded default on a fresh data dir (migrations, the owner token, the embedded
Redis, the forks of the web and the worker) and polls `/healthz` every 20 ms from the moment the
command is started until it answers 200; then stops it and starts it again on the same data dir (a
restart: nothing to migrate). The goal (issue #37): healthy within 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from bench import report
from bench.footprint import free_port

PROJECT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 2.0
POLL_SECONDS = 0.02
GIVE_UP_SECONDS = 120.0


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def time_to_healthy(data_dir: Path, port: int, token: str) -> float:
    """Seconds from starting `python app.py` to its first 200 on /healthz; it is stopped after."""
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL", "OAR_NAMESPACE")}
    env.update(OAR_DATA_DIR=str(data_dir), PORT=str(port), OAR_OWNER_TOKEN=token, OAR_LOG_LEVEL="WARNING")
    url = f"http://127.0.0.1:{port}/healthz"
    started = time.monotonic()
    launcher = subprocess.Popen([sys.executable, str(PROJECT / "app.py")], cwd=PROJECT, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(url, timeout=1).status_code == 200:
                    return time.monotonic() - started
            if launcher.poll() is not None:
                raise RuntimeError(f"app.py exited with {launcher.returncode} before it was healthy")
            if time.monotonic() - started > GIVE_UP_SECONDS:
                raise RuntimeError(f"app.py was not healthy within {GIVE_UP_SECONDS:g} s")
            time.sleep(POLL_SECONDS)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGINT)
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(10)


def line(label: str, seconds: list[float]) -> str:
    worst = max(seconds)
    verdict = "✓" if worst <= GOAL_SECONDS else "✗"
    return (f"{label:<30} median {statistics.median(seconds):5.2f} s   max {worst:5.2f} s   "
            f"goal ≤ {GOAL_SECONDS:g} s {verdict}   ({', '.join(f'{s:.2f}' for s in seconds)})")


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh data dirs, each started twice (default 5)")
    args = parser.parse_args(argv)
    first: list[float] = []
    again: list[float] = []
    for number in range(1, args.runs + 1):
        folder = Path(tempfile.mkdtemp(prefix="oar-startup-"))
        try:
            token = "oar_o_" + secrets.token_urlsafe(32)
            first.append(time_to_healthy(folder / "var", free_port(), token))
            again.append(time_to_healthy(folder / "var", free_port(), token))
            progress(f"run {number}/{args.runs}: fresh data dir {first[-1]:.2f} s, restart {again[-1]:.2f} s")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print("\n".join([
        "OAR Relay benchmark: python app.py until /healthz answers 200",
        f"machine      {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} after the runs",
        line(f"fresh data dir ({args.runs} runs)", first),
        line(f"restart ({args.runs} runs)", again),
        report.goal_line("healthy after python app.py (slowest run)", f"{max(first):.2f} s",
                         f"≤ {GOAL_SECONDS:g} s", max(first) <= GOAL_SECONDS),
    ]), flush=True)
    return 0
