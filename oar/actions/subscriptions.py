"""subscribe, unsubscribe, list_subscriptions and transfer_subscriptions (docs/events.md#subscriptions, docs/events.md#lifetime).

Subscriptions only notify; they approve and answer nothing. A conversation's first watch
asks the owner's approval card (remembered), and `transfer_subscriptions` always does.
"""

from __future__ import annotations

from typing import Any

import regex

from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.approvals import cards
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.fields import Param
from oar.core.models import Session, Subscription
from oar.core.shapes import RELAY
from oar.core.statuses import SubscriptionEndReason
from oar.federation import peer_events
from oar.sessions import sessions
from oar.watching import delivery, ingest, lifetime, subscription_rules, views
from oar.watching.quiet_hours import BadQuietHours, parse

SUBSCRIBED_NOTHING = "Nothing was subscribed."
UNSUBSCRIBED_NOTHING = "Nothing was unsubscribed."
TRANSFERRED_NOTHING = "Nothing was transferred."
EXCLUDE_NEEDS_ALL = 'exclude goes with sessions ["all"] only; a list of sessions names what it watches'
MAX_SESSIONS_NAMED = 100
QUIET_HOURS_FIELDS = {
    "from": Param("str", required=True, description='the start, a time of day "HH:MM"'),
    "to": Param("str", required=True, description='the end, a time of day "HH:MM"'),
    "tz": Param("str", required=True, description='an IANA time zone, e.g. "Europe/Berlin"'),
}


