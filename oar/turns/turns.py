"""Turns: queueing prompts, waiting for replies, stopping, and how a turn is reported.

A turn is one prompt message and its reply. The prompt row carries the turn's status
(`queued → running → done | failed | stopped`, or `cancelled`); turns run only in RQ
workers (`oar.engine.runner`), one at a time per session, in the order they were queued.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from peewee import Alias, DoesNotExist, fn
from rq import Queue

from oar.approvals import questions
from oar.core import defaults, events, ids, jobs, keys, tracing
from oar.core.db import lock_rows, write_transaction
from oar.core.models import Message, Schedule, Session, Task
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import IN_PROGRESS_TURN, LIVE_TURN, SETTLED_TURN, WAITING_BEHIND_TURN, TaskStatus, TurnStatus
from oar.core.timeutil import iso, utcnow
from oar.core.waiting import Look, wait_on_signals
from oar.turns import outcome_rows

log = logging.getLogger(__name__)

NOT_FINISHED_NOTE = "Not finished yet. Call wait with this message_id."

# Where each field of a Provenance is kept: the prompt's Message columns, and the Schedule
# columns that keep the provenance of the turn that set a schedule (its session is the setter).
MESSAGE_COLUMNS = {
    "kind": "from_kind",
    "relay": "from_relay",
    "session": "from_session",
    "session_title": "from_session_title",
    "model": "from_model",
    "hops": "hops",
    "acts_for_user": "acts_for_user",
}
SCHEDULE_COLUMNS = {"relay": "origin_relay", "model": "origin_model", "hops": "hops", "acts_for_user": "acts_for_user"}


@dataclass(frozen=True)
class Provenance:
    """Where a prompt came from (docs/concepts.md): the badge and the hop count it carries."""

    kind: str = "user"  # user | agent | schedule | event
    relay: str | None = None
    session: str | None = None
    session_title: str | None = None
    model: str | None = None
    hops: int = 0
    acts_for_user: bool = False

    def columns(self) -> dict[str, Any]:
        """The Message columns of a prompt with this provenance."""
        return {column: getattr(self, field) for field, column in MESSAGE_COLUMNS.items()}

    @classmethod
    def of(cls, message: Message) -> Provenance:
        """The provenance a prompt was queued with."""
        return cls(**{field: getattr(message, column) for field, column in MESSAGE_COLUMNS.items()})

    def schedule_columns(self) -> dict[str, Any]:
        """The Schedule columns that keep this provenance for the schedule's firings."""
        return {column: getattr(self, field) for field, column in SCHEDULE_COLUMNS.items()}

    @classmethod
    def of_firing(cls, schedule: Schedule, setter: Session) -> Provenance:
        """A scheduled message inherits the provenance and hop count of the turn that set it."""
        kept = {field: getattr(schedule, column) for field, column in SCHEDULE_COLUMNS.items()}
        return cls(kind="schedule", session=setter.id, session_title=setter.title, **kept)


def insert_prompt(
    session: Session,
    text: str,
    provenance: Provenance,
    *,
    role: str = "user",
    mode: str | None = None,
    model: str | None = None,
    effort: str | None = None,
) -> Message:
    """Queue a prompt (inside the caller's write transaction); `start_turns` after commit."""
    now = utcnow()
    message = Message.create(
        id=ids.message_id(),
        session=session,
        role=role,
        text=text,
        created_at=now,
        **provenance.columns(),
        status=TurnStatus.QUEUED,
        mode=mode or session.mode,
        model=model or session.model,
        effort=effort or session.effort,
    )
    Session.update(
        message_count=Session.message_count + 1, last_activity_at=now
    ).where(Session.id == session.id).execute()
    # With traces on, the turn continues the trace of the call that queued it (a worker runs it).
    tracing.remember_for_prompt(message.id)
    return message


