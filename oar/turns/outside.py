"""Conversations whose agent works outside the relay (docs/sessions.md#agents-outside-the-relay).

An agent the relay does not run — Claude Code, Codex, any MCP client — holds its
conversation's token. What arrives for such a conversation (a prompt another agent sends,
its subscriptions' events, schedule firings, answers to its asks, OpenClaw announces) is
queued as for any conversation, in the database and in order, but never starts a provider
turn: no worker claims it (`oar.engine.runner.claim_next_turn`). The agent takes what waits
with `take`, which waits until something arrives: notices are delivered as taken, and at
most one prompt at a time becomes the conversation's running turn until the agent answers
it with `reply` — its reply is the turn's, so the agent that sent the prompt gets it from
its own `send` or `wait`, exactly as from a relay-run session.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from oar.core import ids, jobs, keys
from oar.core.db import lock_rows, write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.statuses import TurnStatus
from oar.core.timeutil import iso, utcnow
from oar.core.waiting import Look, wait_on_signals
from oar.turns import outcome_rows, turns

# A prompt answers with a reply; the relay's own messages (events, schedules) are notices, delivered as taken.
REPLY_EXPECTED_ROLE = "user"
UNANSWERED_TEXT = "The agent outside the relay did not answer within {seconds} s (max_turn_seconds)."


def is_outside(session: Session) -> bool:
    return bool(session.agent_outside)


def recognise(session: Session) -> bool:
    """Whether the conversation's agent is outside the relay, marking it so when nobody decided yet
    and nothing says the relay runs it: started by the owner (not by an agent, not a stand-in for
    another relay's conversation), and no prompt ever written into it."""
    if session.agent_outside is not None:
        return bool(session.agent_outside)
    if session.created_by_session or session.remote_relay:
        return False
    # A prompt was written into it already: the relay runs it (the owner can still say otherwise).
    decided = not Message.select(Message.id).where((Message.session == session.id) & Message.status.is_null(False)).exists()
    with write_transaction():
        Session.update(agent_outside=decided).where((Session.id == session.id) & Session.agent_outside.is_null()).execute()
    session.agent_outside = decided
    return decided


def waiting_view(session: Session) -> dict[str, Any]:
    """What the owner sees of an outside conversation: how much waits for its agent, and when it last took something."""
    waiting = Message.select().where((Message.session == session.id) & (Message.status == TurnStatus.QUEUED)).count()
    return {"waiting": waiting, "takenAt": iso(session.outside_taken_at), "awaitingReply": session.active_turn}


@dataclass
class Taken:
    items: list[Message]
    # The prompt taken earlier and not answered yet, if any.
    awaiting: Message | None


def take(runtime: Runtime, session_id: str, seconds: float, limit: int) -> Taken:
    """What waits for the conversation, waiting up to `seconds` for something to arrive.

    Notices end `done` as they are taken; the first prompt becomes the running turn when no
    earlier one awaits its reply (a later one stays queued until then). Holds no database
    connection while it waits."""

    def look() -> Look[list[Message]]:
        taken = _take_waiting(runtime, session_id, limit)
        return Look(taken, settled=bool(taken))

    items = wait_on_signals(
        runtime, [keys.arrivals_channel(runtime.config.namespace, session_id)], look,
        recheck_seconds=runtime.time("WAIT_RECHECK_SECONDS"), seconds=seconds,
    )
    session = Session.get_by_id(session_id)
    awaiting = Message.get_or_none(Message.id == session.active_turn) if session.active_turn else None
    return Taken(items=items, awaiting=awaiting if awaiting is not None and awaiting not in items else None)


def _take_waiting(runtime: Runtime, session_id: str, limit: int) -> list[Message]:
    now = utcnow()
    taken: list[Message] = []
    with write_transaction():
        lock_rows(Session.select(Session.id).where(Session.id == session_id))
        session = Session.get_by_id(session_id)
        free = session.active_turn is None
        waiting = (Message.select().where((Message.session == session_id) & (Message.status == TurnStatus.QUEUED))
                   .order_by(Message.seq).limit(limit))
        for message in waiting:
            if message.role == REPLY_EXPECTED_ROLE:
                if not free:
                    continue  # one prompt at a time: this one waits for the reply to the one before
                if _start(message, session_id, now):
                    free = False
                    taken.append(message)
            elif Message.update(status=TurnStatus.DONE, started_at=now, completed_at=now).where(
                (Message.id == message.id) & (Message.status == TurnStatus.QUEUED)
            ).execute():
                taken.append(message)
        if taken:
            Session.update(outside_taken_at=now).where(Session.id == session_id).execute()
    for message in taken:
        runtime.signal_turn(message.id)
    return taken


def _start(message: Message, session_id: str, now: datetime) -> bool:
    """The prompt becomes the conversation's running turn (no heartbeat: no worker runs it)."""
    if not Session.update(active_turn=message.id).where(
        (Session.id == session_id) & Session.active_turn.is_null()
    ).execute():
        return False
    started = Message.update(status=TurnStatus.RUNNING, started_at=now, heartbeat_at=None, partial_text="").where(
        (Message.id == message.id) & (Message.status == TurnStatus.QUEUED)
    ).execute()
    message.status = TurnStatus.RUNNING
    return bool(started)


def reply(runtime: Runtime, session: Session, message_id: str, text: str) -> Message:
    """The agent's answer to the prompt it took: the turn ends `done` with it as its reply. A refusal
    leaves out what was not done: the dispatcher adds the action's sentence."""
    turn = Message.get_or_none((Message.id == message_id) & (Message.session == session.id) & Message.status.is_null(False))
    if turn is None:
        raise not_found(f'This conversation has no prompt with message_id "{message_id[:64]}".')
    if turn.role != REPLY_EXPECTED_ROLE:
        raise invalid(f"Message {turn.id} is a notice from the relay, not a prompt: it takes no reply.")
    if turn.status != TurnStatus.RUNNING:
        said = "not taken yet: take it first" if turn.status == TurnStatus.QUEUED else f"already {turn.status}"
        raise ActionError("REMOTE_RELAY_INVALID_INPUT", f"Prompt {turn.id} is {said}.", status=turn.status)
    now = utcnow()
    reply_id = ids.message_id()
    with write_transaction():
        lock_rows(Session.select(Session.id).where(Session.id == session.id))
        settled = outcome_rows.SETTLE.execute(turn.id, TurnStatus.DONE, None, text, reply_id, now)
        if settled:
            outcome_rows.INSERT_REPLY.insert(reply_id, session.id, text, now, turn.model)
            turns.record_turn_events(turn, TurnStatus.DONE, text, None, now)
        outcome_rows.FREE_SESSION.execute(now, 1 if settled else 0, session.id, turn.id)
    if not settled:  # stopped or expired meanwhile
        raise ActionError("REMOTE_RELAY_INVALID_INPUT", f"Prompt {turn.id} ended before the reply.")
    runtime.signal_turn(turn.id)
    _announce(runtime, session.id)  # a prompt queued behind it can be taken now
    jobs.poke_delivery(runtime)
    return Message.get(Message.id == turn.id)


def expire_unanswered(runtime: Runtime, now: datetime) -> int:
    """Prompts an agent outside took and did not answer within `max_turn_seconds` end `failed`."""
    seconds = int(runtime.settings()["max_turn_seconds"])
    late = list(
        Message.select().join(Session, on=(Session.active_turn == Message.id))
        .where((Session.agent_outside == True) & (Message.status == TurnStatus.RUNNING)  # noqa: E712
               & (Message.started_at < now - timedelta(seconds=seconds)))
    )
    ended = 0
    for turn in late:
        error = UNANSWERED_TEXT.format(seconds=seconds)
        with write_transaction():
            lock_rows(Session.select(Session.id).where(Session.id == turn.session_id))
            if outcome_rows.SETTLE.execute(turn.id, TurnStatus.FAILED, error, "", None, now):
                turns.record_turn_events(turn, TurnStatus.FAILED, "", error, now)
                ended += 1
            outcome_rows.FREE_SESSION.execute(now, 0, turn.session_id, turn.id)
        runtime.signal_turn(turn.id)
        _announce(runtime, turn.session_id)
    return ended


def _announce(runtime: Runtime, session_id: str) -> None:
    turns.announce_arrivals(runtime, [session_id])
