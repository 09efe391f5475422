"""One relay on two nodes (docs/operations.md#several-nodes), run as the Procfile runs each: its own
`oar migrate`, gunicorn web, worker and clock, and its own data directory, sharing nothing but
one PostgreSQL database and one Redis. Everything a call can reach works through either node,
driven through both alternately, and a node that dies loses nothing the other needs.

PostgreSQL only: SQLite is one machine's file, so a relay on SQLite has one node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psutil
import pytest
import requests

from oar.core.timeutil import utcnow
from tests.support.clients import Agent, Owner, decide_while_waiting, poll
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, WEB, WORKER, RelayStack, make_config, relay_environment
from tests.support.servers import create_postgres_database, drop_postgres_database, free_port

pytestmark = pytest.mark.stack

TIMES = {**FAST_TIMES, "ALIVE_SECONDS": "0.2", "ALIVE_STALE_SECONDS": "2"}
NAMES = ("north", "south")
READY = {"database": "ok", "redis": "ok", "worker": "ok", "clock": "ok"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, RelayStack]]:
    server = os.environ.get("OAR_TEST_DATABASE_URL")
    if not server:
        pytest.skip("several nodes share one PostgreSQL database (OAR_TEST_DATABASE_URL); SQLite is one machine's file")
    database_url = create_postgres_database(server)
    folder = tmp_path_factory.mktemp("nodes")
    shared = make_config(folder / "north", redis_url, database_url, name="pair", times=TIMES)
    stacks: dict[str, RelayStack] = {}
    try:
        for name in NAMES:
            config = shared.with_overrides(data_dir=folder / name, port=free_port())
            env = relay_environment(config, TIMES, {k: v for k, v in os.environ.items() if not k.startswith("OAR_")})
            env.update(WEB_CONCURRENCY="1", OAR_WEB_THREADS="16")
            stacks[name] = RelayStack(config, TIMES, logs=folder / f"{name}-logs", env=env, worker_processes=1)
        # The release step of both nodes at once: one migrates, the other finds it done.
        releases = [subprocess.Popen([sys.executable, "-m", "oar", "migrate"], cwd=PROJECT, env=stack.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for stack in stacks.values()]
        said = sorted(release.communicate(timeout=120)[0] for release in releases)
        assert [release.returncode for release in releases] == [0, 0], said
        assert said[0].startswith("applied ") and said[1].strip() == "database is up to date", said
        for stack in stacks.values():
            stack.start(WEB, "-m", "gunicorn", "wsgi:app")
            stack.start_worker()
            stack.start_clock()
        for stack in stacks.values():
            stack.wait_until_healthy(90)
        Owner(stacks["north"].url, shared.owner_token or "").open_for_agents()
        yield stacks
    finally:
        for stack in stacks.values():
            stack.discard()
        drop_postgres_database(database_url)


def owner_of(stack: RelayStack) -> Owner:
    return Owner(stack.url, stack.config.owner_token or "")


def through(stack: RelayStack, agent: Agent) -> Agent:
    """The same conversation's agent, calling through another node."""
    return Agent(stack.url, agent.token, agent.session_id)


def messages_of(owner: Owner, session_id: str) -> list[dict[str, Any]]:
    return owner.get(f"/api/v1/owner/sessions/{session_id}")["messages"]


def event_lines(owner: Owner, session_id: str) -> list[str]:
    return [m["text"] for m in messages_of(owner, session_id) if m["role"] == "event"]


def ready(stack: RelayStack) -> dict[str, Any]:
    answer = requests.get(f"{stack.url}/readyz", timeout=10)
    return answer.json()["parts"]


def task_output(agent: Agent, session: str, task_id: str) -> dict[str, Any]:
    return agent.ok("read_task_output", relay="this", session=session, task_id=task_id)


def node_running(stacks: dict[str, RelayStack], pid: int) -> str:
    """The node whose worker runs the process `pid`."""
    for name, stack in stacks.items():
        if pid in {process.pid for process in stack.parts[WORKER].tree()}:
            return name
    raise AssertionError(f"no node's worker runs pid {pid}")


def test_both_nodes_are_ready(nodes: dict[str, RelayStack]) -> None:
    for stack in nodes.values():
        assert poll("the node to be ready", lambda stack=stack: ready(stack) == READY)


