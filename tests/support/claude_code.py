"""The Claude Code CLI as its users run it, against a relay and a scripted fake Anthropic API
(tests/fakes/anthropic_script.py).

The CLI is the one pinned in tests/claude_code/package.json (`npm ci --prefix tests/claude_code`,
as `.ci/run` does). Each `ClaudeCode` has a home folder of its own (its settings, its MCP
servers) and a project folder it works in; it talks to nothing but the fake and the relay
(telemetry and other traffic off). The relay is added as the README says (`claude mcp add
--transport http relay <relay>/mcp --header "Authorization: Bearer …"`), and a session runs
either as users run it in a terminal (`start`: the interactive CLI on a pseudo-terminal) or
headless (`print`: `claude -p`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import termios
import threading
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_script import ScriptedAnthropic
from tests.support.clients import poll
from tests.support.processes import PROJECT

PACKAGE = PROJECT / "tests" / "claude_code"
CLAUDE = PACKAGE / "node_modules" / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
# The relay's one tool as Claude Code names it (server "relay"), and the call that loads it:
# Claude Code defers MCP tools behind ToolSearch.
RELAY_TOOL = "mcp__relay__relay_tool"
LOAD_RELAY_TOOL = {"query": f"select:{RELAY_TOOL}"}
# The package's placeholder for its native binary is a few hundred bytes; the binary is hundreds of megabytes.
PLACEHOLDER_MAX_BYTES = 1_000_000
# The pseudo-terminal's size (rows, columns).
TERMINAL = (50, 200)


def installed() -> bool:
    """Whether the pinned CLI is installed: its native binary in place, not the package's placeholder (a
    short shell script that says the binary is missing, left where the package's postinstall did not run)."""
    return CLAUDE.is_file() and os.access(CLAUDE, os.X_OK) and CLAUDE.stat().st_size > PLACEHOLDER_MAX_BYTES


class ClaudeCode:
    """One user's Claude Code: its home and project folders under `folder`, its model the fake."""

    def __init__(self, folder: Path, fake: ScriptedAnthropic) -> None:
        self.home = folder / "home"
        self.project = folder / "project"
        self.home.mkdir(parents=True)
        self.project.mkdir(parents=True)
        self.fake = fake
        self.process: subprocess.Popen[bytes] | None = None
        self.screen = bytearray()
        self._reader: threading.Thread | None = None
        self._settle_first_run()

    def env(self) -> dict[str, str]:
        """Its whole environment: nothing of the tests' own."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "TERM": "xterm-256color",
            "ANTHROPIC_BASE_URL": self.fake.base_url, "ANTHROPIC_API_KEY": self.fake.api_key,
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def _settle_first_run(self) -> None:
        """What a user answers once on first run: onboarding done, the API key and the project trusted."""
        config = {
            "hasCompletedOnboarding": True, "theme": "dark",
            "customApiKeyResponses": {"approved": [self.fake.api_key[-20:]], "rejected": []},
            "projects": {str(self.project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
        }
        (self.home / ".claude.json").write_text(json.dumps(config))

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`claude <args>` in the project folder, to its end."""
        return subprocess.run([str(CLAUDE), *args], cwd=self.project, env=self.env(), capture_output=True,
                              text=True, timeout=timeout, check=False)

    def add_relay(self, relay_url: str, token: str) -> None:
        """The README's step: `claude mcp add --transport http relay <relay>/mcp --header "Authorization: Bearer …"`."""
        added = self.run("mcp", "add", "--transport", "http", "relay", f"{relay_url}/mcp",
                         "--header", f"Authorization: Bearer {token}")
        assert added.returncode == 0, added.stderr or added.stdout

    def print(self, prompt: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Headless: `claude -p <prompt> --output-format stream-json`, its events once it ends."""
        done = self.run("-p", prompt, "--output-format", "stream-json", "--verbose", "--allowedTools", RELAY_TOOL,
                        timeout=timeout)
        assert done.returncode == 0, (done.stderr or done.stdout)[-3000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def start(self, prompt: str) -> None:
        """Interactive, on a pseudo-terminal, as a user types `claude "<prompt>"` (the relay tool allowed)."""
        leader, follower = os.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", *TERMINAL, 0, 0))
        try:
            self.process = subprocess.Popen(
                [str(CLAUDE), prompt, "--allowedTools", RELAY_TOOL], cwd=self.project, env=self.env(),
                stdin=follower, stdout=follower, stderr=follower, start_new_session=True,
            )
        finally:
            os.close(follower)
        self._reader = threading.Thread(target=self._read, args=(leader,), name="claude-code-terminal", daemon=True)
        self._reader.start()

    def _read(self, leader: int) -> None:
        """Keep reading the terminal (a full one would stop the CLI), until it closes."""
        with contextlib.suppress(OSError):
            while chunk := os.read(leader, 65536):
                self.screen.extend(chunk)
        os.close(leader)

    def until_finished(self, seconds: float = 60) -> None:
        """Wait until the fake answered the script's last step (the interactive CLI does not end by itself)."""
        def done() -> bool:
            assert self.process is None or self.process.poll() is None, f"Claude Code exited: {self.tail()}"
            return self.fake.finished()

        try:
            poll("Claude Code to reach the end of its script", done, seconds=seconds, every=0.1)
        except AssertionError as error:
            sent = [text[:300] for text in self.fake.sent_back()]
            raise AssertionError(f"{error}; it sent its model {sent}; its terminal ends: {self.tail(1500)!r}") from None

    def stop(self) -> None:
        """End the interactive session: SIGTERM to its process group, SIGKILL if it lingers."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(10)

    def tail(self, size: int = 3000) -> str:
        """The end of what it wrote on its terminal (for failure messages)."""
        return bytes(self.screen[-size:]).decode(errors="replace")
