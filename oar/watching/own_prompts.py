"""Own prompts: a watcher waiting (send / wait) for the reply to a prompt it sent itself gets
that reply there, so the prompt's `turn_end` is held meanwhile and then not delivered."""

from __future__ import annotations

from datetime import datetime

from oar.core.db import write_transaction
from oar.core.models import HeldEvent, Message, ReplyReceipt
from oar.core.runtime import Runtime
from oar.core.statuses import FINISHED_TURN
from oar.watching import delivery, due_jobs, subscription_rules


def waiting_for_reply(turn: Message, waiter_id: str, until: datetime) -> bool:
    """The sender of `turn` waits for its reply through send / wait until `until`. False when
    nothing was noted (the waiter watches nothing): its wait then needs no `wait_ended`."""
    if turn.from_session != waiter_id or not subscription_rules.active_of(waiter_id).exists():
        return False
    with write_transaction():
        ReplyReceipt.insert(turn_id=turn.id, waiter=waiter_id, waiting_until=until).on_conflict(
            conflict_target=[ReplyReceipt.turn_id], update={ReplyReceipt.waiting_until: until}
        ).execute()
    return True


def wait_ended(runtime: Runtime, turn: Message, waiter_id: str, now: datetime) -> None:
    """The sender's wait returned: with the finished reply its `turn_end` is not delivered;
    without it, a held `turn_end` is delivered as usual."""
    if turn.from_session != waiter_id or not ReplyReceipt.select().where(ReplyReceipt.turn_id == turn.id).exists():
        return
    received = turn.status in FINISHED_TURN
    with write_transaction():
        ReplyReceipt.update(waiting_until=None, received_at=now if received else None).where(
            ReplyReceipt.turn_id == turn.id
        ).execute()
        own = (HeldEvent.watcher == waiter_id) & (HeldEvent.turn_id == turn.id) & HeldEvent.delivered_at.is_null()
        if received:
            HeldEvent.update(dropped=True).where(own).execute()
        else:
            HeldEvent.update(due_at=now, reason=delivery.WINDOW).where(own & (HeldEvent.reason == delivery.OWN)).execute()
    if not received:
        due_jobs.schedule_next(runtime, waiter_id)
