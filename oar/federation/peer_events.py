"""Events across relays, on the watching side (docs/relays.md#events-across-relays).

A subscription this relay's conversation makes on a paired relay is kept there; the paired
relay's delivery engine applies its windows, digests and quiet hours and keeps each delivery in
its outbox. This relay fetches them every `PEER_EVENTS_POLL_SECONDS` in a short RQ job the clock
enqueues (one per paired relay at a time), and writes each into the watching conversation with
its lines prefixed by the paired relay's name. The cursor of what was fetched is stored in the
same transaction as the messages, and the paired relay drops a delivery only when asked for what
comes after it: a restart of either side loses nothing and delivers nothing twice.

After `PEER_LINK_LOST_SECONDS` without an answer the watchers get the `link_lost` line; when
the paired relay answers again, what it kept meanwhile arrives as one `replayed` line followed
by `link_restored` (with how many events are still held there for later).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import redis

from oar.core import jobs, keys
from oar.core.db import lock_rows, write_transaction
from oar.core.errors import ActionError
from oar.core.models import Session
from oar.core.numbers import INT64_MAX
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.federation import peers
from oar.federation.models import Peer, PeerSubscription
from oar.notifications import collect as notifications
from oar.turns import automated, turns

log = logging.getLogger(__name__)

PREFIX = "[relay event] "


def record_subscription(peer: Peer, watcher: Session, answer: dict[str, Any]) -> None:
    """The paired relay took a subscription of `watcher`: remember who watches there."""
    subscription = answer.get("subscription")
    sub_id = subscription.get("id") if isinstance(subscription, dict) else None
    if not isinstance(sub_id, str) or not sub_id.startswith("sub_") or len(sub_id) > 32:
        return
    with write_transaction():
        PeerSubscription.insert(id=sub_id, peer=peer.id, watcher=watcher.id, created_at=utcnow()).on_conflict_ignore().execute()


def kept_on_peers(watcher_id: str) -> int:
    """How many subscriptions the conversation keeps on paired relays (they count toward its 20)."""
    return PeerSubscription.select().where(
        (PeerSubscription.watcher == watcher_id) & PeerSubscription.ended_at.is_null()
    ).count()


def end_subscriptions(peer: Peer, watcher: Session, subscription_id: str) -> None:
    """The paired relay ended one (or "all") of `watcher`'s subscriptions there."""
    ending = (PeerSubscription.peer == peer.id) & (PeerSubscription.watcher == watcher.id) & PeerSubscription.ended_at.is_null()
    if subscription_id.strip().lower() != "all":
        ending = ending & (PeerSubscription.id == subscription_id.strip())
    with write_transaction():
        PeerSubscription.update(ended_at=utcnow()).where(ending).execute()


def enqueue_due(runtime: Runtime, now: datetime) -> int:
    """The clock's sweep: a fetch job for each paired relay some conversation here watches."""
    watched = PeerSubscription.select(PeerSubscription.peer).where(PeerSubscription.ended_at.is_null()).distinct()
    enqueued = 0
    for row in watched:
        key = keys.peer_events_nudge(runtime.config.namespace, row.peer_id)
        lapse = max(1, int(runtime.time("PEER_CONNECT_TIMEOUT_SECONDS") + runtime.time("PEER_READ_MARGIN_SECONDS")))
        try:
            if not runtime.redis.set(key, b"1", nx=True, ex=lapse):
                continue  # one fetch at a time; the key lapses in case a worker died with it
            runtime.queue.enqueue(jobs.FETCH_PEER_EVENTS, row.peer_id, result_ttl=0, failure_ttl=86_400)
            enqueued += 1
        except redis.RedisError as error:
            log.warning("fetching the events of paired relay %s not enqueued: %s", row.peer_id, error)
    return enqueued


def fetch(runtime: Runtime, peer_id: str, now: datetime) -> int:
    """Fetch what the paired relay kept for this relay's watchers; returns the deliveries written."""
    try:
        peer = Peer.get_or_none(Peer.id == peer_id)
        if peer is None or not _watchers(peer):
            return 0
        try:
            answer = peers.link_to(runtime, peer).request(
                "GET", f"/events?after={peer.events_cursor}",
                read_timeout=runtime.time("PEER_CONNECT_TIMEOUT_SECONDS") + runtime.time("PEER_READ_MARGIN_SECONDS"),
            )
        except ActionError as error:
            peers.note_failure(peer, error.code)
            _maybe_lost(runtime, Peer.get_by_id(peer.id), now)
            return 0
        peers.note_answer(peer)
        return _keep(runtime, peer, answer, utcnow())
    finally:
        runtime.redis.delete(keys.peer_events_nudge(runtime.config.namespace, peer_id))


def _watchers(peer: Peer) -> list[str]:
    rows = PeerSubscription.select(PeerSubscription.watcher).where(
        (PeerSubscription.peer == peer.id) & PeerSubscription.ended_at.is_null()
    ).distinct()
    return [row.watcher_id for row in rows]


