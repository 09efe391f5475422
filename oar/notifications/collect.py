"""Finding what the owner should hear about (docs/notifications.md#kinds), as outbox rows.

Everything is read from what the database already holds, written in the transaction of each
change: pending cards and questions (each announced once, `Announced`), and the event log
(`turn_end`, `error`), read in `seq` order past a cursor that moves with a conditional UPDATE
in the transaction that writes the rows. So the RQ job run after each change and the clock's
sweep may both look: whichever claims something first writes it, and the other finds nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from peewee import fn

from oar import providers
from oar.core import defaults
from oar.core.db import write_transaction
from oar.core.models import Card, Event, Message, Question, Session, Setting
from oar.core.runtime import Runtime
from oar.core.statuses import CardStatus, QuestionStatus, TurnStatus
from oar.notifications.kinds import Kind
from oar.notifications.models import Announced, Channel
from oar.notifications.outbox import Item, announce, excerpt, receives
from oar.providers import billing, usage
from oar.watching.ingest import EVENT_GAP_GRACE, committed_in_order

CURSOR_KEY = "notifications_cursor"
EVENT_BATCH = 500
# Events the notifications read; every other kind only moves the cursor on.
READ_KINDS = ("turn_end", "error")


def collect(runtime: Runtime, now: datetime) -> int:
    """Write outbox rows for whatever waits unannounced; returns how many items were found."""
    channels = list(Channel.select())
    if not channels:
        return 0  # nobody to tell: the first channel starts the cursor at what happens then
    found = _announce_once(runtime, channels, now, waiting_items(runtime, now) + capped_items(runtime, now))
    while True:
        batch = _read_events(now)
        if batch is None:
            return found
        after, events = batch
        items = [item for event in events if (item := event_item(runtime, event)) is not None]
        with write_transaction():
            claimed = (
                Setting.update(value=events[-1].seq)
                .where((Setting.key == CURSOR_KEY) & (Setting.value == after)).execute()
            )
            if claimed != 1:
                return found  # another collector read this batch first
            for item in items:
                _write(runtime, channels, item, now)
        found += len(items)


def _announce_once(runtime: Runtime, channels: list[Channel], now: datetime, items: list[tuple[str, Item]]) -> int:
    """Write each (key, item) whose key no collector claimed before, in one transaction."""
    if not items:
        return 0
    written = 0
    with write_transaction():
        for key, item in items:
            if Announced.insert(key=key, created_at=now).on_conflict_ignore().execute() and _claimed(key, now):
                _write(runtime, channels, item, now)
                written += 1
    return written


def _claimed(key: str, now: datetime) -> bool:
    """Whether this transaction inserted `key` (an ignored conflict may still answer a row id)."""
    row = Announced.get_or_none(Announced.key == key)
    return row is not None and row.created_at == now


def _write(runtime: Runtime, channels: list[Channel], item: Item, now: datetime) -> None:
    window = runtime.time("NOTIFY_MERGE_SECONDS")
    for channel in channels:
        if receives(channel, item.kind):
            announce(channel, item, now, window)


# Cards and questions --------------------------------------------------------------------


def waiting_items(runtime: Runtime, now: datetime) -> list[tuple[str, Item]]:
    """Pending cards and questions not announced yet (each once), oldest first."""
    since = now - timedelta(seconds=runtime.time("CARD_EXPIRY_SECONDS"))
    cards = list(
        Card.select(Card, Session.id, Session.title).join(Session)
        .where((Card.status == CardStatus.PENDING) & (Card.created_at >= since)).order_by(Card.created_at)
    )
    questions = list(
        Question.select(Question, Session.id, Session.title).join(Session)
        .where((Question.status == QuestionStatus.PENDING) & Session.live())
        .order_by(Question.created_at)
    )
    keys = [f"card:{card.id}" for card in cards] + [f"question:{question.id}" for question in questions]
    if not keys:
        return []
    known = {row.key for row in Announced.select(Announced.key).where(Announced.key.in_(keys))}
    inbox = f"{runtime.config.base_url}/inbox"
    items: list[tuple[str, Item]] = []
    for card in cards:
        if f"card:{card.id}" not in known:
            excerpt_text = (card.details or {}).get("excerpt")
            body = excerpt(card.text) + (f" “{excerpt(excerpt_text, 80)}”" if excerpt_text else "")
            items.append((f"card:{card.id}", Item(
                Kind.CARD_WAITING, excerpt(body), inbox, card.session_id, card.session.title, (card.id,),
            )))
    for question in questions:
        if f"question:{question.id}" not in known:
            items.append((f"question:{question.id}", Item(
                Kind.QUESTION_WAITING, excerpt(question.question), inbox, question.session_id,
                question.session.title, (question.id,),
            )))
    return items


def still_waiting(subjects: list[str]) -> list[str]:
    """The cards and questions of `subjects` that still wait for the owner."""
    if not subjects:
        return []
    cards = Card.select(Card.id).where(Card.id.in_(subjects) & (Card.status == CardStatus.PENDING))
    questions = Question.select(Question.id).where(Question.id.in_(subjects) & (Question.status == QuestionStatus.PENDING))
    pending = {row.id for row in cards} | {row.id for row in questions}
    return [subject for subject in subjects if subject in pending]


# Providers at their cap -----------------------------------------------------------------


def capped_items(runtime: Runtime, now: datetime) -> list[tuple[str, Item]]:
    """Providers that reached their monthly token cap: once per provider and month."""
    items: list[tuple[str, Item]] = []
    for provider in providers.configured():
        cap = usage.token_cap(provider)
        if cap is None or not billing.is_capped(provider, now):
            continue
        resets = usage.meter(provider, now).resets_at
        body = (f'Provider "{provider.name}" reached its monthly cap of {cap:,} tokens: its sessions take no new '
                f"prompts until {resets:%Y-%m-%d %H:%M} UTC.")
        items.append((f"capped:{provider.name}:{resets:%Y-%m}"[:120], Item(
            Kind.PROVIDER_TROUBLE, body, f"{runtime.config.base_url}/settings#providers", about=provider.name,
        )))
    return items


# Paired relays lost ---------------------------------------------------------------------


def relay_lost(runtime: Runtime, peer_id: str, name: str, since: datetime, now: datetime) -> bool:
    """Tell the owner that a paired relay stopped answering, once per loss. Called by pairing
    (oar.federation) inside the transaction that marks the link lost, so a loss is told
    exactly when its `link_lost` line is written; poke the sender after the commit."""
    channels = list(Channel.select())
    if not channels:
        return False
    item = Item(
        Kind.RELAY_LOST, f'Paired relay "{excerpt(name, 80)}" has not answered since {since:%Y-%m-%d %H:%M} UTC.',
        f"{runtime.config.base_url}/settings#relays", about=name,
    )
    return _announce_once(runtime, channels, now, [(f"relay_lost:{peer_id}:{now:%Y%m%dT%H%M%S%f}"[:120], item)]) > 0


# The event log --------------------------------------------------------------------------


def start_cursor(skip: bool) -> None:
    """Create the cursor at the newest event, or (`skip`: the first channel, after a time with
    none) move it there: events from before anyone was told are not told later. Call in the
    transaction that saves a channel."""
    last = Event.select(fn.MAX(Event.seq)).scalar() or 0
    insert = Setting.insert(key=CURSOR_KEY, value=last)
    if skip:
        insert.on_conflict(conflict_target=[Setting.key], update={Setting.value: last}).execute()
    else:
        insert.on_conflict_ignore().execute()


def _read_events(now: datetime) -> tuple[int, list[Event]] | None:
    row = Setting.get_or_none(Setting.key == CURSOR_KEY)
    if row is None:
        start_cursor(skip=False)
        return None
    cursor = int(row.value or 0)
    events = list(Event.select().where(Event.seq > cursor).order_by(Event.seq).limit(EVENT_BATCH))
    events = committed_in_order(cursor, events, now, EVENT_GAP_GRACE)
    return (cursor, events) if events else None


def event_item(runtime: Runtime, event: Event) -> Item | None:
    """What an event tells the owner, if anything: a reply ready in a conversation the owner
    started (never a turn another relay's agent started, SPEC §10), a failed turn."""
    if event.kind not in READ_KINDS:
        return None
    payload: dict[str, Any] = event.payload or {}
    session = Session.get_or_none(Session.id == event.session_id)
    if session is None or session.deleted:
        return None
    link = runtime.open_url(session.id)
    if event.kind == "error":
        body = f'A turn failed (provider "{session.provider}"): {excerpt(payload.get("error"))}'
        return Item(Kind.PROVIDER_TROUBLE, excerpt(body, defaults.NOTIFY_EXCERPT_CHARS + 40), link, session.id,
                    session.title)
    if payload.get("status") != TurnStatus.DONE or payload.get("startedBy") != "user":
        return None
    if session.created_by_session is not None or session.created_by_relay is not None:
        return None  # an agent started the conversation: not one the owner started
    turn = Message.get_or_none(Message.id == payload.get("turnId"))
    if turn is None or turn.from_relay is not None or turn.from_kind != "user":
        return None
    return Item(Kind.REPLY_READY, excerpt(payload.get("excerpt")), link, session.id, session.title)


def prune(now: datetime) -> int:
    """Forget announced cards long expired, and questions no longer pending (older than a day)."""
    card_cutoff = now - timedelta(seconds=2 * defaults.CARD_EXPIRY_SECONDS)
    forgotten = Announced.delete().where(Announced.key.startswith("card:") & (Announced.created_at < card_cutoff)).execute()
    old = now - timedelta(days=1)
    for row in Announced.select().where(Announced.key.startswith("question:") & (Announced.created_at < old)).limit(500):
        if not still_waiting([row.key.removeprefix("question:")]):
            forgotten += Announced.delete().where(Announced.key == row.key).execute()
    forgotten += Announced.delete().where(Announced.key.startswith("capped:") & (Announced.created_at < now - timedelta(days=40))).execute()
    return int(forgotten)
