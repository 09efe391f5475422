"""The clock's due-time timer (docs/schedules.md#when-a-schedule-fires): fires schedules and
hands due deliveries to the workers at their due times, never before.

One thread in `oar clock`. It reads the earliest due time from the database (a schedule's
`due_at`, a held event's `due_at`), sleeps until then on an event that the due-time signal
(`keys.due_channel`, published after every write of a due time) sets, and at the due time
compares `utcnow()` with the stored times again: woken early, it only sleeps again. It never
sleeps longer than a reconcile period, so a lost signal (Redis restarted or unreachable)
costs at most that. Nothing is kept here: a killed clock loses nothing, and firing claims
each due time with the same conditional UPDATE as the sweeper, so two clocks, or a timer and
a sweep, never fire one time twice.

Schedules are fired here, in this thread (the message written directly, its turn enqueued):
an RQ job in between would add the queue's wait behind running turns to every firing
(docs/benchmarks.md#schedule-firing-accuracy-python--m-bench-schedules). Deliveries are
enqueued as an immediate job of the due time: one due time may deliver to hundreds of
watchers, which is the workers' work, and schedules must not wait behind it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

from oar.core import defaults, keys
from oar.core.db import database
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.schedules import schedules
from oar.watching import due_jobs, held

log = logging.getLogger("oar.clock")


@dataclass
class DueTimer:
    runtime: Runtime
    stopping: threading.Event
    # Held events due up to this time were handed to a delivery job; the sweeper delivers
    # what that job did not (a lost job, a flushed Redis).
    handed_until: datetime | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="oar-due-timer", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        period = self.runtime.time("RECONCILE_SECONDS")
        channel = keys.due_channel(self.runtime.config.namespace)
        # Registered before the first read of the database and kept: a due time written
        # between a read and the wait still sets the event.
        with self.runtime.hub.watch(channel) as woken:
            while not self.stopping.is_set():
                woken.clear()
                try:
                    wait = self.pass_once(period)
                except Exception:
                    log.exception("due-time timer failed; trying again in %s s", period)
                    wait = period
                    database.close()
                # The connection stays open while firings follow each other (opening one
                # would come at every due time); an idle timer gives it back.
                if wait >= period:
                    database.close()
                woken.wait(wait)

    def pass_once(self, period: float) -> float:
        """Fire and hand over what is due now; return how long to sleep."""
        now = utcnow()
        if self.runtime.settings()["agent_sessions_enabled"]:
            fired = schedules.fire_due(self.runtime, now, announce=False)
            if fired:
                log.info("schedules fired: %s", dict(fired))
            if sum(fired.values()) >= defaults.SCHEDULE_SWEEP_BATCH:
                return 0  # more are due at once than one batch: go on at once
            first_held = held.earliest_due_after(self.handed_until or datetime.min)
            if first_held is not None and first_held <= now:
                due_jobs.enqueue_due(self.runtime, now)
                self.handed_until = now
        # What is due at or before `now` now is paused (agent sessions off), failing or
        # handed over: the sweeper's. The timer sleeps until the next time after it.
        after_held = max(now, self.handed_until) if self.handed_until else now
        upcoming = [due for due in (schedules.next_due_at(now), held.earliest_due_after(after_held)) if due]
        if not upcoming:
            return period
        return max(0.0, min(period, (min(upcoming) - utcnow()).total_seconds()))