# What a woken wait reads (docs/waiting.md#how-waiting-wakes), in one query: the turn with its
# reply's text (`reply_text`, for `result`) and whether its session has a task running
# (`tasks_running`, for `still_working`). A turn read any other way has neither.
_REPLY = Message.alias("reply")
_TURN = Prepared(
    lambda message_id: Message.select(
        *Message._meta.sorted_fields,
        Alias(_REPLY.select(_REPLY.text).where(_REPLY.id == Message.reply_id), "reply_text"),
        fn.EXISTS(
            Task.select(Task.id).where((Task.session == Message.session) & (Task.status == TaskStatus.RUNNING))
        ).alias("tasks_running"),
    )
    .where(Message.id == message_id)
    .limit(1)
)
_REPLY_TEXT = Prepared(lambda message_id: Message.select(Message.text).where(Message.id == message_id).limit(1).tuples())

# Asked for each of the hundreds of watchers a delivery pass writes to: its SQL built once.
_ACTIVE_TURN = Prepared(lambda session_id: Session.select(Session.active_turn).where(Session.id == session_id).tuples())


def taken_at_turn_end(session_id: str) -> bool:
    """Whether the prompt just queued (in this transaction, by `insert_prompt`) will be taken
    by the session's running turn as it ends, so that no job need be enqueued for it.

    A turn's outcome, written with the session row locked, looks for a queued prompt
    (`oar.engine.outcomes`). `insert_prompt` has locked that row too (SQLite: the write lock),
    so the turn seen running here has not written its outcome yet, and that outcome will see
    this prompt once this transaction commits. A turn whose worker died is failed by the
    reconciler, which then starts the queued prompts."""
    return any(active for (active,) in _ACTIVE_TURN.rows(session_id))


def start_turns(runtime: Runtime, session_id: str) -> None:
    """Ask a worker to run the session's queued turns (after the prompt is committed)."""
    start_turns_of(runtime, [session_id])


def start_turns_of(runtime: Runtime, session_ids: list[str]) -> None:
    """Ask a worker to run each session's queued turns, in one Redis round trip (a delivery
    pass's watchers). If Redis is unreachable the prompts stay queued in the database and the
    clock's reconciler enqueues them when Redis is back."""
    if not session_ids:
        return
    announce_arrivals(runtime, session_ids)
    try:
        runtime.queue.enqueue_many([
            Queue.prepare_data(
                jobs.RUN_TURNS, (session_id,), timeout=-1, result_ttl=jobs.TURN_JOB_KEPT_SECONDS, failure_ttl=86_400
            )
            for session_id in session_ids
        ])
    except Exception as error:  # noqa: BLE001 - any Redis failure leaves it to the reconciler
        log.warning("turns for %s not enqueued yet: %s", ", ".join(session_ids[:5]), error)


def announce_arrivals(runtime: Runtime, session_ids: list[str]) -> None:
    """Wake the sessions' agents outside the relay that wait in `take` (a worker ignores their prompts)."""
    try:
        pipe = runtime.redis.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.publish(keys.arrivals_channel(runtime.config.namespace, session_id), b"1")
        pipe.execute()
    # Any failure, not only RedisError: a waiting take looks again within its recheck, and the
    # prompt is committed. (Under 50 sessions made at once, redis-py once raised ValueError, "I/O
    # operation on closed file", from a new connection's first health check: the owner got a 500.)
    except Exception as error:  # noqa: BLE001
        log.warning("arrivals for %s not announced: %s", ", ".join(session_ids[:5]), error)


def badge(message: Message) -> dict[str, Any] | None:
    """The provenance shown with a prompt: `↗ from <relay> · <session> · <model>`."""
    if message.role == "assistant" or message.from_kind == "user":
        return None  # most messages (read_session shows ten a call): without building the provenance
    came_from = Provenance.of(message)
    if came_from.kind == "user" or message.role == "assistant":
        return None
    entry: dict[str, Any] = {"kind": came_from.kind, "hops": came_from.hops}
    if came_from.kind == "agent":
        parts = [came_from.relay or "this relay", came_from.session_title or ids.short(came_from.session or "")]
        if came_from.model:
            parts.append(came_from.model)
        entry.update(
            relay=came_from.relay,
            session=came_from.session,
            title=came_from.session_title,
            model=came_from.model,
            actsForUser=came_from.acts_for_user,
            badge="↗ from " + " · ".join(parts),
        )
    return entry


