"""The rules of a subscription (docs/events.md): which sessions it watches, which events it receives
under which name, and the delivery rules (`oar.watching.delivery`) it carries."""

from __future__ import annotations

import functools
from typing import Any

import peewee as pw
import regex

from oar.core import defaults
from oar.core.models import Event, Message, Session, Subscription, Task
from oar.core.runtime import Runtime
from oar.core.statuses import OPEN_TURN, TaskStatus
from oar.watching import delivery
from oar.watching.quiet_hours import QuietHours, parse

MAX_SUBSCRIPTIONS = 20


def timing(runtime: Runtime) -> delivery.Timing:
    return delivery.Timing(
        window_seconds=runtime.time("DELIVERY_WINDOW_SECONDS"),
        hour_seconds=runtime.time("DELIVERY_CAP_HOUR_SECONDS"),
        cap_digest_seconds=runtime.time("DELIVERY_CAP_DIGEST_SECONDS"),
        minute_seconds=runtime.time("DELIVERY_MINUTE_SECONDS"),
    )


def active_of(watcher_id: str) -> pw.ModelSelect[Subscription]:
    return Subscription.select().where((Subscription.watcher == watcher_id) & Subscription.ended_at.is_null())


def quiet_of(subscription: Subscription) -> QuietHours | None:
    return parse(subscription.quiet_hours) if subscription.quiet_hours else None


def rules_of(subscription: Subscription) -> delivery.Rules:
    return delivery.Rules(
        id=subscription.id,
        created_at=subscription.created_at,
        digest_minutes=subscription.digest_minutes,
        quiet=quiet_of(subscription),
        last_digest_at=subscription.last_digest_at,
    )


def watches(subscription: Subscription, session_id: str) -> bool:
    if session_id == subscription.watcher_id:
        return False  # a conversation's own session is never watched
    if subscription.scope == "all":
        return session_id not in (subscription.exclude or [])
    return session_id in (subscription.sessions or [])


def received_as(subscription: Subscription, event: Event) -> str | None:
    """The kind under which the subscription receives `event`, or None when it does not.
    - A subagent task's end (`task_finished` of a task of type `subagent`) is its
      `subagent_finished`; a subscription that lists `subagent_finished` learns of a failed
      subagent from that line alone, not from its `task_failed` as well.
    - `stalled` events carry the `stalledMinutes` they were recorded for: each subscription
      receives those of its own `stalled_minutes` (the sweeper records one per value in use).
    """
    kinds = subscription.events or []
    payload = event.payload or {}
    if payload.get("type") == "subagent" and "subagent_finished" in kinds:
        if event.kind == "task_finished":
            return "subagent_finished"
        if event.kind == "task_failed":
            return None
    if event.kind == "stalled" and payload.get("stalledMinutes") != subscription.stalled_minutes:
        return None
    return event.kind if event.kind in kinds else None


def is_regex(pattern: str) -> bool:
    """Whether a `match` is a /regex/ rather than a substring."""
    return len(pattern) > 2 and pattern.startswith("/") and pattern.endswith("/")


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> Any:
    """A /regex/ `match`, case-insensitive, in Python's own dialect (`regex.error` when it is not one).

    It is an agent's pattern run on lines other agents write: the `regex` module, whose searches
    take a time limit, stands in for `re`, whose catastrophic backtracking nothing can stop."""
    return regex.compile(pattern[1:-1], regex.IGNORECASE | regex.VERSION0)


def matches_text(pattern: str | None, text: str) -> bool:
    if not pattern:
        return True
    if is_regex(pattern):
        try:
            return compiled(pattern).search(text, timeout=defaults.SUBSCRIPTION_MATCH_SECONDS) is not None
        except TimeoutError:
            return False  # docs/events.md#subscriptions: a pattern that runs too long matches nothing
    return pattern.casefold() in text.casefold()


def busy(session_ids: list[str]) -> bool:
    if not session_ids:
        return False
    turn = Message.select().where(Message.session.in_(session_ids) & Message.status.in_(OPEN_TURN)).exists()
    return turn or Task.select().where(Task.session.in_(session_ids) & (Task.status == TaskStatus.RUNNING)).exists()


def watched_ids(subscription: Subscription, visible: Any = None) -> list[str]:
    """The sessions a subscription watches now; `visible`, a condition on `Session`, keeps only
    those its watcher sees (docs/rules.md#visibility; None: every session)."""
    if subscription.scope == "sessions":
        return list(subscription.sessions or [])
    live = Session.live(archived=False) & (Session.id != subscription.watcher_id)
    rows = Session.select(Session.id).where(live if visible is None else live & visible)
    return [row.id for row in rows if row.id not in (subscription.exclude or [])]
