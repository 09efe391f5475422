"""Sending what is due in the outbox (docs/notifications.md#reliable).

Each row is claimed with a conditional UPDATE (pending → sending, with a lease), sent outside
any transaction, and marked sent, or pending again with a later due time (bounded retries with
back-off), or failed. A row whose cards and questions were all answered meanwhile is dropped
unsent; one inside the owner's quiet hours waits for their end (cards and questions only when
the owner chose so). A failing channel keeps its last error and holds up no other channel: each
channel's rows are sent in a thread of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from math import ceil
from typing import Any

import redis

from oar.core import defaults, jobs, keys, metrics
from oar.core.db import database, released_connection, write_transaction
from oar.core.runtime import Runtime
from oar.core.statuses import NotificationStatus
from oar.notifications import offers, transports, webpush
from oar.notifications.collect import collect, still_waiting
from oar.notifications.kinds import ANSWERABLE, URGENT, ChannelType, Kind
from oar.notifications.models import Channel, Notification, PushSubscription
from oar.notifications.quiet import owner_quiet_hours
from oar.watching import quiet_hours

log = logging.getLogger(__name__)

SEND_BATCH = 20
# Channels sent to at once by one job (each in a thread of its own).
MAX_CHANNELS_AT_ONCE = 8
EARLY_WAIT_SECONDS = 2.0


def run(runtime: Runtime, now: Callable[[], datetime]) -> int:
    """The job: turn what waits into outbox rows, send what is due, and enqueue the job of the
    next due time; returns how many rows were sent."""
    collect(runtime, now())
    sent = send_due(runtime, now)
    # RQ's scheduler starts a job up to a second early, and a merge window may end in a moment:
    # what is due that soon is waited for here rather than handed to another job.
    while (due := next_due(now())) is not None and (wait := (due - now()).total_seconds()) <= EARLY_WAIT_SECONDS:
        with released_connection():
            time.sleep(max(0.0, wait))
        sent += send_due(runtime, now)
    schedule_next(runtime, now())
    return sent


def send_due(runtime: Runtime, now: Callable[[], datetime]) -> int:
    """Send every row that is due; returns how many went out. Each channel's rows go out in a
    thread of their own, one after the other, so that a slow or failing service (up to its
    timeout per send) holds up no other channel."""
    release_lapsed(now())
    sent = 0
    while True:
        at = now()
        due = list(
            Notification.select(Notification.id, Notification.channel)
            .where((Notification.status == NotificationStatus.PENDING) & (Notification.due_at <= at))
            .order_by(Notification.due_at, Notification.id).limit(SEND_BATCH)
        )
        if not due:
            return sent
        by_channel: dict[str, list[int]] = {}
        for row in due:
            by_channel.setdefault(row.channel_id, []).append(row.id)
        if len(by_channel) == 1:
            sent += _send_rows(runtime, next(iter(by_channel.values())), now)
            continue
        with ThreadPoolExecutor(max_workers=min(MAX_CHANNELS_AT_ONCE, len(by_channel))) as pool:
            sent += sum(pool.map(lambda ids: _send_in_thread(runtime, ids, now), by_channel.values()))


def _send_rows(runtime: Runtime, row_ids: list[int], now: Callable[[], datetime]) -> int:
    sent = 0
    for row_id in row_ids:
        claimed = claim(runtime, row_id, now())
        if claimed is not None and send_one(runtime, claimed, now):
            sent += 1
    return sent


def _send_in_thread(runtime: Runtime, row_ids: list[int], now: Callable[[], datetime]) -> int:
    """One channel's rows in a thread of the pool, which gives its own connection back at the end."""
    try:
        return _send_rows(runtime, row_ids, now)
    finally:
        database.close()


def release_lapsed(now: datetime) -> int:
    """Rows whose sender died mid-send are due again (they may go out twice, never not at all).
    Looked for first: the clock calls this every period, and an UPDATE would take SQLite's write
    lock even when it changes nothing."""
    lapsed = (Notification.status == NotificationStatus.SENDING) & (Notification.lease_until < now)
    if not Notification.select(Notification.id).where(lapsed).exists():
        return 0
    return int(Notification.update(status=NotificationStatus.PENDING, lease_until=None).where(lapsed).execute())


def claim(runtime: Runtime, row_id: int, now: datetime) -> Notification | None:
    lease = now + timedelta(seconds=runtime.time("NOTIFY_SEND_LEASE_SECONDS"))
    with write_transaction():
        claimed = (
            Notification.update(status=NotificationStatus.SENDING, lease_until=lease, attempts=Notification.attempts + 1)
            .where((Notification.id == row_id) & (Notification.status == NotificationStatus.PENDING)
                   & (Notification.due_at <= now))
            .execute()
        )
    return Notification.get_or_none(Notification.id == row_id) if claimed == 1 else None


def hold_end(kind: str, settings: dict[str, Any], now: datetime) -> datetime | None:
    """The end of the owner's quiet hours when they hold a notification of `kind` at `now`, else
    None: cards and questions go out inside them unless the owner chose to hold them too; a
    test never waits."""
    if kind == Kind.TEST or (kind in URGENT and not settings.get("notify_quiet_hours_hold_all")):
        return None
    quiet = owner_quiet_hours(settings)
    window = quiet_hours.window_around(quiet, now) if quiet is not None else None
    return window[1] if window is not None else None