def clip_reply(text: str, limit: int = defaults.MAX_REPLY_CHARS) -> tuple[str, bool]:
    """Replies longer than `limit` keep their head and tail (docs/waiting.md)."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    clipped = len(text) - 2 * half
    return f"{text[:half]}\n…[{clipped} characters clipped]…\n{text[-half:]}", True


def progress(message: Message) -> dict[str, Any]:
    session = Session.get_by_id(message.session_id)
    status: str
    if message.status == TurnStatus.RUNNING:
        status = TurnStatus.RUNNING
    elif session.active_turn and session.active_turn != message.id:
        status = WAITING_BEHIND_TURN
    else:
        status = TurnStatus.QUEUED
    entry: dict[str, Any] = {"status": status}
    if status == WAITING_BEHIND_TURN:
        entry["turnMessageId"] = session.active_turn
    else:
        entry["turnMessageId"] = message.id
    if message.started_at:
        entry["startedAt"] = iso(message.started_at)
    if message.status == TurnStatus.RUNNING:
        entry["text"] = (message.partial_text or "")[-defaults.PROGRESS_TEXT_CHARS :]
        entry["activities"] = (message.activities or [])[-defaults.PROGRESS_ACTIVITIES :]
    return entry


def result(runtime: Runtime, message: Message) -> dict[str, Any]:
    """What send / create_session / wait report about a turn (docs/waiting.md)."""
    entry: dict[str, Any] = {
        "status": message.status,
        "session": message.session_id,
        "message_id": message.id,
        "openUrl": runtime.open_url(message.session_id),
    }
    if message.status in IN_PROGRESS_TURN:
        entry["progress"] = progress(message)
    elif message.status == TurnStatus.DONE:
        text, truncated = clip_reply(_reply_text(message))
        entry["reply"] = {"text": text, "model": message.model, "messageId": message.reply_id}
        if truncated:
            entry["reply"]["truncated"] = True
        if message.output_truncated:  # cut at the output budget even after a continuation (docs/providers.md#output-budget)
            entry["reply"]["outputTruncated"] = True
    elif message.status == TurnStatus.FAILED:
        entry["error"] = message.error
    elif message.status == TurnStatus.STOPPED:
        entry["note"] = "The turn was stopped before it finished."
        if message.partial_text:
            entry["partialText"] = clip_reply(message.partial_text)[0]
    elif message.status == TurnStatus.CANCELLED:
        entry["note"] = "This message will never be answered: " + (message.error or "it was cancelled.")
    elif message.status == TurnStatus.WAITING_FOR_ANSWER:
        entry["pendingQuestions"] = questions.pending_of_turn(message.id)
    return entry


def _reply_text(message: Message) -> str:
    """A finished turn's reply: read with the turn by a woken wait (`_TURN`), else read here."""
    if not message.reply_id:
        return ""
    if hasattr(message, "reply_text"):
        return message.reply_text or ""
    found = _REPLY_TEXT.first(message.reply_id)
    return (found[0] if found else None) or ""


def summary_status(entry: dict[str, Any]) -> str:
    status = entry["status"]
    if status == TurnStatus.DONE:
        first_line = (entry["reply"]["text"] or "").splitlines()[0:1]
        excerpt = first_line[0][:60] if first_line else ""
        return f'done "{excerpt}"'
    if status == TurnStatus.FAILED:
        return f"failed: {(entry.get('error') or '')[:80]}"
    return status


def is_settled(message: Message) -> bool:
    """Whether a waiting call returns now: the turn ended, or it waits on a question card
    (unless a stop is on its way, which ends it in a moment)."""
    if message.status == TurnStatus.WAITING_FOR_ANSWER:
        return not message.stop_requested
    return message.status in SETTLED_TURN


