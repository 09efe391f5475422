"""Running a background task's subprocess, inside an RQ worker (`workers.tasks.run_task`).

The subprocess writes straight into `<data dir>/tasks/<id>.log` of the worker's machine; its exit code is recorded,
and while it runs the job writes a heartbeat so that the reconciler can fail a task whose
worker died (and end its process). On PostgreSQL the job also copies the file's new end into
the database every `TASK_OUTPUT_COPY_SECONDS`, and once more as the task ends
(`oar.background.output_store`), so that a call on any node reads it.

Commands run as argument lists (`shlex.split`, no shell) unless the owner turned on
`shell_tasks_via_shell`; then the command is the single argument of `/bin/sh -c`, never
concatenated with anything. The command runs in the session's folder, checked and opened
again here (docs/tasks.md#the-folder-a-task-runs-in), in the sandbox (`oar.background.sandbox`,
docs/tasks.md#the-sandbox), and is failed when none is available here, unless the owner turned
on `tasks_without_sandbox`: then it runs as the worker's user with the few variables of the
worker's environment that hold no secret (`PATH`, `HOME`, the locale, …; never `OAR_*`,
`DATABASE_URL`, `REDIS_URL` or a provider's key), which keeps them out of sight and nothing more:
such a task can read whatever the relay's user can.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

import redis

from oar.background import output_files, output_store, sandbox, tasks
from oar.background.task_views import output_file_time
from oar.core import cpu_claims, events, keys, work_folders
from oar.core.config import environment_for_children
from oar.core.db import release_connection, write_transaction
from oar.core.models import Session, Task
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import TaskStatus
from oar.core.timeutil import utcnow


def claim(task_id: str, output_path: str | None = None) -> Task | None:
    """Take the task for this worker (a conditional UPDATE: one worker wins). Its output goes to
    `output_path`, a file on this machine: the worker that runs a task names it, not the node
    that started it (docs/operations.md#several-nodes)."""
    with write_transaction():
        claimed = (
            Task.update(heartbeat_at=utcnow(), host=socket.gethostname(), output_path=output_path)
            .where(
                (Task.id == task_id) & (Task.status == TaskStatus.RUNNING) & Task.heartbeat_at.is_null()
                & Task.command.is_null(False)  # an agent's own task is never run here
            )
            .execute()
        )
    return Task.get_by_id(task_id) if claimed else None


def subprocess_env() -> dict[str, str]:
    """A task's environment outside the sandbox: built, never inherited."""
    return environment_for_children()


def run(runtime: Runtime, task_id: str) -> str | None:
    """Run a claimed task's subprocess to its end; returns the final status (None: not ours)."""
    values = runtime.settings()
    sandboxed = not values.get("tasks_without_sandbox")
    # Checked again here: the worker's machine is the one that runs the command. Before the
    # claim, whose heartbeat the reconciler ages from: a worker's first probe starts a sandbox.
    reason = sandbox.unavailable(runtime.config) if sandboxed else None
    task = claim(task_id, str(output_files.relay_folder(runtime).resolve() / f"{task_id}.log"))
    if task is None:
        return None
    if task.command is None or task.output_path is None:
        raise ValueError(f"task {task.id} is an agent's own task: the relay records it and never runs it")
    path = Path(task.output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["/bin/sh", "-c", task.command] if task.shell else shlex.split(task.command)
    with open(path, "ab") as output:
        started = _start(runtime, task, argv, output, sandboxed=sandboxed, unavailable=reason)
        if isinstance(started, str):
            output.write(f"{started}\n".encode())
            return tasks.finish(runtime, task.id, TaskStatus.FAILED, None, started)
    process = started
    Task.update(pid=process.pid, heartbeat_at=utcnow()).where(Task.id == task.id).execute()
    release_connection()
    minutes = values["max_task_minutes"]
    ending = _watch(runtime, task, process, time.monotonic() + minutes * runtime.time("TASK_MINUTE_SECONDS"))
    code = process.returncode
    if ending == OVERTIME:
        return tasks.finish(runtime, task.id, TaskStatus.FAILED, code, overtime_text(minutes))
    if ending == STOPPED:
        status = TaskStatus.KILLED
    else:
        status = TaskStatus.COMPLETED if code == 0 else TaskStatus.FAILED
    return tasks.finish(runtime, task.id, status, code, None)


def _start(
    runtime: Runtime, task: Task, argv: list[str], output: BinaryIO, *, sandboxed: bool, unavailable: str | None
) -> subprocess.Popen[bytes] | str:
    """The task's process, started in its session's folder; else the sentence saying why not.

    The folder is checked and opened here, at every start (docs/tasks.md#the-folder-a-task-runs-in),
    and the process gets that very folder: bwrap binds the descriptor, and without the sandbox
    the process starts in it through `/proc/self/fd`, so no link on its path is followed."""
    values = runtime.settings()
    binary = sandbox.find_bwrap(runtime.config) if sandboxed else None
    if sandboxed and (unavailable is not None or binary is None):
        return sandbox.unavailable_text(unavailable or "bwrap is not on PATH")
    session = Session.get_by_id(task.session_id)
    try:
        with work_folders.opened(runtime.config, session, values["allowed_roots"], task.cwd) as (folder, folder_fd):
            if binary is None:
                return _popen(argv, output, cwd=f"/proc/self/fd/{folder_fd}", env=subprocess_env(), fds=[folder_fd])
            launch = sandbox.wrap(
                runtime.config, binary, argv, folder, folder_fd, network=bool(values.get("tasks_use_network"))
            )
            try:
                # bwrap clears the environment anyway and sets the task's own (--clearenv, --setenv).
                return _popen(launch.argv, output, cwd="/", env={}, fds=[folder_fd, *launch.fds])
            finally:
                launch.close()
    except work_folders.FolderRefused as refused:
        return f"The command could not be started: the session's folder {task.cwd} {refused.reason}. Nothing was run."
    except (sandbox.PythonUnavailable, OSError, ValueError) as error:
        # ValueError: what the operating system cannot take as an argument (a NUL, refused at the start).
        return f"The command could not be started: {error}."


def _popen(argv: list[str], output: BinaryIO, *, cwd: str, env: dict[str, str], fds: list[int]) -> subprocess.Popen[bytes]:
    with cpu_claims.unpinned():  # the task gets every core, not the worker's one
        return subprocess.Popen(
            argv, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, pass_fds=fds,
        )


# How a watched task ended other than by itself: asked to stop, or past its time limit.
STOPPED = "stopped"
OVERTIME = "overtime"


def overtime_text(minutes: int) -> str:
    limit = "1 minute" if minutes == 1 else f"{minutes:,} minutes"
    return (
        f"The task ran longer than the relay's limit of {limit} (owner setting max_task_minutes) and was ended: "
        "its processes got SIGTERM, then SIGKILL."
    )


def _watch(runtime: Runtime, task: Task, process: subprocess.Popen[bytes], deadline: float) -> str | None:
    """Heartbeat, output time, stop requests and the time limit (`deadline`, on the monotonic
    clock) until the process exits: None when it exited by itself, else STOPPED or OVERTIME."""
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
    # Where the output is kept in the database, it is copied there this often, and at least as often
    # as the heartbeat: the copy writes the last output time (docs/tasks.md#where-the-output-is-kept).
    copy_every = min(runtime.time("TASK_OUTPUT_COPY_SECONDS"), heartbeat_every) if output_store.in_database() else math.inf
    next_heartbeat = time.monotonic() + heartbeat_every
    next_copy = time.monotonic() + copy_every
    try:
        while not exited.is_set():
            _wait(pubsub, exited, max(0.0, min(poll_every, heartbeat_every, copy_every, deadline - time.monotonic())))
            if exited.is_set():
                break
            row = Task.get_or_none(Task.id == task.id)
            if row is None or row.stop_requested or row.status != TaskStatus.RUNNING:
                _end(runtime, process, exited)
                return STOPPED
            if time.monotonic() >= deadline:
                _end(runtime, process, exited)
                return OVERTIME
            if time.monotonic() >= next_copy:
                output_store.mirror(runtime, row)
                next_copy = time.monotonic() + copy_every
            if time.monotonic() >= next_heartbeat:
                _beat(runtime, row)
                next_heartbeat = time.monotonic() + heartbeat_every
            release_connection()
    finally:
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                pubsub.close()
    return None


def _end(runtime: Runtime, process: subprocess.Popen[bytes], exited: threading.Event) -> None:
    kill(process, runtime.time("TASK_KILL_GRACE_SECONDS"))
    exited.wait(runtime.time("TASK_KILL_GRACE_SECONDS") + 5)


def _beat(runtime: Runtime, task: Task) -> None:
    """Heartbeat; the last output time from the file; a `stalled` event once per quiet spell.
    Where output is copied into the database, each copy that brings new bytes writes the last
    output time instead (`output_store.append`): a file just created has written nothing."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now}
    last_output = task.last_output_at or task.started_at
    file_time = last_output if output_store.in_database() else output_file_time(task)
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