@action("subscribe",
    params={
        "relay": RELAY,
        "sessions": Param(
            "list", required=True, items=Param("str"), max_items=MAX_SESSIONS_NAMED,
            description='session ids, or ["all"]',
        ),
        "events": Param(
            "list", items=Param("str", choices=delivery.EVENT_KINDS),
            description="event kinds (default: " + ", ".join(delivery.DEFAULT_EVENTS) + ")",
        ),
        "once": Param("bool", description="end the subscription after its first event"),
        "match": Param("str", max_length=500, description="a case-insensitive substring or /regex/"),
        "stalled_minutes": Param("int", minimum=1, maximum=1440, description="minutes a turn may go without output before it counts as stalled"),
        "heartbeat_minutes": Param("int", minimum=5, maximum=1440, description="a heartbeat event every this many minutes"),
        "digest_minutes": Param("int", minimum=1, maximum=1440, description="gather events into one message every this many minutes"),
        "quiet_hours": Param(
            "object", fields=QUIET_HOURS_FIELDS,
            description='hold events back daily, e.g. {"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}',
        ),
        "exclude": Param(
            "list", items=Param("str"), max_items=MAX_SESSIONS_NAMED,
            description='session ids left out of ["all"]',
        ),
    },
    level="read",
    writes=True,
    relay_optional=True,
    nothing=SUBSCRIBED_NOTHING,
    approval=("watch_sessions",),
)
def subscribe(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Watch sessions: their events arrive in this conversation as relay event messages."""
    caller = ctx.caller_session
    scope, named = _sessions(ctx, args["sessions"])
    exclude = _exclude(ctx, args.get("exclude"), scope)
    events = _events(args.get("events"))
    if args.get("heartbeat_minutes") and "heartbeat" not in events:
        events.append("heartbeat")  # setting heartbeat_minutes turns heartbeats on (docs/events.md#subscriptions)
    elif "heartbeat" in events and not args.get("heartbeat_minutes"):
        raise invalid("heartbeat needs heartbeat_minutes (5 to 1,440): how often it comes.")
    match = args.get("match")
    if match and subscription_rules.is_regex(match):
        try:
            subscription_rules.compiled(match)
        except regex.error as error:
            raise invalid(f"match {match[:80]} is not a valid regular expression ({error}).") from None
    try:
        quiet = parse(args["quiet_hours"]) if "quiet_hours" in args else None
    except BadQuietHours as error:
        raise invalid(f"{error}.") from None
    if subscriptions_of(caller.id) >= subscription_rules.MAX_SUBSCRIPTIONS:
        raise limit_reached()
    cards.approve(ctx, cards.Request(
        action="subscribe", nothing=SUBSCRIBED_NOTHING, target=named[0] if len(named) == 1 else None,
        lines=(_watch_line(scope, named, events, args, quiet),),
    ))
    with write_transaction():
        if subscriptions_of(caller.id) >= subscription_rules.MAX_SUBSCRIPTIONS:
            raise limit_reached()  # another call took the last place while the card waited
        start = ingest.watch_start()
        row = Subscription.create(
            id=lifetime.new_id(),
            watcher=caller.id,
            scope=scope,
            sessions=[s.id for s in named],
            exclude=exclude,
            events=events,
            once=bool(args.get("once")),
            match=match,
            stalled_minutes=args.get("stalled_minutes", int(ctx.runtime.time("STALLED_DEFAULT_MINUTES"))),
            heartbeat_minutes=args.get("heartbeat_minutes"),
            digest_minutes=args.get("digest_minutes"),
            quiet_hours=quiet.as_dict() if quiet else None,
            hops=ctx.hops(),
            created_at=start,
        )
        row.idle = not subscription_rules.busy(subscription_rules.watched_ids(row, ctx.view.where()))
        row.save()
        ingest.ensure_cursor(start)
    view = views.view(row)
    watched = "all sessions" if scope == "all" else f"{len(named)} session{'s' if len(named) != 1 else ''}"
    return {
        "summary": f"subscribe → {ctx.relay_name}: {row.id} watches {watched} for {', '.join(events)}",
        "subscription_id": row.id,
        "subscription": view,
    }


def subscriptions_of(conversation_id: str) -> int:
    """A conversation's active subscriptions, here and those it keeps on paired relays."""
    return subscription_rules.active_of(conversation_id).count() + peer_events.kept_on_peers(conversation_id)


def limit_reached() -> ActionError:
    """Over the subscription limit; the dispatcher adds the action's sentence (subscribe's or transfer's)."""
    return ActionError(
        "REMOTE_RELAY_SUBSCRIPTION_LIMIT",
        f"This conversation already has {subscription_rules.MAX_SUBSCRIPTIONS} subscriptions; unsubscribe one first.",
    )


def _watch_line(scope: str, named: list[Session], events: list[str], args: dict[str, Any], quiet: Any) -> str:
    """What the card shows: the sessions, the events and the options (docs/rules.md#approval-cards)."""
    watched = "all sessions" if scope == "all" else ", ".join(f'{s.id[:8]} "{s.title}"' for s in named[:5])
    if scope != "all" and len(named) > 5:
        watched += f" and {len(named) - 5} more"
    parts = [f"Watch: {watched}", f"Events: {', '.join(events)}"]
    if args.get("digest_minutes"):
        parts.append(f"digest every {args['digest_minutes']} min")
    if quiet is not None:
        parts.append(f"quiet {quiet.text()}")
    if args.get("exclude"):
        count = len(args["exclude"])
        parts.append(f"except {count} it leaves out")
    if args.get("once"):
        parts.append("once")
    return " · ".join(parts)


def _sessions(ctx: CallContext, given: list[Any]) -> tuple[str, list[Session]]:
    if any(not isinstance(item, str) or not item.strip() for item in given):
        raise invalid('sessions must be a list of session ids, or ["all"].')
    if [item.strip().lower() for item in given] == ["all"]:
        return "all", []
    if any(item.strip().lower() == "all" for item in given):
        raise invalid('sessions takes ["all"] alone or a list of session ids.')
    if len(given) > MAX_SESSIONS_NAMED:
        raise invalid(f"sessions names {len(given)} sessions; the limit is {MAX_SESSIONS_NAMED}.")
    named: dict[str, Session] = {}
    for reference in given:
        if sessions.is_same(reference, ctx.caller_session):
            raise ActionError(
                "REMOTE_RELAY_OWN_SESSION",
                f"A conversation's own session is never watched; leave {ctx.caller_session.id[:8]} out.",
            )
        session = ctx.session(reference)
        if session.archived:
            raise not_found(f"Session {session.id[:8]} is archived.")
        named[session.id] = session
    return "sessions", list(named.values())


def _exclude(ctx: CallContext, given: list[Any] | None, scope: str) -> list[str]:
    if not given:
        return []
    if scope != "all":
        raise invalid(f"{EXCLUDE_NEEDS_ALL}.")
    if any(not isinstance(item, str) or not item.strip() for item in given) or len(given) > MAX_SESSIONS_NAMED:
        raise invalid("exclude must be a list of session ids.")
    return list(dict.fromkeys(ctx.session(item).id for item in given))


def _events(given: list[Any] | None) -> list[str]:
    if not given:
        return list(delivery.DEFAULT_EVENTS)
    unknown = [item for item in given if not isinstance(item, str) or item.strip().lower() not in delivery.EVENT_KINDS]
    if unknown:
        shown = ", ".join(repr(item)[:40] for item in unknown[:5])
        raise invalid(f"Unknown events: {shown}. Events: {', '.join(delivery.EVENT_KINDS)}.")
    return list(dict.fromkeys(item.strip().lower() for item in given))


@action("unsubscribe",
    params={"relay": RELAY, "subscription_id": Param("str", required=True, max_length=64, description='an id sub_…, or "all"')},
    level="read",
    writes=True,
    relay_optional=True,
    nothing=UNSUBSCRIBED_NOTHING,
)
def unsubscribe(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """End one of this conversation's subscriptions, or all of them."""
    wanted = args["subscription_id"].strip()
    active = subscription_rules.active_of(ctx.caller_session.id)
    if wanted.lower() == "all":
        rows = list(active)
    else:
        row = Subscription.get_or_none((Subscription.id == wanted) & (Subscription.watcher == ctx.caller_session.id))
        if row is None:
            raise not_found(f'This conversation has no subscription "{wanted[:64]}".')
        rows = [row]
    cards.approve(ctx, cards.Request(
        action="unsubscribe", nothing=UNSUBSCRIBED_NOTHING, lines=(f"Subscriptions: {', '.join(r.id for r in rows)}",),
    ))
    ended = []
    with write_transaction():
        for row in rows:
            if lifetime.end(row, SubscriptionEndReason.UNSUBSCRIBED, ctx.now):
                ended.append(row.id)
    result: dict[str, Any] = {
        "summary": f"unsubscribe → {ctx.relay_name}: {len(ended)} ended",
        "ended": ended,
        "subscriptions": [views.view(Subscription.get_by_id(row.id)) for row in rows],
    }
    if wanted.lower() != "all" and not ended:
        result["note"] = f"The subscription had already ended ({rows[0].end_reason}); nothing changed."
    return result


@action("list_subscriptions",
    params={
        "relay": RELAY,
        "watcher": Param("str", max_length=64, description="another conversation's session id; default: this one"),
    },
    level="read",
    relay_optional=True,
)
def list_subscriptions(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """This conversation's subscriptions (or another's with watcher), and those ended within the hour."""
    watcher = ctx.caller_session
    if args.get("watcher"):
        watcher = ctx.session(args["watcher"])
    rows = views.listed_for(watcher.id, ctx.now, ctx.runtime.time("SUBSCRIPTION_ENDED_LISTED_SECONDS"))
    listed = [views.view(row) for row in rows]
    active = sum(1 for entry in listed if "endedAt" not in entry)
    return {
        "summary": f"list_subscriptions → {ctx.relay_name}: {active} active, {len(listed) - active} ended within the hour",
        "watcher": watcher.id,
        "subscriptions": listed,
    }


@action("transfer_subscriptions",
    params={"relay": RELAY, "from": Param("str", required=True, max_length=64, description="a conversation's session id")},
    level="read",
    writes=True,
    relay_optional=True,
    nothing=TRANSFERRED_NOTHING,
    approval=("transfer",),  # always a card (docs/rules.md#approval-cards)
)
def transfer_subscriptions(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Move every subscription of another conversation to this one (always an approval card)."""
    source = ctx.session(args["from"])
    if source.id == ctx.caller_session.id:
        raise ActionError(
            "REMOTE_RELAY_OWN_SESSION", "These subscriptions are already this conversation's."
        )
    moving = list(subscription_rules.active_of(source.id).order_by(Subscription.created_at))
    if not moving:
        raise invalid(f"Session {source.id[:8]} has no active subscriptions.")
    kept = subscription_rules.active_of(ctx.caller_session.id).count()
    if kept + len(moving) > subscription_rules.MAX_SUBSCRIPTIONS:
        raise limit_reached()
    cards.approve(ctx, cards.Request(  # always a card (docs/rules.md#approval-cards)
        action="transfer_subscriptions", nothing=TRANSFERRED_NOTHING, target=source,
        lines=(f"{len(moving)} subscription{'s' if len(moving) != 1 else ''}: {', '.join(r.id for r in moving)}",),
    ))
    moved = []
    with write_transaction():
        for row in moving:
            copy = lifetime.transfer(row, ctx.caller_session, ctx.now)
            if copy is not None:
                moved.append(copy)
    return {
        "summary": f"transfer_subscriptions → {ctx.relay_name}: {len(moved)} moved from session {source.id[:8]}",
        "from": source.id,
        "subscriptions": [views.view(row) for row in moved],
    }
