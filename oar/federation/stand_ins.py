"""What a paired relay's conversations have here, through their stand-ins (docs/relays.md): the asks
they made, the events delivered to their subscriptions, and what ends when the pairing is removed.
The relay-to-relay API (`oar/web/peer.py`) answers with these; each takes the pairing token the
call came with, so a pairing sees only its own conversations' stand-ins."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from peewee import fn

from oar.core.db import write_transaction
from oar.core.models import HeldEvent, Question, Subscription
from oar.core.statuses import QuestionStatus, SubscriptionEndReason
from oar.core.timeutil import iso
from oar.federation.models import PairingToken, RemoteCaller
from oar.watching import lifetime, outbox


@dataclass(frozen=True)
class Deliveries:
    """One fetch of events for a pairing's conversations: what was delivered after the cursor, how
    many events are still held for them, and their active subscriptions."""

    events: list[dict[str, Any]]
    held: int
    subscriptions: list[str]


def asks(token: PairingToken, wanted: list[str]) -> list[dict[str, Any]]:
    """The asks named in `wanted` that the pairing's conversations made here (others: left out)."""
    stand_ins = RemoteCaller.select(RemoteCaller.session).where(RemoteCaller.pairing_token == token.id)
    rows = Question.select().where(
        Question.id.in_(wanted) & (Question.kind == "ask") & Question.asker_session_id.in_(stand_ins)
    )
    return [
        {"question_id": row.id, "status": row.status, "answer": row.answer, "choices": row.choices, "via": row.via,
         "answeredAt": iso(row.answered_at)}
        for row in rows
    ]


def deliveries(token: PairingToken, after: int, limit: int) -> Deliveries:
    """What was delivered to the pairing's conversations after `after` (the last id the calling
    relay kept; what it kept is removed here), each named by its conversation on the calling relay."""
    callers = {row.session_id: row.remote_session for row in RemoteCaller.select().where(RemoteCaller.pairing_token == token.id)}
    with write_transaction():
        rows = outbox.fetch(list(callers), after, limit)
    still_held = HeldEvent.select(fn.COALESCE(fn.SUM(HeldEvent.count), 0)).where(
        HeldEvent.watcher.in_(list(callers)) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712
    ).scalar() if callers else 0
    active = [row.id for row in Subscription.select(Subscription.id).where(
        Subscription.watcher.in_(list(callers)) & Subscription.ended_at.is_null())] if callers else []
    events = [{"id": row["id"], "session": callers[row["watcher"]], "text": row["text"], "kinds": row["kinds"]} for row in rows]
    return Deliveries(events=events, held=int(still_held or 0), subscriptions=active)


def end_pairing(token: PairingToken, now: datetime) -> tuple[int, int]:
    """End the subscriptions (`endReason: unpaired`) and pending asks of the pairing's
    conversations here, in one transaction, telling no one. Returns (subscriptions, asks) ended."""
    stand_ins = [row.session_id for row in RemoteCaller.select().where(RemoteCaller.pairing_token == token.id)]
    if not stand_ins:
        return 0, 0
    ended = 0
    with write_transaction():
        for row in Subscription.select().where(Subscription.watcher.in_(stand_ins) & Subscription.ended_at.is_null()):
            ended += lifetime.end(row, SubscriptionEndReason.UNPAIRED, now)
        asks_ended = Question.update(status=QuestionStatus.ENDED, answered_at=now).where(
            Question.asker_session_id.in_(stand_ins) & (Question.kind == "ask")
            & (Question.status == QuestionStatus.PENDING)
        ).execute()
    return ended, asks_ended