def wait_for(runtime: Runtime, message_id: str, seconds: float) -> Message:
    """Wait up to `seconds` for the turn to settle; returns the prompt as it is then.

    Wakes on the turn's Redis signal; holds no database connection while it sleeps.
    """

    def look() -> Look[Message]:
        message = _TURN.first(message_id)
        if message is None:
            raise DoesNotExist(f"no message {message_id}")
        return Look(message, settled=is_settled(message))

    return wait_on_signals(
        runtime, [keys.turn_channel(runtime.config.namespace, message_id)], look,
        recheck_seconds=runtime.time("WAIT_RECHECK_SECONDS"), seconds=seconds,
    )


def request_stop(session: Session) -> str:
    """Ask the running turn to stop; `stop-queued | no-active-turn | already-requested`."""
    if not session.active_turn:
        return "no-active-turn"
    changed = (
        Message.update(stop_requested=True)
        .where(
            (Message.id == session.active_turn)
            & (Message.status.in_(LIVE_TURN))
            & (Message.stop_requested == False)  # noqa: E712
        )
        .execute()
    )
    if changed:
        return "stop-queued"
    message = Message.get_or_none(Message.id == session.active_turn)
    if message is not None and message.stop_requested and message.status in LIVE_TURN:
        return "already-requested"
    return "no-active-turn"


def stop_turn(runtime: Runtime, session: Session) -> str:
    """The `stop` action (docs/sessions.md#answer_question-stop-and-archive): the running turn is
    asked to stop; a prompt that no worker has started yet ends `stopped` at once, as the user
    who pressed Stop right after sending means (it would otherwise start a moment later).
    `stop-queued | no-active-turn | already-requested`."""
    stopped_before_start = None
    with write_transaction():
        # The session's row lock orders this with a worker claiming the prompt (claim_next_turn).
        lock_rows(Session.select(Session.id).where(Session.id == session.id))
        session = Session.get_by_id(session.id)
        acknowledgement = request_stop(session)
        if acknowledgement != "no-active-turn" and session.agent_outside:
            # No worker runs a prompt its agent outside took: it ends `stopped` here.
            stopped_before_start = _stop_taken(session)
        elif acknowledgement == "no-active-turn":
            stopped_before_start = _stop_next_queued(session)
            if stopped_before_start is not None:
                acknowledgement = "stop-queued"
    if stopped_before_start is not None:
        runtime.signal_turn(stopped_before_start)
        jobs.poke_delivery(runtime)
    elif acknowledgement == "stop-queued" and session.active_turn:
        signal_stop(runtime, session.active_turn)
    return acknowledgement


def stop_prompt(runtime: Runtime, message_id: str) -> bool:
    """Stop one prompt's turn, as `stop` does for a session's: running, it is asked to stop; not
    started yet, it ends `stopped` at once. False when it had ended (nothing to stop)."""
    stopped_before_start = asked = False
    with write_transaction():
        message = Message.get_or_none(Message.id == message_id)
        if message is None or message.status not in IN_PROGRESS_TURN:
            return False
        lock_rows(Session.select(Session.id).where(Session.id == message.session_id))
        now = utcnow()
        stopped_before_start = bool(
            Message.update(status=TurnStatus.STOPPED, stop_requested=True, completed_at=now)
            .where((Message.id == message_id) & (Message.status == TurnStatus.QUEUED))
            .execute()
        )
        session = Session.get_by_id(message.session_id)
        if stopped_before_start:
            record_turn_events(message, TurnStatus.STOPPED, "", None, now)
        elif session.agent_outside and session.active_turn == message_id:
            stopped_before_start = _stop_taken(session) is not None
        else:
            asked = bool(
                Message.update(stop_requested=True)
                .where((Message.id == message_id) & Message.status.in_(LIVE_TURN))
                .execute()
            )
    if stopped_before_start:
        runtime.signal_turn(message_id)
        jobs.poke_delivery(runtime)
    elif asked:
        signal_stop(runtime, message_id)
    return stopped_before_start or asked


