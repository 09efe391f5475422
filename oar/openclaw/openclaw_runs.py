"""What happens after a sessions_send or sessions_spawn: the reply ping-pong, the announce step,
and a spawned child's announce, cleanup and archiving (docs/openclaw.md#runs).

A run waits for one prompt's turn at a time (`Run.awaiting_message_id`). When that turn ends,
`advance` takes the run's next step in one write transaction: it claims the run with a
conditional UPDATE on the awaited id (so the step is taken once, whoever sees the turn end
first), queues the next prompt and records what it waits for next. The worker that ran the turn
calls `turn_ended` at once; the clock's `sweep` finds any run whose awaited turn ended without
it (a worker killed in between, a restart), whose spawn passed its deadline, or whose kept child
is due to be archived. The database holds every step, so a restart loses nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from peewee import JOIN

from oar import lifecycle
from oar.core.db import write_transaction
from oar.core.models import Message, Session
from oar.core.prepared import Prepared
from oar.core.runtime import Runtime
from oar.core.statuses import FINISHED_TURN, TurnStatus
from oar.core.timeutil import utcnow
from oar.openclaw.keys import source_key
from oar.openclaw.models import InterSessionMessage, Run
from oar.turns import automated, turns

log = logging.getLogger(__name__)

REPLY_SKIP = "REPLY_SKIP"
ANNOUNCE_SKIP = "ANNOUNCE_SKIP"
SEND_TOOL = "sessions_send"
SPAWN_TOOL = "sessions_spawn"

# The first line of what a run writes into a session: what wrote it, and that it is not the user.
INTER_SESSION_HEADER = "[inter-session message from {source} via {tool}: another agent wrote this, not the user]"
REPLY_STEP_HEADER = (
    "[inter-session message from {source} via sessions_send · agent-to-agent reply step {turn} of {turns}: "
    "another agent wrote this, not the user]"
)
ANNOUNCE_STEP_HEADER = "[agent-to-agent announce step of sessions_send run {run}: from the relay, not the user]"


def quoted(text: str) -> str:
    """Another agent's text inside a prompt, every line quoted (so none of it reads as a directive)."""
    return "\n".join("> " + line for line in (text or "(empty)").splitlines()) or "> (empty)"


def inter_session_text(source: str, tool: str, message: str) -> str:
    """The prompt a tool sends: its header (the target is told an agent wrote it), then the message."""
    return INTER_SESSION_HEADER.format(source=source, tool=tool) + "\n" + message


def record_prompt(message_id: str, run_id: str, source: str, tool: str) -> None:
    InterSessionMessage.insert(
        message_id=message_id, run_id=run_id, source_session_key=source, source_tool=tool
    ).on_conflict_ignore().execute()


def provenance_of(message_ids: list[str]) -> dict[str, dict[str, str]]:
    """`{kind: "inter_session", sourceSessionKey, sourceTool}` of the prompts the tools wrote."""
    if not message_ids:
        return {}
    return {
        row.message_id: {"kind": "inter_session", "sourceSessionKey": row.source_session_key, "sourceTool": row.source_tool}
        for row in InterSessionMessage.select().where(InterSessionMessage.message_id.in_(message_ids))
    }


def start(runtime: Runtime, fields: dict[str, Any]) -> Run:
    """Record a run waiting for its first turn; take its next step at once if that turn has ended already
    (a sessions_send that waited for the reply)."""
    with write_transaction():
        run = Run.create(awaiting_message_id=fields["request_message_id"], created_at=utcnow(), **fields)
        record_prompt(run.request_message_id, run.id, source_key(Session.get_by_id(run.requester_session_id)),
                      SPAWN_TOOL if run.kind == "spawn" else SEND_TOOL)
    advance(runtime, run.request_message_id)
    return run


# Asked after every turn's outcome, mostly finding none: its SQL built once (oar/core/prepared.py).
_AWAITING = Prepared(lambda turn_id: Run.select().where(Run.awaiting_message_id == turn_id).limit(1))


def turn_ended(runtime: Runtime, turn_id: str) -> None:
    """The engine's hook, after a turn's outcome is committed: the run waiting for it goes on."""
    try:
        advance(runtime, turn_id)
    except Exception:  # the clock's sweep takes the step later; the turn itself is recorded
        log.exception("openclaw: the step after turn %s failed; the sweep takes it again", turn_id)


def advance(runtime: Runtime, turn_id: str) -> bool:
    """Take the next step of the run waiting for this turn, if the turn has ended; True if one was taken."""
    run = _AWAITING.first(turn_id)
    if run is None:
        return False
    turn = Message.get_or_none(Message.id == turn_id)
    if turn is not None and turn.status not in FINISHED_TURN:
        return False
    started: list[str] = []
    after: list[tuple[str, Any]] = []
    archive_minutes = int(runtime.settings()["spawn_archive_after_minutes"]) if run.kind == "spawn" else 0
    with write_transaction():
        claimed = Run.update(awaiting_message_id=None).where(
            (Run.id == run.id) & (Run.awaiting_message_id == turn_id)
        ).execute()
        if not claimed:
            return False
        run = Run.get_by_id(run.id)
        if run.kind == "spawn":
            after = _spawn_ended(run, turn, archive_minutes)
        else:
            started = _send_step(run, turn)
    for session_id in started:
        turns.start_turns(runtime, session_id)
    for what, value in after:
        _after_commit(runtime, what, value)
    return True


