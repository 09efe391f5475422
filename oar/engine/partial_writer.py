"""The streamed reply of a running turn, written to its prompt's row now and then (docs/providers.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

import peewee

from oar.core import defaults
from oar.core.db import is_busy, release_connection, without_lock_wait
from oar.core.models import Message
from oar.core.prepared import Prepared

# Made four times a second by every streaming turn: its SQL built once (oar/core/prepared.py).
_WRITE_PARTIAL = Prepared(
    lambda text, activities, turn_id: Message.update(
        partial_text=text, activities=peewee.Value(activities, converter=False)
    ).where(Message.id == turn_id)
)


class PartialWriter:
    """Collects the streamed reply and writes it to the database at most every `interval` s.

    A write rewrites the whole partial text, so its cost grows with the reply: the interval,
    not the token rate, bounds the writes per second (docs/benchmarks.md#provider-streaming-python--m-bench-providers).
    The first text is written at once; the final text is written by `finish`, at once too.
    """

    def __init__(self, turn_id: str, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.turn_id = turn_id
        self.interval = interval
        self.clock = clock
        self.parts: list[str] = []
        self.activities: list[str] = []
        self.last_write: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add_text(self, text: str) -> None:
        self.parts.append(text)
        self._maybe_write()

    def add_activity(self, line: str) -> None:
        self.activities.append(line)
        self._maybe_write(force=True)

    def recent_activities(self) -> list[str] | None:
        """The activity lines a turn keeps (None when it had none), as `finish` writes them."""
        return self.activities[-defaults.TURN_ACTIVITIES_KEPT:] or None

    def _maybe_write(self, force: bool = False) -> None:
        now = self.clock()
        if not (force or self.last_write is None or now - self.last_write >= self.interval):
            return
        # Skipped, not waited for, while another writer holds the lock: the next text tries
        # again, and the thread goes back to reading its stream.
        try:
            with without_lock_wait():
                kept = self.activities[-defaults.TURN_ACTIVITIES_KEPT:]
                _WRITE_PARTIAL.execute(self.text, Message.activities.db_value(kept), self.turn_id)
        except peewee.OperationalError as error:
            if not is_busy(error):
                raise
            return
        finally:
            release_connection()
        self.last_write = now
