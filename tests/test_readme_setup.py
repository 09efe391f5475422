"""The README's first command, run as the README writes it, in a clean copy of the checkout, on a
PATH that holds nothing but `python3` (no `python`, no pip of the system's): it makes `.venv`,
installs into it and starts a relay that answers `/healthz`; Ctrl-C stops it. Then, against that
relay, from another folder: the command line finds it (`oar-relay token …`) and the README's stdio
MCP snippet works as written.

The system's Python is preferred where there is one (`/usr/bin/python3`: on Debian and Ubuntu it is
marked externally managed, PEP 668). The install reaches the package index the way this machine's
pip is configured; once it has, the wheels are kept in a cache of the tests (outside the checkout,
one per set of requirements and Python), and later runs install offline from it. The copy, its
`.venv` and the relay's data are the test's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import requests
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.clients import poll
from tests.support.processes import PROJECT
from tests.support.servers import free_port

pytestmark = [
    pytest.mark.stack,
    # The README's command runs the embedded default (SQLite, embedded Redis) whatever the tests'
    # servers are: the run on the machine's Redis and PostgreSQL would only repeat it.
    pytest.mark.skipif(
        bool(os.environ.get("OAR_TEST_DATABASE_URL") or os.environ.get("OAR_TEST_REDIS_URL")),
        reason="the README's command runs the embedded default; the run on the external servers repeats it",
    ),
]

README = PROJECT / "README.md"
# Left out of the copy: what a fresh clone does not have.
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".git", ".venv", "var", "node_modules", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", ".hypothesis",
)
# The machine's pip configuration (index, certificates), passed on as a person's shell has it.
PIP_SETTINGS = ("PIP_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# Installing the pinned requirements over the network took 20 s to 2 min here.
INSTALL_SECONDS = 900


def readme_commands() -> tuple[str, str]:
    """The README's two commands at its top: run the relay, run the tests."""
    head = README.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    blocks = re.findall(r"\n\n((?:    \S.*\n)+)", head)
    assert len(blocks) == 2, blocks
    return blocks[0].strip(), blocks[1].strip()


def stdio_snippet() -> dict[str, Any]:
    """The README's stdio MCP configuration, as a client reads it."""
    section = README.read_text(encoding="utf-8").split("**stdio**", 1)[1]
    return json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])["mcpServers"]["relay"]


def system_python3() -> Path:
    """The system's python3 where it has one with venv (as on a stock Debian or Ubuntu), else the
    interpreter these tests run on (not a virtual environment's)."""
    system = Path("/usr/bin/python3")
    if system.exists() and subprocess.run([system, "-c", "import ensurepip, venv"], capture_output=True).returncode == 0:
        return system
    return Path(getattr(sys, "_base_executable", sys.executable)).resolve()


