"""Recovering work from the database after crashes, restarts and a flushed Redis (docs/operations.md#durability-and-recovery).

Run by the clock every `RECONCILE_SECONDS` and once at start:
- a running turn whose heartbeat stopped (its worker died) is marked `failed`, never left
  `running`; the relay does not re-run it, because a half-run turn may have acted already;
- a session left pointing at a turn that is no longer running is released;
- queued turns that no worker is running are enqueued again;
- background tasks likewise (`oar.background.task_recovery.reconcile`): a task without a heartbeat is `failed`;
- approval cards nobody can be waiting on any more are withdrawn or expired.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from oar.approvals import cards
from oar.background import task_recovery
from oar.core import jobs, keys, metrics
from oar.core.db import lock_rows, write_transaction
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.statuses import LIVE_TURN, TurnStatus
from oar.turns import outside
from oar.turns.turns import start_turns

log = logging.getLogger(__name__)

ORPHANED_TEXT = (
    "The worker running this turn stopped before the turn finished (no heartbeat for {seconds} s). "
    "The turn was not completed; send the prompt again if it is still wanted."
)


@dataclass
class Reconciled:
    failed_turns: int = 0
    released_sessions: int = 0
    enqueued_sessions: int = 0
    failed_tasks: int = 0
    enqueued_tasks: int = 0
    ended_cards: int = 0
    unanswered_outside: int = 0


def reconcile(runtime: Runtime, now: datetime) -> Reconciled:
    outcome = Reconciled()
    stale_seconds = runtime.time("TURN_STALE_SECONDS")
    stale_before = now - timedelta(seconds=stale_seconds)
    stale = list(
        Message.select().where(Message.status.in_(LIVE_TURN) & (Message.heartbeat_at < stale_before))
    )
    for turn in stale:
        with write_transaction():
            lock_rows(Session.select(Session.id).where(Session.id == turn.session_id))
            failed = (
                Message.update(
                    status=TurnStatus.FAILED, error=ORPHANED_TEXT.format(seconds=int(stale_seconds)), completed_at=now
                )
                .where((Message.id == turn.id) & Message.status.in_(LIVE_TURN) & (Message.heartbeat_at < stale_before))
                .execute()
            )
            Session.update(active_turn=None).where(
                (Session.id == turn.session_id) & (Session.active_turn == turn.id)
            ).execute()
        if failed:
            outcome.failed_turns += 1
            started = turn.started_at or turn.created_at
            metrics.turn_ended(TurnStatus.FAILED.value, (now - started).total_seconds() if started else 0.0)
            runtime.signal_turn(turn.id)
            log.warning("turn %s of session %s failed: its worker stopped", turn.id, turn.session_id)

    # A session whose active turn is no longer open (a crash between two writes).
    dangling = (
        Session.select(Session.id, Session.active_turn)
        .join(Message, on=(Message.id == Session.active_turn))
        .where(Message.status.not_in(LIVE_TURN))
    )
    for session in dangling:
        with write_transaction():
            outcome.released_sessions += (
                Session.update(active_turn=None)
                .where((Session.id == session.id) & (Session.active_turn == session.active_turn))
                .execute()
            )

    grace_before = now - timedelta(seconds=runtime.time("RECONCILE_SECONDS"))
    waiting = (
        Session.select(Session.id)
        .join(Message, on=(Message.session == Session.id))
        .where(
            (Message.status == TurnStatus.QUEUED)
            & (Message.created_at < grace_before)
            & Session.active_turn.is_null()
            & (Session.archived == False)  # noqa: E712
            # An agent outside the relay takes its own prompts (oar.turns.outside): no worker runs them.
            & (Session.agent_outside.is_null() | (Session.agent_outside == False))  # noqa: E712
        )
        .distinct()
    )
    for session in waiting:
        if jobs.first_nudge_in_a_while(runtime, keys.turns_nudge(runtime.config.namespace, session.id)):
            start_turns(runtime, session.id)
            outcome.enqueued_sessions += 1
    # Background tasks: fail those whose worker died (and end their process), enqueue
    # those no worker took, remove output files past the hour they stay readable.
    task_outcome = task_recovery.reconcile(runtime, now)
    outcome.failed_tasks = task_outcome["failed"]
    outcome.enqueued_tasks = task_outcome["enqueued"]
    # Approval cards whose waiting call can no longer be there (its turn ended, or it expired).
    outcome.ended_cards = cards.sweep(now)
    # Prompts an agent outside the relay took and left unanswered past the turn time limit.
    outcome.unanswered_outside = outside.expire_unanswered(runtime, now)
    return outcome
