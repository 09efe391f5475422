"""The one wait primitive: a signal or a re-check, and the caller's watch around it."""

from __future__ import annotations

import pytest

from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.waiting import CallerGone, CallerWatch, Look, not_yet, settled, wait_on_signals, watched_by
from tests.support.relays import Relay


@pytest.fixture
def runtime(relay: Relay) -> Runtime:
    return relay.runtime


def test_it_returns_when_a_signal_makes_the_look_settle(runtime: Runtime) -> None:
    channel = f"{runtime.config.namespace}:wake:turn:t1"
    looks: list[int] = []

    def look() -> Look[int]:
        looks.append(1)
        if len(looks) == 1:
            publish(runtime.redis, channel)  # what another process does meanwhile
            return not_yet(0)
        return settled(len(looks))

    # A re-check period far longer than any test: only the signal can end the wait.
    assert wait_on_signals(runtime, [channel], look, recheck_seconds=3600) == 2


def test_it_pulses_the_callers_watch_and_stops_when_the_caller_is_gone(runtime: Runtime) -> None:
    pulses: list[int] = []
    watch = CallerWatch(pulse=lambda: pulses.append(1), gone=lambda: len(pulses) >= 3, every_seconds=0.01)
    with watched_by(watch), pytest.raises(CallerGone):
        wait_on_signals(runtime, [f"{runtime.config.namespace}:wake:turn:t2"], lambda: not_yet(None), recheck_seconds=3600)
    assert len(pulses) == 3


def test_outside_a_watch_the_wait_ends_at_its_deadline(runtime: Runtime) -> None:
    found = wait_on_signals(runtime, [f"{runtime.config.namespace}:wake:turn:t3"], lambda: not_yet("last"),
                            recheck_seconds=3600, seconds=0.05)
    assert found == "last"
