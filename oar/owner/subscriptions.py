"""The owner's view of watching: active subscriptions and the page's Unsubscribe (docs/events.md#lifetime)."""

from __future__ import annotations

from typing import Any

from oar.core.db import write_transaction
from oar.core.errors import not_found
from oar.core.models import Session, Subscription
from oar.core.runtime import Runtime
from oar.core.statuses import SubscriptionEndReason
from oar.core.timeutil import utcnow
from oar.watching import lifetime, views


def active_subscriptions() -> list[Subscription]:
    """Every active subscription of a session not deleted, oldest first."""
    return list(
        Subscription.select().join(Session)
        .where(Subscription.ended_at.is_null() & Session.live())
        .order_by(Subscription.created_at)
    )


def subscription_view(row: Subscription) -> dict[str, Any]:
    watcher = Session.get_by_id(row.watcher_id)
    return {**views.view(row), "watcher": {"id": watcher.id, "title": watcher.title}}


def list_subscriptions(runtime: Runtime) -> list[dict[str, Any]]:
    """Every active subscription on this relay, with its watcher."""
    return [subscription_view(row) for row in active_subscriptions()]


def end_subscription(runtime: Runtime, subscription_id: str) -> tuple[bool, Subscription]:
    """Unsubscribe: the subscription ends with endReason `unsubscribed`; False when it had
    already ended."""
    row = Subscription.get_or_none(Subscription.id == subscription_id.strip())
    if row is None:
        raise not_found(
            f'Relay "{runtime.relay_name()}" has no subscription "{subscription_id[:64]}". Nothing was changed.'
        )
    with write_transaction():
        ended = lifetime.end(row, SubscriptionEndReason.UNSUBSCRIBED, utcnow())
    return ended, Subscription.get_by_id(row.id)
