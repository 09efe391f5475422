"""A subscription's lifetime: its id, its end (unsubscribed, fired, archived, transferred) and
its transfer to another watcher (docs/events.md#lifetime)."""

from __future__ import annotations

from datetime import datetime

from oar.core import ids
from oar.core.models import HeldEvent, Session, Subscription
from oar.core.statuses import SubscriptionEndReason
from oar.sessions import visibility
from oar.watching import subscription_rules


def new_id() -> str:
    return ids.prefixed_id("sub")


def end(subscription: Subscription, reason: SubscriptionEndReason, now: datetime) -> bool:
    changed = (
        Subscription.update(ended_at=now, end_reason=reason)
        .where((Subscription.id == subscription.id) & Subscription.ended_at.is_null())
        .execute()
    )
    subscription.ended_at, subscription.end_reason = now, reason
    return bool(changed)


def fire_once(matched: list[Subscription], now: datetime) -> None:
    for subscription in matched:
        if subscription.once and subscription.ended_at is None:
            end(subscription, SubscriptionEndReason.FIRED, now)


def transfer(subscription: Subscription, watcher: Session, now: datetime) -> Subscription | None:
    """Move a subscription to another watcher (inside a transaction): the original ends
    `transferred` and delivers what it already holds; the copy watches from now on. A
    conversation never watches itself, so the new watcher leaves its own session out."""
    named = [s for s in subscription.sessions or [] if s != watcher.id]
    end(subscription, SubscriptionEndReason.TRANSFERRED, now)
    if subscription.scope == "sessions" and not named:
        return None
    fields = {
        name: getattr(subscription, name)
        for name in ("scope", "exclude", "events", "once", "match", "stalled_minutes", "heartbeat_minutes",
                     "digest_minutes", "quiet_hours", "hops")
    }
    copy = Subscription.create(id=new_id(), watcher=watcher.id, sessions=named, created_at=now, **fields)
    seen = visibility.View(watcher, visibility.relay_visibility()).where()  # docs/rules.md#visibility
    copy.idle = not subscription_rules.busy(subscription_rules.watched_ids(copy, seen))
    copy.save()
    return copy


def end_for_session(session_id: str, now: datetime) -> None:
    """Archiving a session ends its own subscriptions and those that name it in a list; an
    `["all"]` subscription just stops seeing it (inside the archiving transaction)."""
    Subscription.update(ended_at=now, end_reason=SubscriptionEndReason.ARCHIVED).where(
        (Subscription.watcher == session_id) & Subscription.ended_at.is_null()
    ).execute()
    for subscription in Subscription.select().where((Subscription.scope == "sessions") & Subscription.ended_at.is_null()):
        if session_id in (subscription.sessions or []):
            end(subscription, SubscriptionEndReason.ARCHIVED, now)
    HeldEvent.update(dropped=True).where((HeldEvent.watcher == session_id) & HeldEvent.delivered_at.is_null()).execute()
