"""How many background tasks run, and for how long (docs/tasks.md#how-many-and-how-long), on real
workers: a start over the session's or the relay's cap is refused with nothing written; a
conversation's turn still runs while tasks run, on a worker of one thread; a task past its time
limit is ended and failed; starting a task counts against the conversation's write limit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from oar.background import tasks
from oar.background.task_runner import overtime_text
from oar.core.db import database
from oar.core.models import Event, Task
from oar.core.statuses import TaskStatus
from tests.support.clients import Agent, poll
from tests.support.conversations import write
from tests.support.relays import FAST_TIMES, Relay, RelayStack, own_relay
from tests.support.snapshots import reset_database, snapshot

pytestmark = pytest.mark.stack

BUSY = "REMOTE_RELAY_BUSY"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayStack]:
    """A relay whose worker is one process of ONE thread, and whose "minute" of a task's time
    limit lasts a second."""
    times = {**FAST_TIMES, "TASK_MINUTE_SECONDS": "1"}
    with own_relay(tmp_path_factory.mktemp("caps"), times, worker_processes=1, env={"OAR_WORKER_THREADS": "1"}) as running:
        yield running


@pytest.fixture
def relay(stack: RelayStack) -> Iterator[Relay]:
    """The relay, emptied, with shell tasks on; every task still running is stopped afterwards."""
    relay = stack.relay
    assert relay is not None and relay.runtime is not None
    reset_database()
    relay.owner.open_for_agents()
    relay.settings(allow_shell_tasks=True)
    yield relay
    with database.connection_context():
        running = list(Task.select().where(Task.status == TaskStatus.RUNNING))
        for task in running:
            tasks.request_stop(relay.runtime, task)
    poll("every task to end", lambda: not running_tasks())


def running_tasks() -> list[str]:
    with database.connection_context():
        return [t.id for t in Task.select(Task.id).where(Task.status == TaskStatus.RUNNING).order_by(Task.created_at)]


def start(agent: Agent, command: str) -> str:
    """`agent` starts a task; once its worker runs its process and has written its first
    heartbeat (which takes the output file's time as the last output's), returns its id."""
    task_id = agent.post("/api/v1/tasks", {"command": command})["task"]["taskId"]
    poll(f"task {task_id}'s process to run", lambda: process_of(task_id))
    started = heartbeat_of(task_id)
    poll(f"task {task_id}'s first heartbeat", lambda: heartbeat_of(task_id) != started)
    return task_id


def heartbeat_of(task_id: str) -> Any:
    with database.connection_context():
        return Task.get_by_id(task_id).heartbeat_at


def process_of(task_id: str) -> int | None:
    with database.connection_context():
        return Task.get_by_id(task_id).pid


def refused_start(relay: Relay, agent: Agent, command: str) -> dict[str, Any]:
    """A start over a cap: 409 in the documented shape, and nothing of the relay changed."""
    before = snapshot(relay, heartbeats=False)
    status, body = agent.request("POST", "/api/v1/tasks", {"command": command})
    assert status == 409 and body["ok"] is False and body["code"] == BUSY, body
    assert body["error"].endswith("Nothing was run."), body
    assert snapshot(relay, heartbeats=False) == before
    return body


def test_starts_over_a_cap_are_refused_and_turns_still_run_while_tasks_run(relay: Relay) -> None:
    relay.settings(max_running_tasks_per_session=2, max_running_tasks=3, max_task_minutes=600)
    ann, bob, cy = relay.conversation("ann"), relay.conversation("bob"), relay.conversation("cy")
    anns = [start(ann, "sleep 600"), start(ann, "sleep 601")]

    refused = refused_start(relay, ann, "sleep 602")
    assert "This session already runs 2 background tasks" in refused["error"]
    assert "(owner setting max_running_tasks_per_session: 2)" in refused["error"]
    assert refused["maxRunningTasksPerSession"] == 2
    assert [entry["taskId"] for entry in refused["tasks"]] == anns

    bobs = start(bob, "sleep 603")
    refused = refused_start(relay, bob, "sleep 604")
    assert "The relay already runs 3 background tasks" in refused["error"]
    assert "(owner setting max_running_tasks: 3)" in refused["error"]
    assert refused["maxRunningTasks"] == 3 and "tasks" not in refused  # never another session's tasks

    # Three tasks run on a worker of one thread, and another conversation's turns still run:
    # one answered, one whose `!task` meets the relay's cap and fails saying so.
    answered = cy.ok("create_session", relay="this", text="still here?", wait_seconds=30)
    assert answered["status"] == "done" and answered["reply"]["text"] == "echo: still here?", answered
    capped = cy.ok("create_session", relay="this", text="!task sleep 605", wait_seconds=30)
    assert capped["status"] == "failed" and "(owner setting max_running_tasks: 3)" in capped["error"], capped
    assert running_tasks() == [*anns, bobs]

    # A place comes free when a task ends.
    ann.post(f"/api/v1/tasks/{anns[0]}/stop")
    poll("the stopped task to end", lambda: anns[0] not in running_tasks())
    start(bob, "sleep 606")


def test_starts_at_once_never_pass_a_cap_together(relay: Relay) -> None:
    relay.settings(max_running_tasks_per_session=2, max_task_minutes=600)
    ann = relay.conversation("ann")
    answers: list[int] = []
    starting = [
        threading.Thread(target=lambda n=n: answers.append(ann.request("POST", "/api/v1/tasks", {"command": f"sleep {600 + n}"})[0]))
        for n in range(8)
    ]
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join(60)
    assert sorted(answers) == [201, 201, 409, 409, 409, 409, 409, 409]
    assert len(running_tasks()) == 2


def test_a_task_past_its_time_limit_is_ended_and_failed(relay: Relay) -> None:
    relay.settings(max_task_minutes=1)  # one "minute" of a second here
    ann = relay.conversation("ann")
    task_id = start(ann, "sleep 600")
    pid = process_of(task_id)
    assert pid is not None

    def ended() -> dict[str, Any] | None:
        task = ann.ok("read_task_output", relay="this", session=ann.session_id, task_id=task_id)["task"]
        return task if task["status"] != "running" else None

    task = poll("the task to reach its time limit", ended)
    assert task["status"] == "failed" and task["error"] == overtime_text(1)
    assert task["error"].startswith("The task ran longer than the relay's limit of 1 minute (owner setting max_task_minutes)")
    poll("its process to be gone", lambda: not alive(pid))
    with database.connection_context():
        kinds = [e.kind for e in Event.select().where(Event.session == ann.session_id).order_by(Event.seq)]
    assert kinds == ["task_started", "task_finished", "task_failed", "session_idle"]


def test_starting_a_task_counts_against_the_conversations_writes(relay: Relay) -> None:
    relay.settings(rate_calls_per_minute=0, rate_writes_per_minute=1, max_task_minutes=600)
    ann, bob = relay.conversation("ann"), relay.conversation("bob")
    start(ann, "sleep 600")
    status, body = ann.request("POST", "/api/v1/tasks", {"command": "sleep 601"})
    assert status == 429 and body["code"] == "REMOTE_RELAY_RATE_LIMITED" and body["error"].endswith("Nothing was run.")
    # A turn's `!task` is the conversation's write too.
    prompt = write(relay, ann.session_id, "!task sleep 602")
    turn = bob.ok("wait", relay="this", session=ann.session_id, message_id=prompt, wait_seconds=30)
    assert turn["status"] == "failed" and "too many calls to the relay in the last minute" in turn["error"], turn
    assert turn["error"].endswith("Nothing was run.")
    assert len(running_tasks()) == 1


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
