"""The owner's notification channels (docs/notifications.md): listing, reading, saving,
deleting and testing them. A channel's URL is write-only: the views never show it."""

from __future__ import annotations

from typing import Any

from oar.core import jobs
from oar.core.db import write_transaction
from oar.core.errors import not_found
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.notifications import channels, feed, webpush
from oar.notifications.outbox import announce_test
from oar.owner.inbox import pending_count


def list_channels(runtime: Runtime) -> list[dict[str, Any]]:
    return [channels.view(channel) for channel in channels.listed()]


def read_channel(runtime: Runtime, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The channel and its newest notifications."""
    rows = channels.recent(name)
    # The channel read after its rows (and refused there if there is none): a row settles in the
    # transaction that writes the channel's last result, so the view never shows a row sent and
    # the channel's error from before it.
    return channels.view(channels.get(name)), rows


def save_channel(runtime: Runtime, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Create or replace a channel: its type, kinds and (url channels) URL."""
    return channels.view(channels.save(name, payload))


def delete_channel(runtime: Runtime, name: str) -> None:
    if not channels.delete(name):
        raise not_found(f'No notification channel "{name[:64]}" is configured. Nothing was changed.')


def test_channel(runtime: Runtime, name: str) -> int:
    """Queue a test notification for the channel (sent at once, whatever its kinds); its id."""
    channel = channels.get(name)
    with write_transaction():
        row = announce_test(channel, f"{runtime.config.base_url}/settings#notifications", utcnow())
    jobs.poke_notifications(runtime)
    return int(row.id)


def page_feed(runtime: Runtime, after: int | None) -> dict[str, Any]:
    """What the open page polls: the Inbox count, and the page channels' notifications after `after`."""
    return {"inboxCount": pending_count(), **feed.page_feed(after, utcnow())}


def push_settings(runtime: Runtime) -> dict[str, Any]:
    """The relay's VAPID public key (what a browser subscribes with) and the subscribed browsers."""
    return {"publicKey": webpush.public_key(), "subscriptions": [webpush.view(s) for s in webpush.listed()]}


def subscribe_browser(runtime: Runtime, payload: dict[str, Any]) -> dict[str, Any]:
    """Store a browser's Web Push subscription (the same endpoint again replaces its keys)."""
    return webpush.view(webpush.subscribe(payload))


def unsubscribe_browser(runtime: Runtime, subscription_id: str) -> None:
    webpush.unsubscribe(subscription_id)
