"""The RQ jobs the relay enqueues, by dotted name (`oar` never imports `workers`).

RQ stores these names in Redis with every queued job, so a job keeps its name across
releases: a renamed entry point must leave the old name importable.
"""

from __future__ import annotations

import logging

import redis

from oar.core.models import Setting, Subscription
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime

log = logging.getLogger(__name__)

RUN_TURNS = "workers.turns.run_turns"
# How long Redis keeps a finished turn job. Not 0: RQ deletes such a job from every registry
# as it ends, which costs the worker twice the CPU of letting it expire (0.6 ms more a turn,
# docs/benchmarks.md#provider-streaming-python--m-bench-providers), and every turn of a busy worker ends beside others.
TURN_JOB_KEPT_SECONDS = 10
RUN_TASK = "workers.tasks.run_task"
FIRE_SCHEDULE = "workers.schedules.fire"
INGEST_EVENTS = "workers.delivery.ingest"
DELIVER_DUE = "workers.delivery.deliver_due"
# Checking a paired relay for the answers to this relay's asks kept there.
CHECK_PEER_ASKS = "workers.peers.check_asks"
# Fetching a paired relay's events for the subscriptions this relay's conversations keep there.
FETCH_PEER_EVENTS = "workers.peers.fetch_events"
# Turn what waits for the owner into notifications and send what is due (docs/notifications.md).
SEND_NOTIFICATIONS = "workers.notifications.send_due"
EVERY_JOB = (RUN_TURNS, RUN_TASK, FIRE_SCHEDULE, INGEST_EVENTS, DELIVER_DUE, CHECK_PEER_ASKS, FETCH_PEER_EVENTS,
             SEND_NOTIFICATIONS)
# Written by oar.notifications with every change of the channels: how many there are, so that a
# poke costs one indexed read on a relay that notifies nobody.
NOTIFY_CHANNELS_KEY = "notification_channels"

# Asked after every turn's outcome: their SQL built once (oar/core/prepared.py).
_CHANNEL_COUNT = Prepared(lambda key: Setting.select(Setting.value).where(Setting.key == key).tuples())
_ANY_WATCHER = Prepared(lambda: Subscription.select(Subscription.id).where(Subscription.ended_at.is_null()).limit(1).tuples())


def first_nudge_in_a_while(runtime: Runtime, key: str) -> bool:
    """Whether the reconciler may enqueue a job again for what `key` names (`oar.core.keys`:
    a session's queued turns, a task no worker took): at most once per 12 reconcile periods
    (a minute by default), so that work waiting for a free worker does not flood the queue
    with duplicates. False without Redis, which could not take the job anyway."""
    seconds = max(1, int(12 * runtime.time("RECONCILE_SECONDS")))
    try:
        return bool(runtime.redis.set(key, b"1", nx=True, ex=seconds))
    except redis.RedisError:
        return False


def poke_delivery(runtime: Runtime) -> None:
    """Ask a worker to ingest new events (after they are committed); the clock's sweeper
    does it anyway if Redis is unreachable. The owner's notifications are told too."""
    poke_notifications(runtime)
    if not _ANY_WATCHER.rows():
        return  # nobody watches: the clock's sweeper moves the cursor on
    enqueue_ingestion(runtime)


def enqueue_ingestion(runtime: Runtime) -> None:
    """Ask a worker to ingest new events; the clock's sweeper does it anyway if Redis is unreachable."""
    try:
        runtime.queue.enqueue(INGEST_EVENTS, result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("event ingestion not enqueued (the sweeper will run it): %s", error)


def poke_notifications(runtime: Runtime) -> None:
    """Ask a worker to look for what the owner should hear about (after a card, a question or
    an event is committed); the clock's sweep does it anyway (docs/notifications.md#reliable)."""
    row = _CHANNEL_COUNT.first(NOTIFY_CHANNELS_KEY)
    if row is None or not row[0]:
        return  # no channel: nothing to send
    try:
        runtime.queue.enqueue(SEND_NOTIFICATIONS, result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("notifications not enqueued (the clock's sweep will send them): %s", error)
