"""`cli`: a command-line agent run once per turn in the session's folder (docs/providers.md#cli).

The owner configures `command`, an argument list (never a shell line) with placeholders
`{prompt}`, `{model}`, `{effort}`, `{cwd}`, `{session}` (the relay's session id), and
optionally `resume_args`, added when the agent reported its own session id on an earlier
turn (`{agent_session}`), e.g. a coding agent's non-interactive mode:

    "command": ["claude", "-p", "{prompt}", "--output-format", "stream-json", "--verbose"],
    "resume_args": ["--resume", "{agent_session}"]

How the argument list is built so that agent text never becomes an option is in
`oar.providers.cli_command` (the prompt goes last, after `--`).

Its output is read line by line. With `output_format: stream-json` (the default when the
command names `stream-json`) JSON lines in the stream-json shape (`system`/`init` and
`result` carry `session_id`; `assistant` messages carry `text` and `tool_use` blocks;
`result` carries `usage` and `is_error`) become text, tool activity and usage, and other
lines are plain reply text. With `output_format: text` every line is reply text: the agent
writes that output itself, so a JSON-looking line in it is never read as an event
(docs/providers.md#cli-arguments).

Background tasks the agent reports become Tasks (recorded, never run by the relay): a
`tool_use` with `input.run_in_background: true` (a `Bash` command, or a `Task`/`Agent`
subagent) whose `tool_result` (in a `user` line) names the agent's id for it ("…running in
background with ID: <id>…"), or a `system` line `{subtype: "task_started", task_id,
description, task_type?, output_file?}`; a `system` line `{subtype: "task_notification",
task_id, status: completed|failed|stopped, summary?, output_file?}` reports its end. An
output file is taken only from those structured fields, never from a tool result's text,
and the relay reads it only inside its own folder (docs/tasks.md#agent-output-files).

The agent's environment is built, never inherited (docs/providers.md#the-agents-environment):
the few variables a program needs to run as the relay's user, then the provider's own
`environment` as the owner configured it. Nothing else of the relay's reaches it: not its
settings and secrets (`OAR_*`, `DATABASE_URL`, `REDIS_URL`), not another provider's key.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from oar.core import cpu_claims
from oar.core.config import environment_for_children
from oar.providers.base import (
    Activity,
    AgentSession,
    Provider,
    TaskEnded,
    TaskReported,
    TextDelta,
    TurnControl,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    Usage,
    safe_agent_session_id,
)
from oar.providers.cli_command import Refused, build

log = logging.getLogger(__name__)

# Lines of the agent's standard error kept for a failure message.
STDERR_LINES = 20
# A stopped agent gets SIGTERM, then SIGKILL after this long.
KILL_GRACE_SECONDS = 3.0
OUTPUT_FORMATS = ("stream-json", "text")
# Where the agent's temporary files go: the relay's folder for the session's task output.
TMPDIR_VARIABLES = ("TMPDIR", "CLAUDE_CODE_TMPDIR")
# How a coding agent's tool result names a background task (its output file is taken only
# from structured fields: docs/tasks.md#agent-output-files).
BACKGROUND_ID = re.compile(r"(?:with ID|task_id|agentId|agent ID)\s*[:=]?\s*([A-Za-z0-9][A-Za-z0-9_.-]{0,99})", re.I)
SUBAGENT_TOOLS = ("Task", "Agent")


@dataclass(frozen=True)
class CliFailure:
    message: str


class CliLineParser:
    """Pure: one output line in, turn events out. `structured=False` (output_format text):
    every line is reply text, since the agent wrote it."""

    def __init__(self, structured: bool = True) -> None:
        self.structured = structured
        self.wrote_text = False
        self.result_text: str | None = None
        # tool_use id → (description, type) of calls asked to run in the background.
        self.background_calls: dict[str, tuple[str, str]] = {}
        self.reported: set[str] = set()

    def feed(self, line: str) -> list[TurnEvent | CliFailure]:
        stripped = line.strip()
        if not stripped:
            return [TextDelta("\n")] if self.wrote_text else []
        try:
            item = json.loads(stripped) if self.structured else None
        except ValueError:
            item = None
        if not isinstance(item, dict) or "type" not in item:
            return self._text(line.rstrip("\n") + "\n")
        kind = item["type"]
        out: list[TurnEvent | CliFailure] = []
        if kind == "system":
            if item.get("subtype") == "init":
                out.extend(_agent_session(item))
            out.extend(self._task_line(item))
        elif kind == "assistant":
            for block in _blocks(item):
                if block.get("type") == "text" and block.get("text"):
                    out.extend(self._text(block["text"]))
                elif block.get("type") == "tool_use":
                    out.append(Activity(f"{block.get('name', 'tool')} {_short(block.get('input'))}".strip()))
                    self._note_background_call(block)
        elif kind == "user":
            for block in _blocks(item):
                if block.get("type") == "tool_result":
                    out.extend(self._background_result(block))
        elif kind == "result":
            out.extend(_agent_session(item))
            usage = item.get("usage") or {}
            if usage:
                tokens_in = sum(int(usage.get(key) or 0) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
                out.append(Usage(tokens_in, int(usage.get("output_tokens") or 0)))
            if item.get("is_error"):
                out.append(CliFailure(str(item.get("result") or item.get("subtype") or "the agent reported an error")))
            elif not self.wrote_text and item.get("result"):
                out.extend(self._text(str(item["result"])))
        return out

    def _text(self, text: str) -> list[TurnEvent | CliFailure]:
        self.wrote_text = True
        return [TextDelta(text)]

    def _note_background_call(self, block: dict[str, Any]) -> None:
        arguments = block.get("input")
        if not isinstance(arguments, dict):
            arguments = {}
        if arguments.get("run_in_background") is not True or not block.get("id"):
            return
        name = str(block.get("name") or "")
        kind = "subagent" if name in SUBAGENT_TOOLS else "local_bash"
        description = str(arguments.get("description") or arguments.get("command") or arguments.get("prompt") or name)
        self.background_calls[str(block["id"])] = (description, kind)

    def _background_result(self, block: dict[str, Any]) -> list[TurnEvent | CliFailure]:
        call = self.background_calls.pop(str(block.get("tool_use_id") or ""), None)
        if call is None or block.get("is_error"):
            return []
        content = block.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
        text = str(content or "")
        found = BACKGROUND_ID.search(text)
        if found is None:
            return []
        task_id = found.group(1).rstrip(".-")  # the id may end a sentence
        return self._reported(task_id, call[0], call[1], None)

    def _task_line(self, item: dict[str, Any]) -> list[TurnEvent | CliFailure]:
        task_id = str(item.get("task_id") or "")
        if not task_id:
            return []
        if item.get("subtype") == "task_started":
            kind = "subagent" if "agent" in str(item.get("task_type") or "").lower() else "local_bash"
            output = item.get("output_file")
            return self._reported(task_id, str(item.get("description") or "background task"), kind, output if isinstance(output, str) else None)
        if item.get("subtype") == "task_notification" and task_id in self.reported:
            summary, output = item.get("summary"), item.get("output_file")
            return [TaskEnded(
                task_id, str(item.get("status") or "completed"), summary if isinstance(summary, str) else None,
                output if isinstance(output, str) else None,
            )]
        return []

    def _reported(self, task_id: str, description: str, kind: str, output: str | None) -> list[TurnEvent | CliFailure]:
        if task_id in self.reported:
            return []
        self.reported.add(task_id)
        return [TaskReported(task_id, description[:500], kind, output)]


def _agent_session(item: dict[str, Any]) -> list[TurnEvent | CliFailure]:
    """The agent's session id of an `init` or `result` line, when it has the safe shape."""
    value = item.get("session_id")
    if not isinstance(value, str) or not value:
        return []
    if safe_agent_session_id(value) is None:
        log.warning("a cli agent reported a session id of an unsafe shape (%r); it is ignored", value[:80])
        return []
    return [AgentSession(value)]


