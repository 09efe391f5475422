"""What `/metrics` reads from the database and Redis at scrape time (docs/operations.md#watching-it).

States, not events: turns queued and running, tasks running, cards and questions waiting for
the owner, held events and how late delivery and ingestion run, schedules due, notifications
waiting, paired relays' links and the queue's depth. Each is one indexed count (or a small
table's rows) read when Prometheus asks, rather than a gauge that every process changing the
state would have to keep right: read here it is right after a crash, a restart or a flushed
Redis, and it costs nothing between scrapes. They are the whole relay's, the same through every
node that shares its database. Counted events (requests, calls, turns that ended…) come from
the processes' own files (`oar.core.metrics`).

Only counts, ages and statuses: no title, prompt, name or URL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import redis
from peewee import fn
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from oar import __version__
from oar.core.models import Card, Event, HeldEvent, Message, Question, Schedule, Setting, Task
from oar.core.runtime import Runtime
from oar.core.statuses import CardStatus, NotificationStatus, QuestionStatus, TaskStatus, TurnStatus
from oar.core.timeutil import utcnow
from oar.federation.models import Peer
from oar.notifications.models import Notification
from oar.watching.held import CURSOR_KEY

# Turn statuses counted at scrape time (those that end are counted as they end: oar_turn_duration_seconds).
OPEN_TURN_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING_FOR_ANSWER)
# A paired relay's link, as the relay last saw it (docs/relays.md#the-link).
LINK_STATES = ("online", "offline", "lost", "untried")


class RelayGauges(Collector):
    """The scrape-time gauges of one relay."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = utcnow()
        yield _one("oar_relay_info", "This relay's version (the value is 1)", 1, {"version": __version__})
        yield _by("oar_turns", "Turns not ended, by status", "status", _turns())
        yield _one("oar_tasks_running", "Background tasks running", _count(Task.select().where(Task.status == TaskStatus.RUNNING)))
        yield _by("oar_pending_decisions", "Approval cards and questions waiting for the owner, by kind", "kind", {
            "card": _count(Card.select().where(Card.status == CardStatus.PENDING)),
            "question": _count(Question.select().where(Question.status == QuestionStatus.PENDING)),
        })
        yield _one("oar_held_events", "Events held for watchers, not yet delivered",
                   _count(HeldEvent.select().where(HeldEvent.delivered_at.is_null())))
        yield _one("oar_event_delivery_lag_seconds", "How long the oldest due, undelivered held event is overdue (0: none)",
                   _delivery_lag(now))
        pending, ingestion_lag = _ingestion(now)
        yield _one("oar_events_not_ingested", "Events written but not yet read by the delivery engine", pending)
        yield _one("oar_event_ingestion_lag_seconds", "Age of the oldest event not yet read by the delivery engine (0: none)",
                   ingestion_lag)
        yield _by("oar_schedules", "Schedules that will fire, by whether their time has come (due) or not (waiting)", "state", {
            "due": _count(Schedule.select().where(Schedule.due_at <= now)),
            "waiting": _count(Schedule.select().where(Schedule.due_at > now)),
        })
        yield _one("oar_notifications_pending", "Notifications waiting to be sent",
                   _count(Notification.select().where(Notification.status == NotificationStatus.PENDING)))
        yield _by("oar_paired_relays", "Paired relays by the state of their link", "state", _links())
        queue = self._queue()
        if queue is not None:
            yield _by("oar_queue_jobs", "Jobs in the relay's RQ queue, by state", "state", queue)

    def _queue(self) -> dict[str, float] | None:
        """The queue's depths; None when Redis does not answer (the health check says so)."""
        queue = self.runtime.queue
        try:
            return {
                "queued": queue.count,
                "scheduled": queue.scheduled_job_registry.count,
                "started": queue.started_job_registry.count,
                "failed": queue.failed_job_registry.count,
            }
        except redis.RedisError:
            return None


def _turns() -> dict[str, float]:
    rows = (Message.select(Message.status, fn.COUNT(Message.id)).where(Message.status.in_(OPEN_TURN_STATUSES))
            .group_by(Message.status).tuples())
    counted: dict[str, int] = {row[0]: row[1] for row in list[Any](rows)}
    return {str(status): counted.get(status, 0) for status in OPEN_TURN_STATUSES}


def _delivery_lag(now: datetime) -> float:
    oldest = (HeldEvent.select(fn.MIN(HeldEvent.due_at))
              .where(HeldEvent.delivered_at.is_null() & (HeldEvent.due_at <= now)).scalar())
    return _age(oldest, now)


def _ingestion(now: datetime) -> tuple[float, float]:
    """Events past the delivery engine's cursor, and the age of the oldest (none while nobody
    watches: the engine has no cursor, and the clock moves past what nobody would receive)."""
    cursor = Setting.select(Setting.value).where(Setting.key == CURSOR_KEY).scalar()
    if cursor is None:
        return 0, 0.0
    after = Event.select().where(Event.seq > int(cursor))
    oldest = Event.select(fn.MIN(Event.created_at)).where(Event.seq > int(cursor)).scalar()
    return _count(after), _age(oldest, now)


def _links() -> dict[str, float]:
    states = dict.fromkeys(LINK_STATES, 0.0)
    for peer in Peer.select(Peer.link_lost_at, Peer.last_error, Peer.last_answered_at):
        if peer.link_lost_at is not None:
            states["lost"] += 1
        elif peer.last_error is not None:
            states["offline"] += 1
        elif peer.last_answered_at is not None:
            states["online"] += 1
        else:
            states["untried"] += 1
    return states


def _count(query: Any) -> float:
    return float(query.count())


def _age(oldest: datetime | None, now: datetime) -> float:
    return max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0


def _one(name: str, documentation: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


def _by(name: str, documentation: str, label: str, values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family