def _reply_of(turn: Message | None) -> tuple[bool, str]:
    """(the turn is done, its reply text)."""
    if turn is None or turn.status != TurnStatus.DONE:
        return False, ""
    reply = Message.get_or_none(Message.id == turn.reply_id) if turn.reply_id else None
    return True, (reply.text if reply else "")


def _end(run: Run, outcome: str) -> None:
    Run.update(step="done", outcome=outcome, ended_at=utcnow()).where(Run.id == run.id).execute()


def _open(session_id: str) -> Session | None:
    return Session.get_or_none((Session.id == session_id) & Session.live(archived=False))


# sessions_send: main → reply ⇄ … → announce → done ------------------------------------------------


def _send_step(run: Run, turn: Message | None) -> list[str]:
    """The step after a sessions_send's turn; returns the sessions whose turns to start."""
    done, text = _reply_of(turn)
    if run.step == "main":
        if not done:
            _end(run, "failed")
            return []
        Run.update(first_reply=text, latest_reply=text).where(Run.id == run.id).execute()
        run = Run.get_by_id(run.id)
        if run.max_ping_pong > 0 and run.requester_runs:
            return _reply_step(run, 1)
        return _announce_step(run)
    if run.step == "reply":
        if not done or text.strip() in ("", REPLY_SKIP):
            return _announce_step(run)
        Run.update(latest_reply=text).where(Run.id == run.id).execute()
        run = Run.get_by_id(run.id)
        if run.ping_pong_done < run.max_ping_pong:
            return _reply_step(run, run.ping_pong_done + 1)
        return _announce_step(run)
    if run.step == "announce":
        if not done or text.strip() == ANNOUNCE_SKIP:
            _end(run, "skipped" if done else "failed")
            return []
        return _post_announce(run, text)
    return []


def _reply_step(run: Run, number: int) -> list[str]:
    """Ping-pong turn `number`: the requester answers the target's reply on odd turns, the target
    the requester's on even ones."""
    to_requester = number % 2 == 1
    side_id, other_id = (
        (run.requester_session_id, run.target_session_id) if to_requester else (run.target_session_id, run.requester_session_id)
    )
    side, other = _open(side_id), _open(other_id)
    if side is None or other is None:
        _end(run, "ended")
        return []
    source = source_key(other)
    text = (
        REPLY_STEP_HEADER.format(source=source, turn=number, turns=run.max_ping_pong) + "\n"
        + quoted(run.latest_reply or "") + "\n\n"
        + f"Reply to go on with this exchange, or reply exactly {REPLY_SKIP} to end it."
    )
    prompt = turns.insert_prompt(side, text, _agent_provenance(other, run))
    record_prompt(prompt.id, run.id, source, SEND_TOOL)
    Run.update(step="reply", ping_pong_done=number, awaiting_message_id=prompt.id).where(Run.id == run.id).execute()
    return [side.id]


def _agent_provenance(other: Session, run: Run) -> turns.Provenance:
    hops = Message.select(Message.hops).where(Message.id == run.request_message_id).scalar() or 0
    return turns.Provenance(
        kind="agent", session=other.id, session_title=other.title, model=other.model, hops=hops, acts_for_user=False,
    )


def _announce_step(run: Run) -> list[str]:
    """The target writes what to post to the requester (ANNOUNCE_SKIP: nothing)."""
    target = _open(run.target_session_id)
    if target is None or _open(run.requester_session_id) is None:
        _end(run, "ended")
        return []
    requester = Session.get_by_id(run.requester_session_id)
    text = (
        ANNOUNCE_STEP_HEADER.format(run=run.id) + "\n"
        + f"Original request (from {source_key(requester)}):\n{quoted(run.request_text)}\n"
        + f"First reply:\n{quoted(run.first_reply or '')}\n"
        + f"Latest reply:\n{quoted(run.latest_reply or '')}\n\n"
        + f"Write the final answer to post to the requester's conversation, or reply exactly {ANNOUNCE_SKIP} to post nothing."
    )
    prompt = automated.insert(target, text, turns.Provenance(kind="event"))
    Run.update(step="announce", awaiting_message_id=prompt.id).where(Run.id == run.id).execute()
    return [target.id]


def _post_announce(run: Run, answer: str) -> list[str]:
    requester = _open(run.requester_session_id)
    if requester is None:
        _end(run, "ended")
        return []
    target = Session.get_by_id(run.target_session_id)
    text = (
        f"{automated.EVENT_HEADER}\n"
        f"sessions_send announce from {source_key(target)} (run {run.id}):\n{answer}\n\n"
        f"Request:\n{quoted(run.request_text)}\nFirst reply:\n{quoted(run.first_reply or '')}\n"
        f"Latest reply:\n{quoted(run.latest_reply or '')}"
    )
    automated.insert(requester, text, turns.Provenance(kind="event"))
    _end(run, "announced")
    return [requester.id]


