"""Streamed reply text reaches the database a bounded number of times a second, whatever the
token rate (docs/benchmarks.md#provider-streaming): the runner's partial writer on a real
SQLite database, its clock stepped by the test."""

from __future__ import annotations

from pathlib import Path

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database, open_database
from oar.core.models import Message, Session
from oar.engine.runner import PartialWriter
from oar.owner.bootstrap import migrate


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
            stored = Message.get(Message.id == "m1").partial_text
        if not seen or stored != seen[-1]:
            seen.append(stored)
    writes = len(seen)
    assert seen[0] == " t0", "the first token is written at once"
    assert writes <= 10 * 4 + 1, f"{writes} partial writes in 10 s"
    assert writer.text.endswith(" t999") and seen[-1] != writer.text  # the rest waits for the final commit
    database.close()