def test_a_task_started_on_one_node_is_read_on_the_other(nodes: dict[str, RelayStack]) -> None:
    north, south = nodes["north"], nodes["south"]
    owner_of(north).settings(allow_shell_tasks=True)
    desk = owner_of(north).conversation("tasks")
    command = "sh -c 'for n in 1 2 3; do echo line $n; done; echo 3 passed, 0 failed'"
    started = desk.post("/api/v1/tasks", {"command": command})["task"]
    on_south = through(south, desk)

    def ended() -> dict[str, Any] | None:
        body = task_output(on_south, desk.session_id, started["taskId"])
        return body if body["task"]["status"] == "completed" else None

    read = poll("the task to end", ended)
    assert read["tail"] == ["line 1", "line 2", "line 3", "3 passed, 0 failed"] and read["counts"]["final"] is True
    # Through both nodes the same answer, whichever node's worker ran it.
    assert task_output(desk, desk.session_id, started["taskId"])["tail"] == read["tail"]
    listed = on_south.ok("read_session", relay="this", session=desk.session_id)["tasks"]
    assert [task["status"] for task in listed] == ["completed"]


def test_a_card_raised_on_one_node_is_decided_through_the_other(nodes: dict[str, RelayStack]) -> None:
    north, south = nodes["north"], nodes["south"]
    lead = owner_of(north).conversation("lead", approvals=())  # asks the owner before it creates a session
    card, status, body = decide_while_waiting(
        owner_of(south), lead, "allow", "create_session", relay="this", text="hello from north", wait_seconds=30,
    )
    assert card["action"] == "create_session"
    assert status == 200 and body["ok"] is True and body["reply"]["text"] == "echo: hello from north", body


def test_a_send_on_one_node_is_waited_on_through_the_other(nodes: dict[str, RelayStack]) -> None:
    north, south = nodes["north"], nodes["south"]
    desk = owner_of(south).conversation("waits")
    queued = desk.ok("send", relay="this", session=owner_of(south).conversation("target").session_id,
                     text="!sleep 1\nfrom south", wait_seconds=0)
    assert queued["status"] in ("queued", "running")
    done = through(north, desk).ok("wait", relay="this", session=queued["session"], message_id=queued["message_id"],
                                   wait_seconds=30)
    assert done["status"] == "done" and done["reply"]["text"] == "echo: from south", done


