"""A session that answered but keeps working in the background reports `done` only after
its tasks have been quiet for a while (docs/waiting.md; 1 s in tests, 10 s by default)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from oar.background.task_views import output_file_time
from oar.core.models import Task
from oar.core.settings import default_cwd
from oar.turns.still_working import quiet_at
from tests.support.clients import Agent
from tests.support.relays import Relay

T0 = datetime(2026, 11, 30, 9, 0, 0)


def test_quiet_is_counted_from_the_answer_and_the_last_output() -> None:
    assert quiet_at(T0, [], 10) == T0 + timedelta(seconds=10)
    assert quiet_at(T0, [T0 - timedelta(minutes=5)], 10) == T0 + timedelta(seconds=10)
    later = T0 + timedelta(seconds=42)
    assert quiet_at(T0, [T0 + timedelta(seconds=3), later], 10) == later + timedelta(seconds=10)


def test_an_empty_output_file_is_no_output_and_a_written_one_gives_its_time(tmp_path: Path) -> None:
    # A worker that claims the task late creates its file late: that is not output, and the
    # quiet spell (and the stalls reported for it) must not begin again there.
    path = tmp_path / "task.log"
    path.touch()
    written = T0 + timedelta(minutes=3)
    os.utime(path, (written.timestamp(), written.timestamp()))
    task = Task(started_at=T0, last_output_at=T0, output_path=str(path))
    assert output_file_time(task) == T0
    path.write_bytes(b"building\n")
    os.utime(path, (written.timestamp(), written.timestamp()))
    assert output_file_time(task) == datetime.fromtimestamp(written.timestamp(), UTC).replace(tzinfo=None)


def test_a_session_still_writing_output_reports_running_with_its_reply(
    relay: Relay, desk: Agent
) -> None:
    relay.settings(allow_shell_tasks=True)
    folder = default_cwd(relay.config).resolve() / "background-job"  # the session's folder: a task sees no other
    folder.mkdir(parents=True, exist_ok=True)
    # Prints a line every 0.3 s for about 4 s, then ends. A shell, not Python: its first line must
    # come within the quiet spell (1 s here), and a Python's start on a loaded machine took longer.
    script = folder / "background-job.sh"
    script.write_text("for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do echo $i; sleep 0.3; done\n")
    command = f"!task sh {script}"
    created = desk.ok("create_session", relay="this", cwd=str(folder), text=f"start the job\n{command}", wait_seconds=2)
    assert created["status"] == "running", created
    assert created["firstReply"]["text"].startswith("echo: start the job")
    assert created["reply"] == created["firstReply"]
    assert created["background"]["running"] == 1
    assert created["background"]["tasks"][0]["status"] == "running"
    assert "still working in the background" in created["note"]
    done = desk.ok("wait", relay="this", session=created["session"], message_id=created["message_id"], wait_seconds=30)
    assert done["status"] == "done" and "background" not in done
    assert done["reply"]["text"] == created["reply"]["text"]


def test_a_quiet_task_lets_the_session_report_done(relay: Relay, desk: Agent) -> None:
    relay.settings(allow_shell_tasks=True)
    created = desk.ok("create_session", relay="this", text="!task sleep 30", wait_seconds=20)
    assert created["status"] == "done"
    read = desk.ok("read_session", relay="this", session=created["session"])
    assert read["state"] == "background_only"
    desk.ok("archive", relay="this", session=created["session"])
