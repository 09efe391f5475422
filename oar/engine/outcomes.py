"""Recording a turn's outcome: its status, its reply, its events, the session free again.

On SQLite the outcomes of turns that end together in one worker process are written in one
transaction (a group commit): SQLite has one writer, and 25 turns ending within the same
tenth of a second each waited behind the others' whole transactions, one lock hand-over
each (docs/benchmarks.md#provider-streaming-python--m-bench-providers). The first turn to arrive writes every outcome
waiting by then, each in a savepoint of its own, so that one that fails undoes only itself;
the others find theirs written when their turn comes. PostgreSQL locks rows, not the
database: there each outcome keeps a transaction of its own, as a batch locking several
sessions' rows could deadlock with a writer locking them in another order.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from oar.core import ids, jobs, metrics, tracing
from oar.core.db import database, is_sqlite, lock_rows, write_transaction
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.statuses import TurnStatus
from oar.core.timeutil import utcnow
from oar.openclaw import openclaw_runs
from oar.providers import usage
from oar.providers.base import Usage
from oar.turns import outcome_rows as rows
from oar.turns import turns


@dataclass
class _Outcome:
    turn: Message
    status: TurnStatus
    text: str
    error: str | None
    activities: list[str] | None
    used: list[tuple[str, Usage]]
    # Set by whoever writes it:
    written: bool = False
    settled: bool = False
    queued_behind: bool = False
    failure: BaseException | None = None


# Outcomes waiting to be written, and the turn of the thread that writes them.
_waiting: list[_Outcome] = []
_waiting_lock = threading.Lock()
_writing = threading.Lock()


def _forget_inherited() -> None:
    global _waiting_lock, _writing
    _waiting.clear()
    _waiting_lock, _writing = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited)


def finish(
    runtime: Runtime, turn: Message, status: TurnStatus, text: str, error: str | None,
    activities: list[str] | None = None, used: list[tuple[str, Usage]] | None = None,
) -> bool:
    """Record a turn's outcome; True if the session has a prompt queued behind it then.

    That look is made in the outcome's transaction, so a later prompt finds the session free
    and is claimed by its own job; the worker skips a claim that would find nothing (a write
    transaction of its own, taken by every turn as it ends). A turn already settled elsewhere
    (stopped, or failed by the reconciler) is left as it is.

    `activities`: the turn's last activity lines, written with the outcome because the stream
    skips a write while another writer holds the lock (the last tool line would be lost).
    `used`: the tokens its provider reported, (provider name, usage) each; recorded whatever
    the outcome."""
    outcome = _Outcome(turn, status, text, error, activities, used or [])
    if is_sqlite():
        _write_with_others(outcome)
    else:
        with write_transaction():
            _write(outcome)
    runtime.signal_turn(turn.id)
    if outcome.settled:
        _counted(turn, status)
        jobs.poke_delivery(runtime)
        # An OpenClaw run waiting for this turn takes its next step now (the clock's sweep after a crash).
        openclaw_runs.turn_ended(runtime, turn.id)
    return outcome.queued_behind


def _counted(turn: Message, status: TurnStatus) -> None:
    """The turn's outcome for `/metrics` and on its span (docs/operations.md#watching-it)."""
    started = turn.started_at or turn.created_at
    metrics.turn_ended(status.value, (utcnow() - started).total_seconds() if started else 0.0)
    tracing.note_current({"oar.outcome": status.value}, error=None if status == TurnStatus.DONE else status.value)


def _write_with_others(outcome: _Outcome) -> None:
    with _waiting_lock:
        _waiting.append(outcome)
    with _writing:
        if not outcome.written:  # nobody took it with theirs: this thread writes all that wait
            with _waiting_lock:
                group = list(_waiting)
                _waiting.clear()
            _write_group(group)
    if outcome.failure is not None:
        raise outcome.failure


def _write_group(group: list[_Outcome]) -> None:
    try:
        with write_transaction():
            if len(group) == 1:  # alone, it is undone with its transaction: no savepoint
                _write(group[0])
                return
            for outcome in group:
                try:
                    with database.atomic():  # a savepoint: what fails is undone alone
                        _write(outcome)
                except Exception as error:  # noqa: BLE001 - raised in its own turn's thread
                    outcome.settled, outcome.failure = False, error
    except BaseException as error:  # the transaction itself failed (or was interrupted): nothing was written
        for outcome in group:
            outcome.settled, outcome.queued_behind = False, False
            outcome.failure = outcome.failure or error
        if not isinstance(error, Exception):
            raise
    finally:
        for outcome in group:
            outcome.written = True


def _write(outcome: _Outcome) -> None:
    turn, status, text = outcome.turn, outcome.status, outcome.text
    keep_reply = status == TurnStatus.DONE or (status == TurnStatus.STOPPED and text)
    reply_id = ids.message_id() if keep_reply else None
    # Stamped once the lock is held: `completed_at` is when the outcome is written, not when
    # the turn began waiting for its write (docs/benchmarks.md#provider-streaming-python--m-bench-providers).
    now = utcnow()
    lock_rows(Session.select(Session.id).where(Session.id == turn.session_id))
    for provider_name, reported in outcome.used:
        usage.record(provider_name, turn.model, turn.session_id, turn.id, reported.input_tokens, reported.output_tokens)
    settle = (turn.id, status, outcome.error, text, reply_id, now)
    if outcome.activities:
        settled = rows.SETTLE_WITH_ACTIVITIES.execute(*settle, Message.activities.db_value(outcome.activities))
    else:
        settled = rows.SETTLE.execute(*settle)
    if settled and reply_id:
        rows.INSERT_REPLY.insert(reply_id, turn.session_id, text, now, turn.model)
    if settled:
        turns.record_turn_events(turn, status, text, outcome.error, now)
    rows.FREE_SESSION.execute(now, 1 if settled and reply_id else 0, turn.session_id, turn.id)
    outcome.settled = bool(settled)
    outcome.queued_behind = bool(rows.QUEUED_PROMPT.rows(turn.session_id))
