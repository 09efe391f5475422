"""`python -m bench footprint`: what the embedded default takes from a machine (docs/operations.md#what-the-relay-needs).

`python app.py` exactly as the README's first command runs it (the launcher, the embedded Redis,
gunicorn's arbiter and its web workers, the RQ worker with the clock in its threads), on a fresh
data dir:

- **memory at rest**: after a settling pause with nothing to do, the processes, RSS and PSS
  (bench/usage.py) of the launcher and each process tree it started, and of all together;
- **disk per 1,000 messages**: the owner writes `--prompts` prompts of `--chars` characters into
  `--sessions` conversations (echo answers each, so there are twice as many messages), and the
  database's size is read before and after, once the clock has checkpointed the WAL: the pages in
  use (page count less free pages) and the files on disk (`oar.db` and `oar.db-wal`);
- then memory again, with those messages in the database.

`--procfile` measures the relay as the Procfile runs it instead (`oar migrate`, then `gunicorn
wsgi:app`, `oar worker` and `oar clock` as separate commands, each its own interpreter) on the
machine's Redis (`--redis-url`, a fresh namespace; its memory is not counted: it is the machine's)
and SQLite in the fresh data dir.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from bench import report, usage
from bench.owner import Owner

PROJECT = Path(__file__).resolve().parent.parent
SETTLE_SECONDS = 10.0
# Issue #37: the embedded default at rest, summed over its processes (the Procfile way is reported).
PSS_GOAL_MB = 150
PROCESSES_GOAL = 6


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(what: str, check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {seconds:g} s")


def memory_by_role(data_dir: Path, launcher: int) -> dict[str, tuple[int, int, int]]:
    """(RSS, PSS, processes) of the launcher alone and of each child's process tree, by the names
    the launcher records in launcher.json."""
    children = json.loads((data_dir / "launcher.json").read_text())["children"]
    roles: dict[str, tuple[int, int, int]] = {}
    with contextlib.suppress(Exception):
        import psutil

        info = psutil.Process(launcher).memory_full_info()
        roles["launcher"] = (info.rss, info.pss, 1)
    for child in children:
        sample = usage.sample(child["pid"])
        roles[child["name"]] = (sample.rss_bytes, sample.pss_bytes, len(usage.tree(child["pid"])))
    return roles


def start_embedded(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(PROJECT / "app.py")], cwd=PROJECT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL)


def start_procfile(env: dict[str, str]) -> dict[str, subprocess.Popen[bytes]]:
    """The Procfile's web, worker and clock, each a command of its own as a process manager starts them."""
    commands = {
        "web": [sys.executable, "-m", "gunicorn", "wsgi:app"],
        "worker": [sys.executable, "-m", "oar", "worker"],
        "clock": [sys.executable, "-m", "oar", "clock"],
    }
    return {name: subprocess.Popen(command, cwd=PROJECT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            for name, command in commands.items()}


def memory_by_process(started: dict[str, subprocess.Popen[bytes]]) -> dict[str, tuple[int, int, int]]:
    """(RSS, PSS, processes) of each started command's process tree."""
    roles: dict[str, tuple[int, int, int]] = {}
    for name, process in started.items():
        sample = usage.sample(process.pid)
        roles[name] = (sample.rss_bytes, sample.pss_bytes, len(usage.tree(process.pid)))
    return roles


def database_size(path: Path) -> tuple[int, int, int]:
    """(bytes in the pages in use, bytes of oar.db, bytes of oar.db-wal). The WAL file keeps the
    size it once reached: the clock's checkpoints copy it back and reuse it from its start, and
    a commit checkpoints once it passes 10,000 pages (40 MB); it is not part of the growth."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        pages, free, size = (db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "freelist_count", "page_size"))
    wal = path.with_name(path.name + "-wal")
    return (pages - free) * size, path.stat().st_size, wal.stat().st_size if wal.exists() else 0


def write_messages(owner: Owner, sessions: int, prompts: int, chars: int) -> int:
    """`prompts` owner prompts spread over `sessions` new conversations; returns when echo has
    answered every one. The messages written: prompts and replies."""
    ids = [owner.call("POST", "/sessions", {"title": f"footprint {n}"})["session"]["id"] for n in range(sessions)]
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
    for number in range(prompts):
        text = f"prompt {number}: " + (words * (chars // len(words) + 1))[: max(0, chars - 12)]
        owner.call("POST", f"/sessions/{ids[number % sessions]}/messages", {"text": text})

    def answered() -> bool:
        for session_id in ids:
            messages = owner.call("GET", f"/sessions/{session_id}")["messages"]
            if any(m["role"] == "user" and m["status"] not in ("done", "failed") for m in messages) or \
                    sum(1 for m in messages if m["role"] == "assistant") < prompts // sessions:
                return False
        return True

    wait_until("echo's replies", answered, 600)
    return 2 * prompts


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench footprint", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10, help="conversations written to (default 10)")
    parser.add_argument("--prompts", type=int, default=500, help="owner prompts, each answered by echo (default 500)")
    parser.add_argument("--chars", type=int, default=500, help="characters of each prompt (default 500)")
    parser.add_argument("--procfile", action="store_true", help="measure the Procfile's separate processes instead")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the Redis of --procfile")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="oar-footprint-"))
    data_dir, port, token = folder / "var", free_port(), "oar_o_" + secrets.token_urlsafe(32)
    # The relay's own settings pass through (WEB_CONCURRENCY, OAR_WORKER_PROCESSES … to measure a
    # smaller relay); where it keeps its data and listens is the benchmark's.
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL", "OAR_NAMESPACE")}
    env.update(OAR_DATA_DIR=str(data_dir), PORT=str(port), OAR_OWNER_TOKEN=token, OAR_LOG_LEVEL="WARNING")
    url = f"http://127.0.0.1:{port}"
    if args.procfile:
        env.update(REDIS_URL=args.redis_url, OAR_NAMESPACE=f"footprint-{secrets.token_hex(4)}")
        subprocess.run([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=env, check=True, capture_output=True)
    started = start_procfile(env) if args.procfile else {"launcher": start_embedded(env)}

    def memory() -> dict[str, tuple[int, int, int]]:
        return memory_by_process(started) if args.procfile else memory_by_role(data_dir, started["launcher"].pid)

    try:
        wait_until("the relay's /healthz", lambda: requests.get(f"{url}/healthz", timeout=2).status_code == 200, 120)
        progress(f"relay up in {folder}; settling {SETTLE_SECONDS:g} s")
        time.sleep(SETTLE_SECONDS)
        at_rest = memory()
        owner = Owner(url, token)
        owner.open_to_agents()
        time.sleep(2)  # a checkpoint of the settings' writes
        before = database_size(data_dir / "oar.db")
        progress(f"writing {args.prompts} prompts of {args.chars} characters into {args.sessions} conversations")
        messages = write_messages(owner, args.sessions, args.prompts, args.chars)
        time.sleep(3)  # the clock checkpoints the WAL every second
        after = database_size(data_dir / "oar.db")
        with_messages = memory()
    finally:
        # The launcher stops on Ctrl-C as the README says; a process manager stops commands with SIGTERM.
        stop = signal.SIGTERM if args.procfile else signal.SIGINT
        for process in started.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, stop)
        for process in started.values():
            process.wait(120)
        shutil.rmtree(folder, ignore_errors=True)
    way = "the Procfile's processes (the machine's Redis not counted)" if args.procfile else "the embedded default (python app.py)"
    lines = [f"OAR Relay benchmark: footprint of {way}",
             f"{'process':<10} {'processes':>9} {'RSS at rest':>12} {'PSS at rest':>12} {'RSS after':>10} {'PSS after':>10}"]
    for role in at_rest:
        rss, pss, count = at_rest[role]
        later = with_messages.get(role, (0, 0, 0))
        lines.append(f"{role:<10} {count:>9} {usage.megabytes(rss):>12} {usage.megabytes(pss):>12} "
                     f"{usage.megabytes(later[0]):>10} {usage.megabytes(later[1]):>10}")
    lines.append(f"{'all':<10} {sum(c for _, _, c in at_rest.values()):>9} "
                 f"{usage.megabytes(sum(r for r, _, _ in at_rest.values())):>12} "
                 f"{usage.megabytes(sum(p for _, p, _ in at_rest.values())):>12} "
                 f"{usage.megabytes(sum(r for r, _, _ in with_messages.values())):>10} "
                 f"{usage.megabytes(sum(p for _, p, _ in with_messages.values())):>10}")
    per_thousand = [(b - a) * 1000 / messages for a, b in zip(before, after, strict=True)]
    lines += [
        f"database   empty relay: {before[0] / 1e6:.2f} MB in pages in use; oar.db {before[1] / 1e6:.2f} MB, "
        f"oar.db-wal {before[2] / 1e6:.2f} MB",
        f"           after {messages} messages ({args.prompts} prompts of {args.chars} characters and echo's replies): "
        f"{after[0] / 1e6:.2f} MB in use; oar.db {after[1] / 1e6:.2f} MB, oar.db-wal {after[2] / 1e6:.2f} MB",
        f"           per 1,000 messages: {per_thousand[0] / 1e6:.2f} MB in use, oar.db {per_thousand[1] / 1e6:.2f} MB",
    ]
    lines.append(at_rest_goal_line(at_rest, args.procfile))
    print("\n".join(lines), flush=True)
    return 0


def at_rest_goal_line(at_rest: dict[str, tuple[int, int, int]], procfile: bool) -> str:
    processes = sum(count for _, _, count in at_rest.values())
    pss_mb = sum(pss for _, pss, _ in at_rest.values()) / 1_048_576  # as usage.megabytes counts
    measured = f"{pss_mb:.0f} MB PSS in {processes} processes"
    if procfile:
        return report.goal_line("footprint at rest, the Procfile way", measured, "", None)
    met = pss_mb <= PSS_GOAL_MB and processes <= PROCESSES_GOAL
    return report.goal_line("footprint at rest, python app.py", measured, f"≤ {PSS_GOAL_MB} MB, ≤ {PROCESSES_GOAL}", met)
