"""Waiting for what another thread or process does: a wake-up signal, then a look at the database.

Every long wait of the relay (a turn's reply, an approval card's decision, an `ask_user`
answer, background tasks going quiet, an external agent's next turn) is the same loop,
written once here: watch the wake-up channels, look at the database, return when the look
is settled, else sleep until the next signal, the moment the look said things change by
themselves (an expiry), or the re-check period, whichever comes first. The database holds
the truth and a signal only says "look again", so a lost signal (Redis restarted) costs
at most one re-check period, never data.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

from oar.core import metrics
from oar.core.db import released_connection
from oar.core.runtime import Runtime

T = TypeVar("T")


@dataclass(frozen=True)
class Look(Generic[T]):
    """What one look at the database found: the value to return, whether the wait is over,
    and, when the state changes by itself before the re-check period (an expiry, a quiet
    spell ending), in how many seconds to look again without a signal (0: at once)."""

    value: T
    settled: bool = False
    again_within: float | None = None


@dataclass(frozen=True)
class CallerWatch:
    """What the caller of a waiting call offers while it waits, set around the call with
    `watched_by`: every wait in that thread calls `pulse` at least every `every_seconds` (an
    MCP progress notification keeps the client's timeout from running out) and asks `gone`
    whether the caller went away (its connection closed, its request cancelled)."""

    pulse: Callable[[], None] = lambda: None
    gone: Callable[[], bool] = lambda: False
    every_seconds: float = 5.0
    # Wake-up channels every wait in the block also wakes on (a cancel is seen at once, not at the next pulse).
    wake_channels: tuple[str, ...] = ()
    # Told when the call starts waiting on the owner (what for) and stops (None): an MCP task says `input_required`.
    on_owner: Callable[[str | None], None] = lambda _what: None
    # Told when the call wrote the prompt it waits on (session id, message id): an MCP task's outcome is then that prompt's.
    on_prompt: Callable[[str, str], None] = lambda _session_id, _message_id: None


class CallerGone(Exception):
    """The caller stopped waiting: nobody will read what the wait would return."""


_caller_watch: ContextVar[CallerWatch | None] = ContextVar("oar_caller_watch", default=None)


@contextlib.contextmanager
def watched_by(watch: CallerWatch) -> Iterator[None]:
    """Waits made in this block (this thread) report to `watch`."""
    token = _caller_watch.set(watch)
    try:
        yield
    finally:
        _caller_watch.reset(token)


def current_watch() -> CallerWatch | None:
    """The watch `watched_by` set for this thread, if any."""
    return _caller_watch.get()


def settled(value: T) -> Look[T]:
    return Look(value, settled=True)


def not_yet(value: T, again_within: float | None = None) -> Look[T]:
    return Look(value, settled=False, again_within=again_within)


def wait_on_signals(
    runtime: Runtime,
    channels: Iterable[str],
    look: Callable[[], Look[T]],
    *,
    recheck_seconds: float,
    seconds: float | None = None,
) -> T:
    """Look until the look is settled, or until `seconds` have passed (None: no limit);
    returns the value of the last look.

    A signal on one of `channels` (wake-up channels of this relay's namespace) wakes it at
    once; without one it looks again every `recheck_seconds`. The wake-up is cleared before
    each look, so a signal sent while it looks is not missed.

    Inside `watched_by`, it pulses the caller's watch between looks and raises `CallerGone`
    once the caller went away.

    While it sleeps it holds no database connection (given back through
    `released_connection`, unless the caller holds a transaction), no transaction, no lock
    and no Redis connection of its own (the process's one `WakeHub` listener wakes it). So a
    `look` never gives its connection back itself: the queries of a look that is not settled
    are given back here, before the sleep, and those of a settled one stay with the caller,
    whose edge (a request's teardown, a turn's service call) gives it back when it is done.

    `seconds` is a finite number of at least 0 (else a ValueError): a `nan` deadline never
    passes, and would hold the caller's thread for good whatever its caller meant.
    """
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a wait takes a finite number of seconds of at least 0, not {seconds!r}")
    deadline = None if seconds is None else time.monotonic() + seconds
    watch = _caller_watch.get()
    if watch is not None and watch.wake_channels:
        channels = [*channels, *watch.wake_channels]
    with runtime.hub.watch(*channels) as woken, metrics.open_wait():
        while True:
            woken.clear()
            found = look()
            if found.settled:
                return found.value
            sleep = recheck_seconds
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return found.value
                sleep = min(sleep, remaining)
            if found.again_within is not None:
                sleep = min(sleep, found.again_within)
            if watch is not None:
                if watch.gone():
                    raise CallerGone()
                watch.pulse()
                sleep = min(sleep, watch.every_seconds)
            with released_connection():
                woken.wait(max(sleep, 0.0))