def send_one(runtime: Runtime, row: Notification, now: Callable[[], datetime]) -> bool:
    """Send one claimed row; True when it went out."""
    channel = Channel.get_or_none(Channel.name == row.channel_id)
    if channel is None:
        return False  # deleted meanwhile, and its rows with it
    if row.kind in ANSWERABLE:
        waiting = still_waiting(list(row.subjects or []))
        if not waiting:
            _settle(row, NotificationStatus.DROPPED, now(), error="answered before it was sent")
            return False
    until = hold_end(row.kind, runtime.settings(), now())
    if until is not None:
        Notification.update(
            status=NotificationStatus.PENDING, due_at=until, lease_until=None, attempts=Notification.attempts - 1,
        ).where((Notification.id == row.id) & (Notification.status == NotificationStatus.SENDING)).execute()
        return False
    error = deliver(runtime, channel, row, now())
    at = now()
    metrics.notification_handed(
        str(channel.type), "sent" if error is None else "failed" if row.attempts >= defaults.NOTIFY_ATTEMPTS else "retry",
    )
    if error is None:
        with write_transaction():
            _settle(row, NotificationStatus.SENT, at)
            Channel.update(last_sent_at=at, last_error=None, last_error_at=None).where(Channel.name == channel.name).execute()
        return True
    log.warning("notification %s to channel %s not sent (attempt %s): %s", row.id, channel.name, row.attempts, error)
    with write_transaction():
        if row.attempts >= defaults.NOTIFY_ATTEMPTS:
            _settle(row, NotificationStatus.FAILED, at, error=error)
        else:
            retry = at + timedelta(seconds=runtime.time("NOTIFY_RETRY_SECONDS") * 4 ** (row.attempts - 1))
            Notification.update(status=NotificationStatus.PENDING, due_at=retry, lease_until=None, error=error).where(
                (Notification.id == row.id) & (Notification.status == NotificationStatus.SENDING)
            ).execute()
        Channel.update(last_error=error, last_error_at=at).where(Channel.name == channel.name).execute()
    return False


def _settle(row: Notification, status: NotificationStatus, at: datetime, error: str | None = None) -> None:
    Notification.update(status=status, sent_at=at if status == NotificationStatus.SENT else None,
                        lease_until=None, error=error).where(
        (Notification.id == row.id) & (Notification.status == NotificationStatus.SENDING)
    ).execute()


def deliver(runtime: Runtime, channel: Channel, row: Notification, now: datetime) -> str | None:
    """Hand the row to its channel, with decision links and buttons where the channel sends
    them (oar.notifications.offers); None when it was taken, else the error (never the URL)."""
    if channel.type == ChannelType.PAGE:
        return None  # the open page shows sent rows of page channels (oar.notifications.feed)
    if channel.type == ChannelType.URL and channel.url:
        offered = offers.offers_for(runtime, channel, _subjects(row), now)
        body = offers.message_text(row.body, offered, row.link)
        extras = offers.ntfy_extras(runtime, offered) if transports.is_ntfy(channel.url) else {}
        return transports.send_url(channel.url, row.title, body, runtime.time("NOTIFY_SEND_TIMEOUT_SECONDS"), extras)
    if channel.type == ChannelType.WEBPUSH:
        return push_to_browsers(runtime, channel, row, now)
    return f"channel type {channel.type} cannot send"


def _subjects(row: Notification) -> list[str]:
    """The cards and questions a notification announces (none for the other kinds)."""
    return list(row.subjects or []) if row.kind in ANSWERABLE else []


def push_to_browsers(runtime: Runtime, channel: Channel, row: Notification, now: datetime) -> str | None:
    """Push to every subscribed browser this row has not reached yet, each with tokens of its
    own; a gone subscription (404, 410) is removed. None when every browser left has it, else
    the first error."""
    browsers = webpush.listed()
    if not browsers:
        return "no browser has subscribed to Web Push yet (Settings: Web Push on this browser)"
    reached = list(row.pushed_to or [])
    errors: list[str] = []
    for browser in browsers:
        if browser.id in reached:
            continue
        offered = offers.push_fields(offers.offers_for(runtime, channel, _subjects(row), now), row.link)
        data = webpush.payload(row.title, row.body, **offered)
        outcome = webpush.push(browser, data, runtime.config, runtime.time("NOTIFY_SEND_TIMEOUT_SECONDS"))
        if outcome.gone:
            PushSubscription.delete().where(PushSubscription.id == browser.id).execute()
            log.info("push subscription %s is gone (its push service said so): removed", browser.id)
        elif outcome.error:
            errors.append(outcome.error)
        else:
            reached.append(browser.id)
            Notification.update(pushed_to=reached).where(Notification.id == row.id).execute()
    return errors[0] if errors else None


def next_due(now: datetime) -> datetime | None:
    row = (
        Notification.select(Notification.due_at)
        .where((Notification.status == NotificationStatus.PENDING) & (Notification.due_at > now))
        .order_by(Notification.due_at).first()
    )
    return row.due_at if row is not None else None


def schedule_next(runtime: Runtime, now: datetime) -> None:
    """Enqueue the job of the next due time (one job per time; RQ's scheduler may start it a
    little early, and that run finds nothing due and enqueues it again)."""
    due = next_due(now)
    if due is None:
        return
    stamp = ceil(due.replace(tzinfo=UTC).timestamp() * 1000)
    try:
        runtime.queue.enqueue_at(due.replace(tzinfo=UTC), jobs.SEND_NOTIFICATIONS, job_id=keys.notify_job_id(stamp),
                                 result_ttl=0, failure_ttl=86_400)
    except redis.RedisError as error:
        log.warning("notifications due at %s not enqueued (the clock's sweep will send them): %s", due, error)


def due_now(now: datetime) -> bool:
    return (
        Notification.select(Notification.id)
        .where((Notification.status == NotificationStatus.PENDING) & (Notification.due_at <= now)).exists()
    )
