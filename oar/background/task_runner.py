"""Running a background task's subprocess, inside an RQ worker (`workers.tasks.run_task`).

The subprocess writes straight into `<data dir>/tasks/<id>.log`; its exit code is recorded,
and while it runs the job writes a heartbeat so that the reconciler can fail a task whose
worker died (and end its process).

Commands run as argument lists (`shlex.split`, no shell) unless the owner turned on
`shell_tasks_via_shell`; then the command is the single argument of `/bin/sh -c`, never
concatenated with anything. The command runs in the sandbox (`oar.background.sandbox`,
docs/tasks.md#the-sandbox), and is failed when none is available here, unless the owner turned
on `tasks_without_sandbox`: then it runs as the worker's user with the worker's environment
less the relay's own secrets (`OAR_*`, `DATABASE_URL`, `REDIS_URL`), which keeps the obvious
ones out of sight and nothing more.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from oar.background import sandbox, tasks
from oar.background.task_views import last_output_time
from oar.core import events, keys
from oar.core.db import release_connection, write_transaction
from oar.core.models import Task
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import TaskStatus
from oar.core.timeutil import utcnow

# Environment variables a task's subprocess does not inherit from the worker.
_PRIVATE_ENV_PREFIXES = ("OAR_",)
_PRIVATE_ENV = ("DATABASE_URL", "REDIS_URL")


def claim(task_id: str) -> Task | None:
    """Take the task for this worker (a conditional UPDATE: one worker wins)."""
    with write_transaction():
        claimed = (
            Task.update(heartbeat_at=utcnow(), host=socket.gethostname())
            .where(
                (Task.id == task_id) & (Task.status == TaskStatus.RUNNING) & Task.heartbeat_at.is_null()
                & Task.command.is_null(False)  # an agent's own task is never run here
            )
            .execute()
        )
    return Task.get_by_id(task_id) if claimed else None


def subprocess_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_PRIVATE_ENV_PREFIXES) and key not in _PRIVATE_ENV
    }


def run(runtime: Runtime, task_id: str) -> str | None:
    """Run a claimed task's subprocess to its end; returns the final status (None: not ours)."""
    values = runtime.settings()
    sandboxed = not values.get("tasks_without_sandbox")
    # Checked again here: the worker's machine is the one that runs the command. Before the
    # claim, whose heartbeat the reconciler ages from: a worker's first probe starts a sandbox.
    reason = sandbox.unavailable(runtime.config) if sandboxed else None
    task = claim(task_id)
    if task is None:
        return None
    if task.command is None or task.output_path is None:
        raise ValueError(f"task {task.id} is an agent's own task: the relay records it and never runs it")
    path = Path(task.output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["/bin/sh", "-c", task.command] if task.shell else shlex.split(task.command)
    env: dict[str, str] | None = subprocess_env()
    with open(path, "ab") as output:
        if sandboxed:
            binary = sandbox.find_bwrap(runtime.config)
            if reason is not None or binary is None:
                text = sandbox.unavailable_text(reason or "bwrap is not on PATH")
                output.write(f"{text}\n".encode())
                return tasks.finish(runtime, task.id, TaskStatus.FAILED, None, text)
            if task.cwd is None or not os.path.isdir(task.cwd):
                text = f"The command could not be started: the session's folder {task.cwd} is not a folder."
                output.write(f"{text}\n".encode())
                return tasks.finish(runtime, task.id, TaskStatus.FAILED, None, text)
            argv = sandbox.wrap(runtime.config, binary, argv, task.cwd, network=bool(values.get("tasks_use_network")))
            env = {}  # bwrap clears it anyway and sets the task's own (--clearenv, --setenv)
        try:
            process = subprocess.Popen(
                argv, cwd=task.cwd, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env,
            )
        except OSError as error:
            output.write(f"{error}\n".encode())
            return tasks.finish(runtime, task.id, TaskStatus.FAILED, None, f"The command could not be started: {error}.")
    Task.update(pid=process.pid, heartbeat_at=utcnow()).where(Task.id == task.id).execute()
    release_connection()
    killed = _watch(runtime, task, process)
    code = process.returncode
    if killed:
        status = TaskStatus.KILLED
    else:
        status = TaskStatus.COMPLETED if code == 0 else TaskStatus.FAILED
    return tasks.finish(runtime, task.id, status, code, None)


def _watch(runtime: Runtime, task: Task, process: subprocess.Popen[bytes]) -> bool:
    """Heartbeat, output time and stop requests until the process exits; True if it was killed."""
    channel = keys.task_stop_channel(runtime.config.namespace, task.id)
    exited = threading.Event()

    def wait_for_exit() -> None:
        process.wait()
        exited.set()
        publish(runtime.redis, channel)  # wakes the loop below at once

    threading.Thread(target=wait_for_exit, name=f"oar-task-{task.id}", daemon=True).start()
    pubsub = _subscribe(runtime, channel)
    heartbeat_every = runtime.time("TASK_HEARTBEAT_SECONDS")
    poll_every = runtime.time("STOP_POLL_SECONDS")
    next_heartbeat = time.monotonic() + heartbeat_every
    try:
        while not exited.is_set():
            _wait(pubsub, exited, min(poll_every, heartbeat_every))
            if exited.is_set():
                break
            row = Task.get_or_none(Task.id == task.id)
            if row is None or row.stop_requested or row.status != TaskStatus.RUNNING:
                kill(process, runtime.time("TASK_KILL_GRACE_SECONDS"))
                exited.wait(runtime.time("TASK_KILL_GRACE_SECONDS") + 5)
                return True
            if time.monotonic() >= next_heartbeat:
                _beat(runtime, row)
                next_heartbeat = time.monotonic() + heartbeat_every
            release_connection()
    finally:
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                pubsub.close()
    return False


def _beat(runtime: Runtime, task: Task) -> None:
    """Heartbeat; the last output time from the file; a `stalled` event once per quiet spell."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now}
    last_output = task.last_output_at or task.started_at
    file_time = last_output_time(task)
    if file_time > last_output:
        last_output = file_time
        values.update(last_output_at=file_time, stall_reported=False)
    quiet_for = now - last_output
    quiet_after = runtime.settings()["quiet_after_minutes"]
    with write_transaction():
        if "last_output_at" not in values and not task.stall_reported and quiet_for >= timedelta(minutes=quiet_after):
            values["stall_reported"] = True
            events.record(
                task.session_id, "stalled",
                {"taskId": task.id, "description": task.description,
                 "minutesSinceOutput": int(quiet_for.total_seconds() // 60)},
                now,
            )
        Task.update(**values).where((Task.id == task.id) & (Task.status == TaskStatus.RUNNING)).execute()


def _subscribe(runtime: Runtime, channel: str) -> Any:
    try:
        pubsub = runtime.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(channel)
        return pubsub
    except redis.RedisError:
        return None


def _wait(pubsub: Any, exited: threading.Event, seconds: float) -> None:
    if pubsub is None:
        exited.wait(seconds)
        return
    try:
        pubsub.get_message(timeout=seconds)
    except redis.RedisError:
        exited.wait(seconds)


def kill(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the task's process group, SIGKILL what is left after `grace` seconds."""
    signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    signal_group(process.pid, signal.SIGKILL)


def signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