def _stop_taken(session: Session) -> str | None:
    """Inside a write transaction: the prompt an agent outside took ends `stopped`; its id."""
    turn = Message.get_or_none(Message.id == session.active_turn)
    now = utcnow()
    if turn is None or not outcome_rows.SETTLE.execute(turn.id, TurnStatus.STOPPED, None, "", None, now):
        return None
    record_turn_events(turn, TurnStatus.STOPPED, "", None, now)
    outcome_rows.FREE_SESSION.execute(now, 0, session.id, turn.id)
    return str(turn.id)


def _stop_next_queued(session: Session) -> str | None:
    """Inside a write transaction: the prompt a worker would start next ends `stopped`; its id."""
    turn = (
        Message.select()
        .where((Message.session == session.id) & (Message.status == TurnStatus.QUEUED))
        .order_by(Message.seq)
        .first()
    )
    if turn is None:
        return None
    now = utcnow()
    stopped = (
        Message.update(status=TurnStatus.STOPPED, stop_requested=True, completed_at=now)
        .where((Message.id == turn.id) & (Message.status == TurnStatus.QUEUED))
        .execute()
    )
    if not stopped:
        return None
    record_turn_events(turn, TurnStatus.STOPPED, "", None, now)
    return str(turn.id)


def record_turn_events(turn: Message, status: TurnStatus, text: str, error: str | None, now: Any) -> None:
    """`turn_end` with the status and the start of the reply; `error` for a failed turn (docs/events.md#events)."""
    events.record(
        turn.session_id, "turn_end",
        {"turnId": turn.id, "status": status, "excerpt": ((error or "") if status == TurnStatus.FAILED else text or "")[:200],
         "fromSession": turn.from_session if turn.from_kind == "agent" else None,
         # What queued the prompt: a turn an event delivery started wakes no watcher with its
         # turn_end (docs/events.md#watchers-that-wake-each-other).
         "startedBy": turn.from_kind},
        now,
    )
    if status == TurnStatus.FAILED:
        events.record(turn.session_id, "error", {"turnId": turn.id, "error": (error or "")[:500]}, now)


def signal_stop(runtime: Runtime, message_id: str) -> None:
    publish(runtime.redis, keys.turn_stop_channel(runtime.config.namespace, message_id))


def cancel_queued(session: Session, reason: str) -> list[str]:
    """Mark every queued prompt of the session cancelled; returns their ids."""
    queued = [
        row.id
        for row in Message.select(Message.id).where((Message.session == session) & (Message.status == TurnStatus.QUEUED))
    ]
    if queued:
        Message.update(status=TurnStatus.CANCELLED, error=reason, completed_at=utcnow()).where(
            Message.id.in_(queued) & (Message.status == TurnStatus.QUEUED)
        ).execute()
    return queued


def newest_messages(session_id: str, limit: int) -> list[Message]:
    """A session's newest `limit` messages, oldest first."""
    rows = list(Message.select().where(Message.session == session_id).order_by(Message.seq.desc()).limit(limit))
    rows.reverse()
    return rows


def newest_message_states(session_id: str, limit: int) -> list[Message]:
    """The same messages as `newest_messages` with only what says they changed (seq, status,
    reply_id), not their texts: for a poll that asks whether to fetch them again."""
    rows = list(
        Message.select(Message.seq, Message.status, Message.reply_id)
        .where(Message.session == session_id).order_by(Message.seq.desc()).limit(limit)
    )
    rows.reverse()
    return rows


def live_turn(session: Session) -> Message | None:
    """The session's turn being run or written now, or None."""
    if not session.active_turn:
        return None
    turn = Message.get_or_none(Message.id == session.active_turn)
    return turn if turn is not None and turn.status in LIVE_TURN else None


def find_message(message_id: str, session_id: str | None = None) -> Message | None:
    """The message `message_id` (of the session `session_id`, when given), or None."""
    where = Message.id == message_id
    if session_id is not None:
        where &= Message.session == session_id
    return Message.get_or_none(where)