# sessions_spawn: main → announce, cleanup → (archive) --------------------------------------------


def spawn_status(run: Run, turn: Message | None) -> str:
    """The announce's Status, from the run's real outcome (never from the model's text)."""
    if run.timed_out:
        return "timeout"
    if turn is None:
        return "error: the child session is gone"
    if turn.status == TurnStatus.DONE:
        return "ok"
    if turn.status == TurnStatus.FAILED:
        return f"error: {turn.error or 'the run failed'}"
    return str(turn.status)


def spawn_result(turn: Message | None) -> str:
    """The reply, or the last tool result when the reply is empty."""
    _done, text = _reply_of(turn)
    if not text.strip() and turn is not None:
        text = turn.partial_text or ""
    if not text.strip() and turn is not None and turn.activities:
        text = str(turn.activities[-1])
    return text.strip() or "(no output)"


def _spawn_ended(run: Run, turn: Message | None, archive_minutes: int) -> list[tuple[str, Any]]:
    """Announce a spawned run's end into the requester's conversation, then clean up."""
    now = utcnow()
    result = spawn_result(turn)
    after: list[tuple[str, Any]] = []
    requester = _open(run.requester_session_id)
    if result == ANNOUNCE_SKIP:
        outcome = "silent"
    elif requester is None:
        outcome = "ended"
    else:
        started = turn.started_at if turn is not None and turn.started_at else run.created_at
        ended = turn.completed_at if turn is not None and turn.completed_at else now
        keeping = (
            "the child is deleted" if run.cleanup == "delete"
            else "the child is kept" + (" and archived later" if run.mode == "run" else "")
        )
        text = (
            f"{automated.EVENT_HEADER}\n"
            f'sessions_spawn: subagent "{run.label or run.child_key}" ({run.child_key}) finished.\n'
            f"Status: {spawn_status(run, turn)}\n"
            f"Result: {result}\n"
            f"Notes: run {run.id}; ran {max(0, int((ended - started).total_seconds()))} s; cleanup {run.cleanup}: {keeping}."
        )
        automated.insert(requester, text, turns.Provenance(kind="event"))
        after.append(("start", requester.id))
        outcome = "announced"
    if run.cleanup == "delete":
        after.append(("delete", run.target_session_id))
        archive_at = None
    else:
        archive_at = now + timedelta(minutes=archive_minutes) if run.mode == "run" else None
    Run.update(step="done", outcome=outcome, ended_at=now, archive_at=archive_at).where(Run.id == run.id).execute()
    return after


def _after_commit(runtime: Runtime, what: str, value: Any) -> None:
    if what == "start":
        turns.start_turns(runtime, value)
    elif what == "delete":
        child = Session.get_or_none(Session.id == value)
        if child is not None and not child.deleted:
            lifecycle.delete(runtime, child)


# The clock's sweep ---------------------------------------------------------------------------------


def sweep(runtime: Runtime, now: datetime) -> dict[str, int]:
    """Runs whose awaited turn ended unseen, spawns past their deadline, kept children due to be
    archived; returns what was done (the clock logs it)."""
    done = {"advanced": 0, "timed_out": 0, "archived": 0}
    ended = (
        Run.select(Run.awaiting_message_id)
        .join(Message, on=(Message.id == Run.awaiting_message_id), join_type=JOIN.LEFT_OUTER)
        .where(Run.awaiting_message_id.is_null(False) & (Message.status.in_(FINISHED_TURN) | Message.id.is_null()))
    )
    for row in list(ended):
        done["advanced"] += advance(runtime, str(row.awaiting_message_id))
    overdue = Run.select().where(
        (Run.kind == "spawn") & (Run.step == "main") & (Run.timed_out == False) & (Run.deadline_at <= now)  # noqa: E712
    )
    for run in list(overdue):
        with write_transaction():
            claimed = Run.update(timed_out=True).where((Run.id == run.id) & (Run.timed_out == False)).execute()  # noqa: E712
            child = Session.get_or_none(Session.id == run.target_session_id)
            stopping = child is not None and turns.request_stop(child) == "stop-queued"
            if claimed and child is not None:
                turns.cancel_queued(child, "the sessions_spawn run timed out.")
        if claimed:
            done["timed_out"] += 1
            if stopping and child is not None and child.active_turn:
                turns.signal_stop(runtime, child.active_turn)
            advance(runtime, run.request_message_id)  # a cancelled prompt ends the run at once
    for run in list(Run.select().where(Run.archive_at <= now)):
        claimed = Run.update(archive_at=None).where((Run.id == run.id) & (Run.archive_at.is_null(False))).execute()
        child = Session.get_or_none(Session.id == run.target_session_id)
        if claimed and child is not None and not child.archived:
            lifecycle.archive(runtime, child)
            done["archived"] += 1
    return done