def _blocks(item: dict[str, Any]) -> list[dict[str, Any]]:
    message = item.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not None else ""
    return text[:80] + ("…" if len(text) > 80 else "")


def output_format(options: dict[str, Any]) -> str:
    """`stream-json` or `text`: the configured one, else stream-json when the command names it."""
    configured = options.get("output_format")
    if configured in OUTPUT_FORMATS:
        return str(configured)
    return "stream-json" if any("stream-json" in str(argument) for argument in options.get("command") or ()) else "text"


class CliProvider(Provider):
    kind = "cli"
    writes_task_output = True

    def missing_configuration(self) -> str | None:
        command = self.options.get("command")
        if not command:
            return f'Provider "{self.name}" has no command.'
        return None

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        missing = self.missing_configuration()
        if missing:
            yield TurnFailed(missing)
            return
        values = {
            "prompt": request.prompt, "model": request.model or self.default_model or "", "effort": request.effort or "",
            "cwd": request.cwd or "", "session": request.session_id, "agent_session": request.agent_session_id or "",
        }
        agent_session = safe_agent_session_id(request.agent_session_id)
        if request.agent_session_id and agent_session is None:
            log.warning("session %s: the stored agent session id has an unsafe shape; the agent starts afresh", request.session_id[:8])
        values["agent_session"] = agent_session or ""
        resume = list(self.options.get("resume_args") or ()) if agent_session else []
        try:
            arguments = build(
                list(self.options["command"]), resume, values, end_of_options=self.options.get("end_of_options", True) is not False,
            )
        except Refused as refused:
            yield TurnFailed(f'Provider "{self.name}": {refused.message}')
            return
        environment = agent_environment(self.options.get("environment") or {}, request.task_output_dir)
        try:
            with cpu_claims.unpinned():  # the agent CLI gets every core, not the worker's one
                process = subprocess.Popen(
                    arguments, cwd=request.cwd or None, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True, env=environment,
                )
        except OSError as error:
            yield TurnFailed(f'Provider "{self.name}" could not start {arguments[0]!r}: {error.strerror or error}.')
            return
        stderr: deque[str] = deque(maxlen=STDERR_LINES)
        readers = [
            threading.Thread(target=lambda: stderr.extend(process.stderr or ()), daemon=True),
            threading.Thread(target=_stop_when_cancelled, args=(process, control), daemon=True),
        ]
        for reader in readers:
            reader.start()
        parser = CliLineParser(structured=output_format(self.options) == "stream-json")
        failure: str | None = None
        if process.stdout is None:
            raise RuntimeError("the agent's process has no output pipe")  # started with stdout=PIPE
        for line in process.stdout:
            for event in parser.feed(line):
                if isinstance(event, CliFailure):
                    failure = event.message
                else:
                    yield event
        code = process.wait()
        readers[0].join(timeout=5)
        if control.cancelled.is_set():
            return
        if failure is not None:
            yield TurnFailed(f'The {self.name} agent reported an error: {failure[:500]}')
        elif code != 0:
            tail = " ".join("".join(stderr).split())[-500:]
            yield TurnFailed(f"The {self.name} agent exited with status {code}" + (f": {tail}" if tail else "."))


def agent_environment(configured: dict[str, str], task_output_dir: str | None) -> dict[str, str]:
    """The environment an agent's process starts with: the few variables of the relay's own that
    hold no secret, then the provider's configured ones, then the session's temporary folder."""
    environment = environment_for_children()
    environment.update(configured)
    if task_output_dir:
        environment.update(dict.fromkeys(TMPDIR_VARIABLES, task_output_dir))
    return environment


def _stop_when_cancelled(process: subprocess.Popen[str], control: TurnControl) -> None:
    while process.poll() is None:
        if control.cancelled.wait(0.1):
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
            return


def _signal_group(process: subprocess.Popen[str], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
