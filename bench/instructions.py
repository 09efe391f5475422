"""`python -m bench instructions`: CPU instructions per `read_session` and `list_sessions` call,
and per call of the bare Flask app, counted by valgrind's callgrind (Debian's `valgrind`).

Requests per second on a machine shared with other jobs move by tens of percent between runs;
instruction counts do not depend on the machine's load. The relay is seeded as `python -m bench`
seeds it (1,000 sessions × 50 messages by default, the owner settings opened to agents, one
calling conversation); then, for each endpoint, a child process builds the WSGI app and makes
20 warm-up calls and then `--calls` more, straight through the app (no HTTP server: what
gunicorn adds per request is the same for both apps and not counted). It runs twice under
callgrind, with 0 and with `--calls` measured calls, and the difference divided by `--calls`
is the figure: imports, start-up and warm-up fall out. The calls' environs are built by
werkzeug's `EnvironBuilder` inside the measured part, for both apps alike.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import seed, stack

WARM_UP_CALLS = 20
ENDPOINTS = ("bare", "read_session", "list_sessions")


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="measured calls per endpoint (default 200)")
    parser.add_argument("--sessions", type=int, default=1000, help="seeded sessions (default 1000)")
    parser.add_argument("--messages", type=int, default=50, help="messages per seeded session (default 50)")
    return parser.parse_args(argv)


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def prepare(env: dict[str, str], data_dir: Path, owner_token: str) -> str:
    """Agent sessions on, no rate limits, one calling conversation: its agent token."""
    os.environ.update(env)
    from oar.core.config import from_environment
    from oar.web import create_app

    client = create_app(from_environment()).test_client()
    owner = {"Authorization": f"Bearer {owner_token}"}
    opened = client.patch(
        "/api/v1/owner/settings", headers=owner,
        json={"agent_sessions_enabled": True, "rate_calls_per_minute": 0, "rate_writes_per_minute": 0},
    )
    created = client.post("/api/v1/owner/sessions", headers=owner, json={"title": "bench"})
    if opened.status_code != 200 or created.status_code != 201:
        raise RuntimeError(f"owner API refused: {opened.status_code} {created.status_code}")
    return str(created.get_json()["token"])


def child(plan_file: Path, endpoint: str, calls: int) -> None:
    """In the measured process: `WARM_UP_CALLS` + `calls` calls to `endpoint` through the WSGI app."""
    plan = json.loads(plan_file.read_text())
    os.environ.update(plan["env"])
    call = caller(plan, endpoint)
    for _ in range(WARM_UP_CALLS + calls):
        call()


def caller(plan: dict[str, Any], endpoint: str) -> Callable[[], None]:
    """One call to `endpoint` through its WSGI app, built in this process from `plan` (the
    relay's environment already in `os.environ`): the environ, the call, the answer read."""
    from werkzeug.test import EnvironBuilder

    if endpoint == "bare":
        from bench.bare_app import app
    else:
        from oar.core.config import from_environment
        from oar.web import create_app

        app = create_app(from_environment())
    rng = random.Random(0)
    headers = [("Authorization", f"Bearer {plan['token']}"), ("Content-Type", "application/json")]

    def call() -> None:
        body: dict[str, Any] = {"action": "list_sessions" if endpoint == "list_sessions" else "read_session", "relay": "this"}
        if body["action"] == "read_session":
            body["session"] = rng.choice(plan["sessions"])
        data = json.dumps(body).encode()
        environ = EnvironBuilder(path="/api/v1/relay_tool", method="POST", data=data, headers=headers).get_environ()
        environ["wsgi.input"] = io.BytesIO(data)
        statuses: list[str] = []

        def start_response(status: str, _headers: Any, _exc: Any = None) -> Any:
            statuses.append(status)

        answer = app(environ, start_response)
        b"".join(answer)
        if not statuses[0].startswith("200"):
            raise RuntimeError(f"{endpoint} answered {statuses[0]}")

    return call


@contextlib.contextmanager
def seeded_plan(sessions: int, messages: int) -> Iterator[Path]:
    """A relay seeded as `python -m bench` seeds it, and the plan its measured children read
    (the relay's environment, the calling conversation's token, the sessions); all removed after."""
    with stack.prepared() as ready, tempfile.TemporaryDirectory(prefix="oar-bench-plan-") as scratch:
        progress(f"seeding {sessions:,} sessions × {messages} messages")
        seeded = seed.seed(ready.data_dir, sessions, messages)
        token = prepare(ready.env, ready.data_dir, ready.owner_token)
        plan_file = Path(scratch) / "plan.json"
        plan_file.write_text(json.dumps({"env": ready.env, "token": token, "sessions": seeded.session_ids}))
        yield plan_file


def instructions(plan_file: Path, endpoint: str, calls: int, out_dir: Path) -> int:
    out = out_dir / f"callgrind-{endpoint}-{calls}.out"
    command = [
        "valgrind", "--tool=callgrind", "--cache-sim=no", f"--callgrind-out-file={out}",
        sys.executable, "-m", "bench.instructions", "--child", str(plan_file), endpoint, str(calls),
    ]
    # A fixed hash seed: the same dict and set layouts in both runs.
    done = subprocess.run(command, cwd=stack.PROJECT, env={**os.environ, "PYTHONHASHSEED": "0"},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind run failed:\n{done.stderr[-2000:]}")
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[-1].strip())
    raise RuntimeError(f"no instruction count in callgrind's output:\n{done.stderr[-2000:]}")


def run(argv: Sequence[str]) -> int:
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), argv[2], int(argv[3]))
        return 0
    args = parse_arguments(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    with seeded_plan(args.sessions, args.messages) as plan_file:
        per_call: dict[str, float] = {}
        for endpoint in ENDPOINTS:
            progress(f"{endpoint}: callgrind with 0 and {args.calls} calls (about a minute)")
            base = instructions(plan_file, endpoint, 0, plan_file.parent)
            measured = instructions(plan_file, endpoint, args.calls, plan_file.parent)
            per_call[endpoint] = (measured - base) / args.calls
    print("OAR Relay benchmark: instructions per call (callgrind; through the WSGI app, no HTTP server)")
    print(f"database     SQLite, {args.sessions:,} sessions × {args.messages} messages; {args.calls} calls each after {WARM_UP_CALLS} warm-up calls")
    for endpoint in ENDPOINTS:
        ratio = per_call["bare"] / per_call[endpoint]
        print(f"{endpoint:<16}{per_call[endpoint]:>14,.0f} instructions per call   bare ÷ this {ratio:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
