"""A fake command-line coding agent: `cli_agent.py <prompt> [--resume <id>]`.

Prints stream-json lines as a coding agent's non-interactive mode does: `system`/`init`
with its session id, an `assistant` message with text and a `tool_use` block, and a
`result` with usage. `#fail` exits 3 with an error on stderr, `#error` reports an error
result, `#sleep` waits (for stop tests), `#plain` prints plain text lines. `#background`
runs `pytest -q` "in the background" as a coding agent reports it: a `Bash` tool_use with
`run_in_background: true`, then a `user` tool_result naming the task's id and its output
file (written in the temporary folder); `#background-done` also reports the task's end
with a `system` `task_notification`.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path


def emit(item: dict[str, object]) -> None:
    print(json.dumps(item), flush=True)


def main() -> int:
    prompt = sys.argv[1]
    resumed = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else None
    session_id = resumed or "agent-" + secrets.token_hex(4)
    if "#fail" in prompt:
        print("fatal: the agent's configuration is broken", file=sys.stderr)
        return 3
    if "#plain" in prompt:
        print("plain line one")
        print("plain line two")
        return 0
    emit({"type": "system", "subtype": "init", "session_id": session_id, "cwd": os.getcwd()})
    if "#background" in prompt:
        background(prompt)
    if "#sleep" in prompt:
        emit({"type": "assistant", "message": {"content": [{"type": "text", "text": "sleeping "}]}})
        time.sleep(60)
    if "#error" in prompt:
        emit({"type": "result", "subtype": "error_during_execution", "is_error": True, "result": "tool budget exhausted", "session_id": session_id})
        return 1
    text = f"cli: {prompt} in {os.getcwd()}" + (f" resumed {resumed}" if resumed else "")
    emit({"type": "assistant", "message": {"content": [
        {"type": "text", "text": text},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
    ]}})
    emit({"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": session_id,
          "usage": {"input_tokens": 5, "output_tokens": 4}})
    return 0


def background(prompt: str) -> None:
    task_id = "b" + secrets.token_hex(4)
    output = Path(tempfile.gettempdir()) / "oar-fake-agent" / f"{task_id}.output"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("collected 3 items\n...\n3 passed in 0.12s\n")
    emit({"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "toolu_bg", "name": "Bash",
         "input": {"command": "pytest -q", "description": "Run the tests", "run_in_background": True}},
    ]}})
    emit({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_bg",
         "content": f"Command running in background with ID: {task_id}. Output is being written to: {output}"},
    ]}})
    if "#background-done" in prompt:
        emit({"type": "system", "subtype": "task_notification", "task_id": task_id, "status": "completed",
              "output_file": str(output), "summary": "3 passed"})


if __name__ == "__main__":
    sys.exit(main())
