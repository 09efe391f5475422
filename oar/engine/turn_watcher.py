"""The watcher thread beside a running turn (docs/operations.md#durability-and-recovery): it
writes the turn's heartbeat (so the reconciler can fail a turn whose worker died), honours
stop requests within a second, ends turns that run past `max_turn_seconds` (time on approval
cards and `ask_user` answers does not count), and copies agent task output into the database
where it is kept there.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import redis

from oar.approvals import cards
from oar.background import output_store
from oar.core import keys
from oar.core.db import database, release_connection
from oar.core.models import Message
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import LIVE_TURN
from oar.core.timeutil import utcnow
from oar.providers.base import CancelEvent

# How long a finished turn waits, after recording its outcome, for its watcher thread to exit.
WATCHER_EXIT_SECONDS = 5


class TurnWatcher(threading.Thread):
    """Heartbeat, stop requests and the turn time limit, beside a running turn."""

    def __init__(
        self, runtime: Runtime, turn: Message, cancelled: CancelEvent, max_seconds: float, *, copies_output: bool = False,
    ) -> None:
        super().__init__(name=f"oar-turn-{turn.id}", daemon=True)
        self.runtime = runtime
        self.turn_id = turn.id
        # The agent runs on this machine and writes its tasks' output here: where output is kept in
        # the database, the watcher copies it there (docs/tasks.md#where-the-output-is-kept).
        self.copies_output = copies_output
        self.cancelled = cancelled
        self.deadline = time.monotonic() + max_seconds
        self._card_credit = 0.0
        self.finished = threading.Event()
        self.stopped = False
        self.timed_out = False

    def run(self) -> None:
        pubsub = self._subscribe()
        heartbeat_every = self.runtime.time("TURN_HEARTBEAT_SECONDS")
        poll_every = self.runtime.time("STOP_POLL_SECONDS")
        copy_every = self.runtime.time("TASK_OUTPUT_COPY_SECONDS") if self.copies_output else math.inf
        next_heartbeat = time.monotonic() + heartbeat_every
        next_copy = time.monotonic() + copy_every
        try:
            while not self.finished.is_set():
                self._wait_for_signal(pubsub, min(poll_every, copy_every))
                if self.finished.is_set():
                    return
                row = Message.get_or_none(Message.id == self.turn_id)
                if row is None or row.stop_requested or row.status not in LIVE_TURN:
                    self.stopped = True
                    self.cancelled.set()
                    return
                if time.monotonic() >= self.deadline and not self._credit_card_waits():
                    self.timed_out = True
                    self.cancelled.set()
                    return
                if time.monotonic() >= next_copy:
                    output_store.mirror_reported(self.runtime, self.turn_id)
                    next_copy = time.monotonic() + copy_every
                if time.monotonic() >= next_heartbeat:
                    Message.update(heartbeat_at=utcnow()).where(Message.id == self.turn_id).execute()
                    next_heartbeat = time.monotonic() + heartbeat_every
                release_connection()  # not held between checks (docs/waiting.md#how-waiting-wakes: waits hold none)
        finally:
            if pubsub is not None:
                pubsub.close()
            database.close()

    def _credit_card_waits(self) -> bool:
        """Time on approval cards does not count either (docs/rules.md#outcomes); the card may wait in another
        process (an agent's HTTP call), so it is read from the cards. True if the deadline moved."""
        waited = cards.seconds_waited(self.turn_id, utcnow())
        credit = waited - self._card_credit
        if credit <= 0:
            return False
        self._card_credit = waited
        self.deadline += credit
        return time.monotonic() < self.deadline

    def pause(self) -> None:
        """Time waiting for an answer does not count toward the turn's time limit."""
        self._paused_at = time.monotonic()

    def resume(self) -> None:
        self.deadline += time.monotonic() - self._paused_at

    def finish(self) -> tuple[bool, bool]:
        """End the watch at once; returns (stopped, timed_out) as they are now.

        It neither waits for the thread to exit nor wakes it (`close` does both, after the
        outcome is recorded): the thread may be in a database check or waiting for a core, and
        neither that wait nor a Redis round trip should come between the stream's end and the
        recorded outcome (docs/benchmarks.md#provider-streaming-python--m-bench-providers). A stop that the watcher sees
        only now came after the reply was complete; a stop that ended the stream had set these
        before it cancelled.
        """
        self.finished.set()
        return self.stopped, self.timed_out

    def close(self) -> None:
        """Wake the thread (it may be blocked waiting for a stop signal) and let it exit."""
        publish(self.runtime.redis, keys.turn_stop_channel(self.runtime.config.namespace, self.turn_id))
        self.join(timeout=WATCHER_EXIT_SECONDS)

    def _subscribe(self) -> Any:
        try:
            pubsub = self.runtime.redis.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(keys.turn_stop_channel(self.runtime.config.namespace, self.turn_id))
            return pubsub
        except redis.RedisError:
            return None

    def _wait_for_signal(self, pubsub: Any, seconds: float) -> None:
        if pubsub is None:
            self.finished.wait(seconds)
            return
        try:
            pubsub.get_message(timeout=seconds)
        except redis.RedisError:
            self.finished.wait(seconds)
