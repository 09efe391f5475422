"""Subscriptions as subscribe, list_subscriptions and the owner's page show them (docs/events.md#lifetime)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from oar.core.models import HeldEvent, Session, Subscription
from oar.core.timeutil import iso


def listed_for(watcher_id: str, now: datetime, ended_listed_seconds: float) -> list[Subscription]:
    since = now - timedelta(seconds=ended_listed_seconds)
    return list(
        Subscription.select()
        .where((Subscription.watcher == watcher_id) & (Subscription.ended_at.is_null() | (Subscription.ended_at >= since)))
        .order_by(Subscription.created_at)
    )


def view(subscription: Subscription) -> dict[str, Any]:
    """A subscription as subscribe and list_subscriptions show it (docs/events.md#lifetime)."""
    if subscription.scope == "all":
        sessions: Any = "all"
    else:
        titles = {s.id: s.title for s in Session.select(Session.id, Session.title).where(Session.id.in_(subscription.sessions))}
        sessions = [{"id": sid, "title": titles.get(sid)} for sid in subscription.sessions]
    entry: dict[str, Any] = {
        "id": subscription.id,
        "scope": subscription.scope,
        "sessions": sessions,
        "events": subscription.events,
        "once": subscription.once,
        "match": subscription.match,
        "stalledMinutes": subscription.stalled_minutes,
        "heartbeatMinutes": subscription.heartbeat_minutes,
        "createdAt": iso(subscription.created_at),
    }
    if subscription.digest_minutes:
        entry["digestMinutes"] = subscription.digest_minutes
    if subscription.quiet_hours:
        entry["quietHours"] = subscription.quiet_hours
    if subscription.exclude:
        entry["exclude"] = subscription.exclude
    held = list(
        HeldEvent.select(HeldEvent.due_at, HeldEvent.count).where(
            (HeldEvent.subscription_id == subscription.id) & HeldEvent.delivered_at.is_null()
            & (HeldEvent.dropped == False)  # noqa: E712
        )
    )
    if subscription.ended_at is not None:
        entry["endedAt"] = iso(subscription.ended_at)
        entry["endReason"] = subscription.end_reason
        if not held:
            return entry
    entry["heldCount"] = sum(row.count for row in held)  # a bundle holds `count` events
    entry["nextDeliveryAt"] = iso(min((row.due_at for row in held), default=None))
    return entry


def watched_open_count(rows: list[Subscription]) -> int:
    """How many open sessions (stand-ins left out, as the lists leave them out) the active
    subscriptions `rows` watch. Counted in the database without loading every session: the
    owner's page asks every second."""
    named = {sid for row in rows if row.scope == "sessions" for sid in row.sessions or []}
    open_sessions = Session.select(Session.id).where(Session.live_local(archived=False))
    everything = [row for row in rows if row.scope == "all"]
    if not everything:
        return open_sessions.where(Session.id.in_(list(named))).count() if named else 0
    # Left out by every ["all"] subscription: its watcher and its exclusions.
    left_out = set.intersection(*({*(row.exclude or []), row.watcher_id} for row in everything))
    left_out_open = {r.id for r in open_sessions.where(Session.id.in_(list(left_out)))} if left_out else set()
    return open_sessions.count() - len(left_out_open) + len(named & left_out_open)