def wheel_cache(python3: Path) -> Path:
    """Where the wheels of this requirements file for this Python are kept between runs."""
    version = subprocess.run([python3, "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout
    key = hashlib.sha256((PROJECT / "requirements.txt").read_bytes() + version.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "oar-relay-tests" / f"wheels-{key}"


def clean_copy(destination: Path) -> Path:
    """The checkout as a fresh clone has it: its files, none of what running it left."""
    shutil.copytree(PROJECT, destination, ignore=NOT_IN_A_CLONE, symlinks=True)
    return destination


@dataclass
class FirstRun:
    """The relay the README's first command started in a copy of the checkout."""

    checkout: Path
    env: dict[str, str]
    url: str
    process: subprocess.Popen[str]
    stdout: list[str] = field(default_factory=list)

    def printed(self, prefix: str) -> str | None:
        return next((line for line in list(self.stdout) if line.startswith(prefix)), None)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstRun]:
    folder = tmp_path_factory.mktemp("newcomer")
    checkout = clean_copy(folder / "oar-relay")
    only_python3 = folder / "bin"
    only_python3.mkdir()
    python3 = system_python3()
    (only_python3 / "python3").symlink_to(python3)
    wheels = wheel_cache(python3)
    env = {
        **{key: value for key, value in os.environ.items() if key.startswith(PIP_SETTINGS)},
        "PATH": str(only_python3), "HOME": str(folder / "home"), "LANG": "C.UTF-8", "PORT": str(free_port()),
    }
    if (wheels / ".complete").exists():  # every wheel is there: no index needed
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    run_line, _test_line = readme_commands()
    command = shlex.split(run_line)  # a simple command, as a person types it at a shell's prompt
    assert shlex.join(command) == run_line, run_line
    log = open(folder / "first-run.log", "w")  # closed after the process
    process = subprocess.Popen(
        command, cwd=checkout, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=log, text=True, start_new_session=True,
    )
    started = FirstRun(checkout, env, f"http://127.0.0.1:{env['PORT']}", process)
    reader = threading.Thread(target=lambda: started.stdout.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        def healthy() -> bool:
            assert process.poll() is None, (folder / "first-run.log").read_text()[-3000:]
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{started.url}/healthz", timeout=5).status_code == 200 and bool(
                    started.printed("OAR relay ")
                )
            return False

        poll("the README's first command to start a healthy relay", healthy, seconds=INSTALL_SECONDS, every=0.5)
        yield started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in its terminal
        try:
            stopped = process.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stopped = process.wait(30)
        reader.join(10)
        log.close()
    assert stopped == 0, (folder / "first-run.log").read_text()[-3000:]
    if not (wheels / ".complete").exists():
        keep_wheels(checkout, wheels)


def keep_wheels(checkout: Path, wheels: Path) -> None:
    """The wheels of the requirements, built or downloaded by the copy's own pip, for the next run."""
    done = subprocess.run(
        [checkout / ".venv" / "bin" / "python", "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "-r", checkout / "requirements.txt", "-w", wheels], capture_output=True, text=True, timeout=INSTALL_SECONDS,
    )
    if done.returncode == 0:
        (wheels / ".complete").touch()


def test_the_readmes_first_command_makes_its_environment_and_starts_a_healthy_relay(first_run: FirstRun) -> None:
    assert shutil.which("python", path=first_run.env["PATH"]) is None
    assert (first_run.checkout / ".venv" / "bin" / "python").exists()
    listening = first_run.printed("OAR relay ")
    assert listening is not None and listening.rstrip().endswith(f"listening on {first_run.url}"), first_run.stdout
    assert first_run.printed("Owner token (shown once; keep it): oar_o_")
    assert (first_run.checkout / "var" / "oar.db").exists()  # the checkout's data dir


def owner_token(first_run: FirstRun) -> str:
    line = first_run.printed("Owner token (shown once; keep it): ")
    assert line is not None
    return line.rsplit(" ", 1)[1].strip()


def conversation(first_run: FirstRun, title: str) -> str:
    """A conversation on the relay, with agent sessions on: its id."""
    headers = {"Authorization": f"Bearer {owner_token(first_run)}"}
    requests.patch(f"{first_run.url}/api/v1/owner/settings", json={"agent_sessions_enabled": True},
                   headers=headers, timeout=30).raise_for_status()
    created = requests.post(f"{first_run.url}/api/v1/owner/sessions", json={"title": title}, headers=headers, timeout=30)
    created.raise_for_status()
    return created.json()["session"]["id"]


def test_oar_relay_token_from_another_folder_finds_this_relay(first_run: FirstRun, tmp_path: Path) -> None:
    session_id = conversation(first_run, "from elsewhere")
    done = subprocess.run(
        [first_run.checkout / "oar-relay", "token", "--session", session_id], cwd=tmp_path, env=first_run.env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    answer = requests.post(f"{first_run.url}/api/v1/relay_tool", json={"action": "list_relays"},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["ok"] is True
    assert list(tmp_path.iterdir()) == []


def test_the_readmes_stdio_snippet_works_from_another_folder(first_run: FirstRun, tmp_path: Path) -> None:
    """The snippet as written, its path the copy's and its URL and token this relay's; started by
    the SDK's stdio client from another folder, as a client starts it. The bridge's stderr holds
    no line per forwarded request."""
    token = requests.post(
        f"{first_run.url}/api/v1/owner/sessions/{conversation(first_run, 'over stdio')}/tokens",
        headers={"Authorization": f"Bearer {owner_token(first_run)}"}, timeout=30,
    ).json()["token"]
    snippet = stdio_snippet()
    assert snippet["command"] == "/path/to/oar-relay/oar-relay" and snippet["args"] == ["mcp"]
    env = {**snippet["env"], "OAR_URL": first_run.url, "OAR_TOKEN": token}
    assert set(env) == {"OAR_URL", "OAR_TOKEN"}
    server = StdioServerParameters(
        command=snippet["command"].replace("/path/to/oar-relay", str(first_run.checkout)), args=snippet["args"],
        env=env, cwd=str(tmp_path),
    )
    errors = tmp_path / "bridge-stderr.log"

    async def main() -> tuple[list[types.Tool], types.CallToolResult]:
        with anyio.fail_after(120), errors.open("w") as errlog:
            async with stdio_client(server, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                    return tools, await session.call_tool("relay_tool", {"action": "list_relays"})

    tools, listed = anyio.run(main)
    assert [tool.name for tool in tools] == ["relay_tool"]
    text = listed.content[0]
    assert isinstance(text, types.TextContent) and json.loads(text.text)["ok"] is True
    assert "HTTP Request" not in errors.read_text()
