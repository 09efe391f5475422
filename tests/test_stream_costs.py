"""What a streamed token costs, bounded (docs/benchmarks.md#provider-streaming-python--m-bench-providers): the reply
text reaches the database a bounded number of times a second whatever the token rate (the
runner's partial writer on a real SQLite database, its clock stepped by the test), and a
stream needs no thread beside it to be stoppable (a real HTTP stream from the fake LLM)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import requests

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message, Session
from oar.engine.partial_writer import PartialWriter
from oar.owner.bootstrap import migrate
from oar.providers.base import TurnControl
from oar.providers.sse import StreamRequest, open_stream
from tests.fakes.llm import FakeLLM


def test_a_fast_stream_writes_its_partial_text_at_most_four_times_a_second(tmp_path: Path) -> None:
    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        session = Session.create(id="s1", title="stream", provider="echo")
        Message.create(id="m1", session=session, role="user", text="go", status="running", partial_text="")
    now = [0.0]
    writer = PartialWriter("m1", defaults.PARTIAL_WRITE_SECONDS, clock=lambda: now[0])
    seen: list[str] = []
    # 1,000 tokens over 10 s: 100 tokens a second, one every 10 ms.
    for number in range(1000):
        now[0] = number * 0.01
        writer.add_text(f" t{number}")
        with database.connection_context():
            stored = Message.get(Message.id == "m1").partial_text or ""
        if not seen or stored != seen[-1]:
            seen.append(stored)
    writes = len(seen)
    assert seen[0] == " t0", "the first token is written at once"
    assert writes <= 10 * 4 + 1, f"{writes} partial writes in 10 s"
    assert writer.text.endswith(" t999") and seen[-1] != writer.text  # the rest waits for the final commit
    database.close()


class OnlyReachability:
    """The relay's side of a bare stream: it hears whether the server answered and is asked nothing else
    (a stream that did would fail this test loudly)."""

    def __init__(self) -> None:
        self.reachable: list[bool] = []

    def note_reachable(self, reachable: bool) -> None:
        self.reachable.append(reachable)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a bare stream asked the relay for {name}")


def test_a_stream_is_stopped_by_its_stop_flag_without_a_watcher_thread() -> None:
    """`#silent`: a little text, then not a byte. Only shutting the socket ends the read."""
    fake = FakeLLM().start()
    http = requests.Session()
    try:
        before = set(threading.enumerate())
        control = TurnControl(OnlyReachability())
        request = StreamRequest(
            name="lab", url=fake.base_url + "/chat/completions",
            headers={"Authorization": f"Bearer {fake.api_key}"},
            body={"model": "m", "messages": [{"role": "user", "content": "#silent"}], "stream": True},
            budget=100, api_key=fake.api_key, connect_timeout=5, read_timeout=60,
        )
        events = open_stream(http, request, control)
        while "waiting" not in next(events).data:
            pass
        beside = [thread.name for thread in set(threading.enumerate()) - before]
        # The fake's own request thread is the only new one: no thread per stream polls the flag.
        assert all(name.endswith("(process_request_thread)") for name in beside), beside
        control.cancelled.set()
        assert list(events) == []  # the read under way ended quietly, long before the read timeout
    finally:
        http.close()
        fake.stop()


def test_a_forked_child_opens_its_own_sqlite_connection(tmp_path: Path) -> None:
    """Connections are pooled (docs/operations.md#durability-and-recovery); one must not cross a fork."""
    import os

    open_database(Config(data_dir=tmp_path))
    migrate()
    with database.connection_context():
        parent = id(database.connection())
    child = os.fork()
    if child == 0:  # the child: exit 0 only if it got a connection of its own
        with database.connection_context():
            mine = id(database.connection())
            Session.select().count()
        os._exit(0 if mine != parent else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child reused the parent's pooled connection"
    database.close()


def test_a_partial_write_is_skipped_not_waited_for_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    import sqlite3

    open_database(Config(data_dir=tmp_path, times={"SQLITE_BUSY_SECONDS": 2}))
    migrate()
    with database.connection_context():
        session = Session.create(id="s1", title="stream", provider="echo")
        Message.create(id="m1", session=session, role="user", text="go", status="running", partial_text="")
    now = [0.0]
    writer = PartialWriter("m1", 0.25, clock=lambda: now[0])
    other = sqlite3.connect(tmp_path / "oar.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write transaction
    try:
        writer.add_text("first")  # the lock is taken: skipped at once (no error, no 2 s wait)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with database.connection_context():
        assert Message.get(Message.id == "m1").partial_text == ""
    writer.add_text(" second")  # tried again with the next text, without waiting for the interval
    with database.connection_context():
        assert Message.get(Message.id == "m1").partial_text == "first second"
        assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 2000  # the wait is back
    database.close()
