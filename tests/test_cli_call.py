"""`oar call` as a subprocess: the JSON answer on stdout, a spinner on stderr only when it is a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import FAST_TIMES, Relay, relay_environment


def call_environment(relay: Relay, token: str, url: str | None = None) -> dict[str, str]:
    return {**relay_environment(relay.config, FAST_TIMES), "OAR_TOKEN": token, "OAR_URL": url or relay.url}


def test_a_waiting_call_spins_on_a_terminal_and_prints_only_the_answer(relay: Relay, desk: Agent) -> None:
    other = desk.ok("create_session", relay="this", text="hello")["session"]
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "oar", "call", "send", "relay=this", f"session={other}", "text=!sleep 1\nhi"],
            cwd=PROJECT, env=call_environment(relay, desk.token), stdout=subprocess.PIPE, stderr=terminal,
            timeout=120,
        )
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other side is closed: all it showed was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    answer = json.loads(done.stdout)
    assert answer["status"] == "done" and answer["reply"]["text"].startswith("echo: hi")
    screen = shown.decode()
    assert f"send on {relay.url}" in screen and "⠋" in screen
    assert screen.endswith("\r\x1b[K")  # the spinner's line is cleared at the end


def test_without_a_terminal_it_prints_the_answer_alone_and_says_when_the_relay_is_not_there(
    relay: Relay, desk: Agent
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oar", "call", "list_relays"], cwd=PROJECT,
        env=call_environment(relay, desk.token), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["ok"] is True
    gone = subprocess.run(
        [sys.executable, "-m", "oar", "call", "list_relays"], cwd=PROJECT,
        env=call_environment(relay, desk.token, url="http://127.0.0.1:9"), capture_output=True, text=True, timeout=120,
    )
    assert gone.returncode == 1 and gone.stdout == ""
    assert "oar call: the relay at http://127.0.0.1:9 did not answer" in gone.stderr


def test_a_reader_that_stops_early_ends_the_call_quietly(relay: Relay, desk: Agent) -> None:
    """`oar call … | head -c 40`: the reader closes the pipe before the answer is written; the
    command ends without a traceback (a shell's pipeline status, 141) rather than crashing."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "oar", "call", "list_relays"], cwd=PROJECT,
            env=call_environment(relay, desk.token), stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(writer)
    assert done.returncode == 141
    assert done.stderr == ""
