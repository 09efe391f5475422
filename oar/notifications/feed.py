"""What the owner's open page shows (docs/notifications.md#the-open-page): the browser
notifications of page channels, sent within the last `NOTIFY_PAGE_RECENT_SECONDS`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from peewee import fn

from oar.core import defaults
from oar.core.statuses import NotificationStatus
from oar.notifications.kinds import ChannelType
from oar.notifications.models import Channel, Notification

FEED_BATCH = 20


def page_feed(after: int | None, now: datetime) -> dict[str, Any]:
    """Page notifications with an id above `after`, oldest first, and the newest id. A page that
    gives no `after` (just opened) gets only the newest id: it shows what comes next, not what
    went out before it was open."""
    page_channels = Channel.select(Channel.name).where(Channel.type == ChannelType.PAGE)
    sent = (Notification.status == NotificationStatus.SENT) & Notification.channel.in_(page_channels)
    newest = Notification.select(fn.MAX(Notification.id)).where(sent).scalar() or 0
    if after is None:
        return {"last": newest, "notifications": []}
    since = now - timedelta(seconds=defaults.NOTIFY_PAGE_RECENT_SECONDS)
    rows = (
        Notification.select()
        .where(sent & (Notification.id > after) & (Notification.sent_at >= since))
        .order_by(Notification.id).limit(FEED_BATCH)
    )
    shown = [
        {"id": row.id, "kind": row.kind, "title": row.title, "body": row.body, "link": row.link, "session": row.session_id}
        for row in rows
    ]
    # Past a full batch the page asks again from its end; else it is up to date.
    return {"last": shown[-1]["id"] if len(shown) == FEED_BATCH else newest, "notifications": shown}
