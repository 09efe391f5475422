"""The delivery jobs of due times: one RQ job per due time delivers to every watcher due by then.

A due time still to come is also announced to the clock's due-time timer
(`oar.engine.due_timer`), which enqueues the job of that time at the time itself: RQ's
scheduler keeps whole seconds and polls once a second, so its copy may start early (the job
then waits or enqueues itself again, `delivering.run_due_job`) or a second late. The one
that comes first delivers; the other finds nothing (the claims keep delivery single).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from math import ceil

import redis

from oar.core import jobs, keys
from oar.core.runtime import Runtime
from oar.core.timeutil import iso, utcnow
from oar.watching import held

log = logging.getLogger(__name__)


def schedule_next(runtime: Runtime, watcher_id: str) -> None:
    """Enqueue the delivery job of the watcher's next due time.
    One job per due time (`workers.delivery.deliver_due`) delivers to every watcher due by
    then, one after the other: the watchers whose windows one batch of events opened share a
    due time, and a job each would only queue up for the database's write lock (on SQLite,
    hundreds of writers polling for it starve the relay's other writes).
    """
    due = held.next_due(watcher_id)
    if due is not None:
        enqueue_due(runtime, due)


def enqueue_due(runtime: Runtime, due: datetime, suffix: str = "") -> None:
    stamp = ceil(due.replace(tzinfo=UTC).timestamp() * 1000)  # never before `due`
    try:
        if due <= utcnow():
            # Not the id of the scheduled copy of the same due time (the timer enqueues at the
            # due time itself, within its millisecond): RQ ran both under one id and deleted the
            # job under whichever ended second, which then failed (InvalidJobOperation).
            job_id = keys.delivery_job_id(stamp, f"{suffix}-now")
            runtime.queue.enqueue(jobs.DELIVER_DUE, stamp, job_id=job_id, result_ttl=0, failure_ttl=86_400)
        else:
            runtime.queue.enqueue_at(due.replace(tzinfo=UTC), jobs.DELIVER_DUE, stamp,
                                     job_id=keys.delivery_job_id(stamp, suffix), result_ttl=0, failure_ttl=86_400)
            runtime.signal_due()
    except redis.RedisError as error:
        log.warning("delivery at %s not enqueued (the sweeper will deliver): %s", iso(due), error)