def _maybe_lost(runtime: Runtime, peer: Peer, now: datetime) -> None:
    """`link_lost` once, after PEER_LINK_LOST_SECONDS without an answer."""
    if peer.link_lost_at is not None:
        return
    since = peer.last_answered_at or peer.created_at
    if (now - since).total_seconds() < runtime.time("PEER_LINK_LOST_SECONDS"):
        return
    line = f"{PREFIX}{peer.name}: link_lost (no answer since {since.strftime('%H:%M')}Z)"
    told = []
    with write_transaction():
        if not Peer.update(link_lost_at=now).where((Peer.id == peer.id) & Peer.link_lost_at.is_null()).execute():
            return
        for watcher_id in _watchers(peer):
            if _tell(watcher_id, [line]):
                told.append(watcher_id)
        owner_told = notifications.relay_lost(runtime, peer.id, peer.name, since, now)  # docs/notifications.md#kinds
    for watcher_id in told:
        turns.start_turns(runtime, watcher_id)
    if owner_told:
        jobs.poke_notifications(runtime)


def _keep(runtime: Runtime, peer: Peer, answer: dict[str, Any], now: datetime) -> int:
    """Write the fetched deliveries and move the cursor past them, in one transaction."""
    fetched = [entry for entry in answer.get("events") or [] if _is_delivery(entry)]
    active = {sub for sub in answer.get("subscriptions") or [] if isinstance(sub, str)}
    held_raw = answer.get("held")
    held_there = held_raw if isinstance(held_raw, int) else 0
    told: set[str] = set()
    with write_transaction():
        lock_rows(Peer.select().where(Peer.id == peer.id))  # two fetches at once write one of them
        current = Peer.get_by_id(peer.id)
        fresh = [entry for entry in fetched if entry["id"] > current.events_cursor]
        lost_at = current.link_lost_at
        if lost_at is None:
            for entry in fresh:
                if _tell(entry["session"], [_prefixed(line, peer.name) for line in _lines(entry["text"])]):
                    told.add(entry["session"])
        else:
            by_watcher: dict[str, list[dict[str, Any]]] = {}
            for entry in fresh:
                by_watcher.setdefault(entry["session"], []).append(entry)
            since = current.last_answered_at or lost_at
            for watcher_id in set(_watchers(current)) | set(by_watcher):
                lines = _replayed(peer.name, by_watcher.get(watcher_id, []), since, now, held_there)
                if _tell(watcher_id, lines):
                    told.add(watcher_id)
        updates: dict[str, Any] = {"link_lost_at": None}
        if fresh:
            updates["events_cursor"] = max(entry["id"] for entry in fresh)
        Peer.update(**updates).where(Peer.id == peer.id).execute()
        # Subscriptions the paired relay ended (once, archived, …) are no longer watched from here.
        PeerSubscription.update(ended_at=now).where(
            (PeerSubscription.peer == peer.id) & PeerSubscription.ended_at.is_null()
            & PeerSubscription.id.not_in(list(active) or [""])
        ).execute()
    for watcher_id in told:
        turns.start_turns(runtime, watcher_id)
    return len(fresh)


def _is_delivery(entry: Any) -> bool:
    """A delivery as the paired relay answers it; its id becomes this relay's cursor, a 64-bit column."""
    if not isinstance(entry, dict):
        return False
    delivery_id = entry.get("id")
    return (type(delivery_id) is int and 0 < delivery_id <= INT64_MAX and isinstance(entry.get("session"), str)
            and isinstance(entry.get("text"), str))


def _lines(text: str) -> list[str]:
    """A delivery's lines without its header (this relay writes its own)."""
    return [line for line in text.splitlines() if line and line != automated.EVENT_HEADER]


def _prefixed(line: str, peer_name: str) -> str:
    """`[relay event] session …` → `[relay event] build-box · session …`."""
    return PREFIX + f"{peer_name} · " + line[len(PREFIX):] if line.startswith(PREFIX) else line


def _replayed(peer_name: str, entries: list[dict[str, Any]], since: datetime, now: datetime, held_there: int) -> list[str]:
    kinds: Counter[str] = Counter()
    last = ""
    for entry in entries:
        for kind, count in (entry.get("kinds") or {}).items():
            if isinstance(kind, str) and isinstance(count, int):
                kinds[kind] += count
        event_lines = [line for line in _lines(entry["text"]) if line.startswith(PREFIX)]
        if event_lines:
            last = event_lines[-1][len(PREFIX):]
    total = sum(kinds.values())
    lines = []
    if total:
        counted = ", ".join(f"{kind} {count}" for kind, count in kinds.most_common())
        lines.append(f"{PREFIX}{peer_name} · replayed: {total} event{'' if total == 1 else 's'} ({counted}); last: {last}")
    lines.append(f"{PREFIX}{peer_name}: link_restored after {_span(now - since)}; "
                 f"{total} event{'' if total == 1 else 's'} replayed, {held_there} held for later")
    return lines


def _span(elapsed: timedelta) -> str:
    seconds = max(0, int(elapsed.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _tell(watcher_id: str, lines: list[str]) -> bool:
    """Queue the lines into the watching conversation as one automated event message (inside the
    caller's transaction); False when there is nothing to say or nobody to tell."""
    if not lines:
        return False
    watcher = Session.get_or_none((Session.id == watcher_id) & Session.live_local(archived=False))
    if watcher is None:
        return False
    automated.insert(watcher, "\n".join([automated.EVENT_HEADER, *lines]), turns.Provenance(kind="event", hops=0))
    return True
