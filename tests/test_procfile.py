"""The Procfile way (docs/operations.md#running-the-relay, docs/operations.md#durability-and-recovery): `oar migrate`, a bare `gunicorn wsgi:app`,
`oar worker` and `oar clock` as separate processes on the machine's Redis and PostgreSQL.

Skipped (with the reason) only when PostgreSQL or Redis at 127.0.0.1 do not answer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import requests

from oar.core.config import Config
from oar.core.db import POSTGRES_POOL
from tests.support.clients import Agent, Owner
from tests.support.relays import WEB, RelayStack, make_config, relay_environment
from tests.support.servers import (
    create_postgres_database,
    drop_postgres_database,
    free_port,
    postgres_database,
    postgres_unreachable,
)

pytestmark = pytest.mark.stack

POSTGRES_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_SERVER = "redis://127.0.0.1:6379/0"
FAST_TIMES = {
    "TURN_HEARTBEAT_SECONDS": "0.5",
    "TURN_STALE_SECONDS": "3",
    "RECONCILE_SECONDS": "0.5",
    "STOP_POLL_SECONDS": "0.5",
}
CONCURRENT_SENDS = 100
# gunicorn.conf.py's web workers on this machine, the worker processes and the clock.
PROCESSES_USING_THE_DATABASE = min(4, (os.cpu_count() or 1) * 2 + 1) + Config().worker_processes + 1
# Each conversation sends 4 prompts and waits on them at once: the most waits one conversation may
# hold (docs/limits.md#waits-at-once), and under the loop limit of 30 (docs/rules.md#loop-protection).
SENDERS = 25
# The worker processes run up to 64 turns at once by default (OAR_WORKER_PROCESSES ×
# OAR_WORKER_THREADS): 100 turns of 3 s take about two rounds, so most sends come back done
# within wait_seconds.
TURN_SLEEP = "3"


def servers_reachable() -> str | None:
    """None when both servers answer, else why not."""
    import redis

    try:
        redis.Redis.from_url(REDIS_SERVER, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        return f"Redis at {REDIS_SERVER} does not answer: {error}"
    return postgres_unreachable(POSTGRES_SERVER)


@pytest.fixture(scope="module")
def procfile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    missing = servers_reachable()
    if missing:
        pytest.skip(missing)
    import redis

    database_url = create_postgres_database(POSTGRES_SERVER)
    data_dir = tmp_path_factory.mktemp("procfile")
    config = make_config(data_dir, REDIS_SERVER, database_url, name="procfile", port=free_port(), times=FAST_TIMES)
    # The machine's environment without any relay setting, plus the relay's.
    base = {key: value for key, value in os.environ.items() if not key.startswith("OAR_")}
    base.pop("WEB_CONCURRENCY", None)
    stack = RelayStack(config, FAST_TIMES, logs=data_dir, env=relay_environment(config, FAST_TIMES, base))
    try:
        migrate = stack.migrate()
        assert migrate.stdout.startswith("applied ") and "0001_initial" in migrate.stdout, migrate.stdout
        # Bare, as in the Procfile: gunicorn finds ./gunicorn.conf.py by itself.
        stack.start(WEB, "-m", "gunicorn", "wsgi:app")
        stack.start_worker(2)
        stack.start_clock()
        stack.wait_until_healthy(90)
        yield stack
    finally:
        stack.stop()
        connection = redis.Redis.from_url(REDIS_SERVER)
        # The relay's own keys, and RQ's for its queue (rq:queue:<namespace>, rq:wip:<namespace>, …).
        namespace = config.namespace
        keys = [key for pattern in (f"{namespace}*", f"rq:*:{namespace}*") for key in connection.scan_iter(match=pattern, count=1000)]
        for start in range(0, len(keys), 500):
            connection.delete(*keys[start : start + 500])
        drop_postgres_database(database_url)


@pytest.fixture(scope="module")
def owner(procfile: RelayStack) -> Owner:
    owner = Owner(procfile.url, procfile.env["OAR_OWNER_TOKEN"])
    owner.open_for_agents()
    return owner


def conversation(owner: Owner, title: str) -> Agent:
    return owner.conversation(title, approvals=("create_sessions",))


def test_web_uses_gunicorn_conf_py_and_answers_health(procfile: RelayStack) -> None:
    health = requests.get(f"{procfile.url}/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"ok": True, "version": health.json()["version"], "relay": "procfile"}
    # gunicorn.conf.py asks for threaded workers with read deadlines; a bare `gunicorn wsgi:app` read it.
    arbiter = psutil.Process(procfile.parts[WEB].pid)
    assert len(arbiter.children()) >= 1
    assert "Using worker: oar.web.request_deadlines.DeadlineWorker" in procfile.log(WEB)


def test_create_send_and_wait_work(procfile: RelayStack, owner: Owner) -> None:
    desk = conversation(owner, "desk")
    created = desk.ok("create_session", relay="this", text="hello postgres", wait_seconds=60)
    assert created["status"] == "done", created
    assert created["reply"]["text"] == "echo: hello postgres"
    queued = desk.ok("send", relay="this", session=created["session"], text="!sleep 0.5\nsecond", wait_seconds=0)
    assert queued["status"] in ("queued", "running")
    done = desk.ok("wait", relay="this", session=created["session"], message_id=queued["message_id"], wait_seconds=60)
    assert done["status"] == "done" and done["reply"]["text"] == "echo: second", done


def test_many_concurrent_long_waits_do_not_block_other_requests(procfile: RelayStack, owner: Owner) -> None:
    senders = [conversation(owner, f"sender {n}") for n in range(SENDERS)]
    targets = [owner.post("/api/v1/owner/sessions", {"title": f"target {n}"})["session"]["id"] for n in range(CONCURRENT_SENDS)]
    outstanding = 0
    lock = threading.Lock()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    finished = threading.Event()

    def send_and_wait(number: int) -> None:
        nonlocal outstanding
        sender = senders[number % SENDERS]
        agent = Agent(procfile.url, sender.token, sender.session_id)  # a connection pool per thread
        target = targets[number]
        try:
            body = agent.ok("send", relay="this", session=target, text=f"!sleep {TURN_SLEEP}\nprompt {number}", wait_seconds=10)
            deadline = time.monotonic() + 300
            while body["status"] in ("queued", "running") and time.monotonic() < deadline:
                body = agent.ok("wait", relay="this", session=target, message_id=body["message_id"], wait_seconds=30)
            results[number] = body
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(f"{number}: {type(error).__name__}: {error}")
        finally:
            with lock:
                outstanding -= 1

    probes: list[tuple[int, float, int, int]] = []  # (outstanding, seconds, healthz status, list status)
    connections: list[int] = []  # the relay's PostgreSQL connections, as the server counts them

    def probe() -> None:
        lister = Agent(procfile.url, senders[0].token, senders[0].session_id)
        counter = postgres_database(procfile.env["DATABASE_URL"])
        while not finished.is_set():
            connections.append(
                counter.execute_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()[0]
            )
            with lock:
                waiting = outstanding
            started = time.monotonic()
            try:
                health = requests.get(f"{procfile.url}/healthz", timeout=30).status_code
                listed, _body = lister.call("list_sessions", relay="this", scope="active", limit=5)
            except requests.RequestException as error:
                errors.append(f"probe: {type(error).__name__}: {error}")
                health = listed = 0
            probes.append((waiting, time.monotonic() - started, health, listed))
            finished.wait(0.25)
        counter.close()

    threads = [threading.Thread(target=send_and_wait, args=(n,), daemon=True) for n in range(CONCURRENT_SENDS)]
    outstanding = len(threads)
    prober = threading.Thread(target=probe, daemon=True)
    began = time.monotonic()
    for thread in threads:
        thread.start()
    prober.start()
    for thread in threads:
        thread.join(timeout=400)
    finished.set()
    elapsed = time.monotonic() - began
    prober.join(timeout=60)

    assert not errors, errors[:5]
    assert len(results) == CONCURRENT_SENDS
    not_done = {n: r for n, r in results.items() if r["status"] != "done"}
    assert not not_done, list(not_done.items())[:3]
    assert all(results[n]["reply"]["text"] == f"echo: prompt {n}" for n in results)
    assert probes and all(health == 200 and listed == 200 for _, _, health, listed in probes), probes
    busy_probes = [seconds for waiting, seconds, _, _ in probes if waiting >= CONCURRENT_SENDS // 2]
    assert busy_probes, f"no probe ran while at least {CONCURRENT_SENDS // 2} waits were held: {probes[:10]}"
    # Each process shares a few pooled connections among its threads (oar.db.POSTGRES_POOL):
    # far fewer than the waits and turns in flight, and under PostgreSQL's default limit of 100.
    assert max(connections) <= PROCESSES_USING_THE_DATABASE * POSTGRES_POOL["max_connections"], connections
    print(
        f"\npeak PostgreSQL connections {max(connections)}; {CONCURRENT_SENDS} sends of !sleep {TURN_SLEEP} done in {elapsed:.1f} s; {len(probes)} probes (healthz + list_sessions), {len(busy_probes)} while ≥{CONCURRENT_SENDS // 2} waits "
        f"were held; slowest {max(s for _, s, _, _ in probes):.3f} s, slowest while busy {max(busy_probes):.3f} s"
    )
