"""The clock's "found work?" sweep for notifications (docs/notifications.md#reliable): what a
lost job or a flushed Redis left behind is collected and sent all the same."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import redis

from oar.core import defaults, jobs, keys
from oar.core.runtime import Runtime
from oar.core.statuses import NotificationStatus
from oar.notifications import collect, decision_links, sending
from oar.notifications.models import Notification

log = logging.getLogger(__name__)
_last_pruned: datetime | None = None


def sweep(runtime: Runtime, now: datetime) -> dict[str, int]:
    """Collect what waits unannounced, release the rows of senders that died, and enqueue a
    sender when anything is due (at most once per few reconcile periods); prune old rows hourly."""
    outcome = {"collected": collect.collect(runtime, now), "released": sending.release_lapsed(now), "enqueued": 0}
    if sending.due_now(now) and jobs.first_nudge_in_a_while(runtime, keys.notify_nudge(runtime.config.namespace)):
        try:
            runtime.queue.enqueue(jobs.SEND_NOTIFICATIONS, result_ttl=0, failure_ttl=86_400)
            outcome["enqueued"] = 1
        except redis.RedisError as error:
            log.warning("notification sender not enqueued (the next sweep tries again): %s", error)
    outcome["pruned"] = prune_if_due(now)
    return outcome


def prune_if_due(now: datetime) -> int:
    global _last_pruned
    if _last_pruned is not None and now - _last_pruned < timedelta(hours=1):
        return 0
    _last_pruned = now
    cutoff = now - timedelta(seconds=defaults.NOTIFY_KEEP_SECONDS)
    done = (NotificationStatus.SENT, NotificationStatus.DROPPED, NotificationStatus.FAILED)
    pruned = Notification.delete().where(Notification.status.in_(done) & (Notification.created_at < cutoff)).execute()
    return int(pruned) + collect.prune(now) + decision_links.prune(now)