def test_two_clocks_fire_each_schedule_once(nodes: dict[str, RelayStack]) -> None:
    north, south = nodes["north"], nodes["south"]
    desk = owner_of(north).conversation("schedules")
    due = (utcnow() + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = [(desk if n % 2 else through(south, desk)).ok("schedule", text=f"firing {n}", at=due)["schedule_id"]
           for n in range(10)]

    def all_ended() -> list[dict[str, Any]] | None:
        listed = [s for s in desk.ok("list_schedules")["schedules"] if s["id"] in ids]
        return listed if all(not s["active"] for s in listed) else None

    ended = poll("every schedule to fire", all_ended, seconds=60)
    assert sorted((s["firedCount"], s["endReason"]) for s in ended) == [(1, "fired")] * 10
    fired = [m["text"] for m in messages_of(owner_of(south), desk.session_id) if m["role"] == "schedule"]
    assert sorted(text.splitlines()[-1] for text in fired) == sorted(f"firing {n}" for n in range(10))


def test_two_delivery_engines_deliver_each_event_once(nodes: dict[str, RelayStack]) -> None:
    north, south = nodes["north"], nodes["south"]
    watcher = owner_of(north).conversation("watcher")
    target = owner_of(south).conversation("watched")
    watcher.ok("subscribe", relay="this", sessions=[target.session_id], events=["turn_end"])
    sender = owner_of(north).conversation("sender")
    for n in range(4):
        through(north if n % 2 else south, sender).ok("send", relay="this", session=target.session_id,
                                                        text=f"turn {n}", wait_seconds=30)

    def turn_ends() -> list[str]:
        return [line for text in event_lines(owner_of(south), watcher.session_id) for line in text.splitlines()
                if ": turn_end (" in line]

    poll("the four events delivered", lambda: len(turn_ends()) >= 4, seconds=60)

    def nothing_held() -> bool:
        [subscription] = through(south, watcher).ok("list_subscriptions")["subscriptions"]
        return subscription["heldCount"] == 0 and subscription["nextDeliveryAt"] is None

    poll("nothing more held for the watcher", nothing_held, seconds=60)
    assert sorted(turn_ends()) == sorted(
        f'[relay event] session "watched" ({target.session_id[:4]}…): turn_end (done) "echo: turn {n}"' for n in range(4)
    )


@pytest.fixture(scope="module")
def balancer(nodes: dict[str, RelayStack], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx with docs/operations.md's configuration in front of both nodes (on loopback, without
    TLS); skipped where nginx is not installed."""
    binary = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if binary is None:
        pytest.skip("nginx is not installed")
    block = re.search(r"```nginx\n(upstream oar_relay.*?)```", (PROJECT / "docs" / "operations.md").read_text(), re.S)
    assert block, "docs/operations.md has no nginx configuration for several nodes"
    folder, port = tmp_path_factory.mktemp("nginx"), free_port()
    servers = "".join(f"    server 127.0.0.1:{stack.config.port};\n" for stack in nodes.values())
    configuration = re.sub(r"(    server 10\.0\.0\.\d+:8080[^\n]*\n)+", servers, block[1]).replace(
        "listen 443 ssl;", f"listen 127.0.0.1:{port};")
    (folder / "nginx.conf").write_text(
        f"daemon off; pid {folder}/nginx.pid; error_log {folder}/error.log;\nevents {{}}\n"
        f"http {{ access_log off; client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy;\n"
        f"{configuration}}}\n"
    )
    checked = subprocess.run([binary, "-t", "-c", str(folder / "nginx.conf")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    server = subprocess.Popen([binary, "-c", str(folder / "nginx.conf")], stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        poll("nginx to answer", lambda: _answers(url))
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def test_behind_the_documented_nginx_an_mcp_event_stream_arrives_as_it_is_written(
    nodes: dict[str, RelayStack], balancer: str,
) -> None:
    """docs/operations.md's nginx configuration: a call that waits streams its progress through
    the balancer while the turn it waits on still runs (not held back until the end)."""
    owner = Owner(balancer, nodes["north"].config.owner_token or "")
    desk = owner.conversation("behind nginx")
    target = owner.conversation("slow target").session_id
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "relay_tool", "_meta": {"progressToken": "p1"},
        "arguments": {"action": "send", "relay": "this", "session": target, "text": "!sleep 5\nthrough nginx",
                      "wait_seconds": 60}}}
    headers = {"Authorization": f"Bearer {desk.token}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    kinds, last = [], {}
    with requests.post(f"{balancer}/mcp", json=call, headers=headers, stream=True, timeout=120) as answer:
        assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if not line.startswith(b"data:"):
                continue
            last = json.loads(line[5:])
            kinds.append(last.get("method", "result"))
            if kinds == ["notifications/progress"]:
                # The first progress came while the turn still runs: nothing buffered it.
                [turn] = [m for m in messages_of(owner, target) if m["role"] == "user"]
                assert turn["status"] in ("queued", "running"), turn
    assert kinds[0] == "notifications/progress" and kinds[-1] == "result", kinds
    assert "echo: through nginx" in json.dumps(last["result"]), last


def test_a_node_that_dies_loses_nothing_the_other_needs(nodes: dict[str, RelayStack]) -> None:
    """A task runs on one node's worker; that node is killed (web, worker, clock, as a power cut).
    Through the other: the output it had written, the task failed by the survivor's reconciler,
    earlier output, sessions, a new turn, and readiness."""
    owner_of(nodes["north"]).settings(allow_shell_tasks=True)
    desk = owner_of(nodes["north"]).conversation("survivor")
    finished = desk.post("/api/v1/tasks", {"command": "echo kept from before"})["task"]["taskId"]
    poll("the first task to end", lambda: task_output(desk, desk.session_id, finished)["task"]["status"] == "completed")
    running = desk.post("/api/v1/tasks", {"command": "sh -c 'echo started; exec sleep 600'"})["task"]["taskId"]
    pid = poll("the task's process", lambda: sleeping_task(nodes))
    dying = node_running(nodes, pid)
    survivor = nodes["south" if dying == "north" else "north"]
    on_survivor = through(survivor, desk)
    # Live output through the node that does not run it.
    poll("the output read through the other node", lambda: task_output(on_survivor, desk.session_id, running)["tail"] == ["started"])

    nodes[dying].kill()

    def failed_task() -> dict[str, Any] | None:
        body = task_output(on_survivor, desk.session_id, running)
        return body if body["task"]["status"] == "failed" else None

    failed = poll("the survivor's reconciler to fail the orphaned task", failed_task, seconds=60)
    assert failed["tail"] == ["started"] and "stopped (no heartbeat" in failed["task"]["error"]
    assert task_output(on_survivor, desk.session_id, finished)["tail"] == ["kept from before"]
    target = owner_of(survivor).conversation("after the loss")
    done = on_survivor.ok("send", relay="this", session=target.session_id, text="still here", wait_seconds=30)
    assert done["status"] == "done" and done["reply"]["text"] == "echo: still here"
    assert poll("the survivor to be ready", lambda: ready(survivor) == READY)
    listed = owner_of(survivor).get("/api/v1/owner/sessions")["sessions"]
    assert {desk.session_id, target.session_id} <= {s["id"] for s in listed}


def sleeping_task(nodes: dict[str, RelayStack]) -> int | None:
    """The pid of the task's `sleep 600` once a node's worker started it."""
    for stack in nodes.values():
        for process in stack.parts[WORKER].tree():
            try:
                if process.cmdline()[:2] == ["sleep", "600"]:
                    return process.pid
            except psutil.Error:
                continue
    return None
