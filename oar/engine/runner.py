"""Running turns, inside RQ workers only (docs/providers.md, docs/operations.md#durability-and-recovery).

`run_turns(session_id)` claims the session's oldest queued prompt with a conditional
UPDATE (so a session never runs two turns at once, whatever the number of workers), runs
it through the session's provider, records the outcome, and goes on with the next queued
prompt. A watcher thread beside each turn writes a heartbeat (so the reconciler can fail a
turn whose worker died), honours stop requests within a second, and ends turns that run
past `max_turn_seconds`.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from typing import Any

import redis

from oar import providers
from oar.actions.schema import relay_tool, system_prompt
from oar.approvals import cards, questions
from oar.background import output_files, output_store
from oar.core import events, jobs, keys, tracing, work_folders
from oar.core.db import database, release_connection, write_transaction
from oar.core.fields import storable
from oar.core.models import Message, Question, Session
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import LIVE_TURN, QuestionStatus, TurnStatus
from oar.core.timeutil import utcnow
from oar.core.waiting import Look, not_yet, settled, wait_on_signals
from oar.engine import turn_services as services
from oar.engine.outcomes import finish
from oar.engine.partial_writer import PartialWriter
from oar.providers import usage
from oar.providers.base import (
    Activity,
    AgentSession,
    OutputTruncated,
    Provider,
    TaskEnded,
    TaskReported,
    TextDelta,
    TurnControl,
    TurnFailed,
    TurnRequest,
    Usage,
    safe_agent_session_id,
)
from oar.turns import external

log = logging.getLogger(__name__)

# How long a finished turn waits, after recording its outcome, for its watcher thread to exit.
WATCHER_EXIT_SECONDS = 5


def run_turns(runtime: Runtime, session_id: str) -> int:
    """Run the session's queued turns in order until none is left; returns how many ran."""
    ran = 0
    turn = claim_next_turn(session_id)
    while turn is not None:
        runtime.signal_turn(turn.id)
        if tracing.on():
            with tracing.span(*turn_span(turn)):
                queued_behind = execute(runtime, turn)
        else:
            queued_behind = execute(runtime, turn)
        ran += 1
        # A prompt queued after the outcome was recorded is its own job's to claim: the session
        # was free when it was committed (docs/operations.md#durability-and-recovery).
        turn = claim_next_turn(session_id) if queued_behind else None
    return ran


def turn_span(turn: Message) -> tuple[str, str, dict[str, Any], dict[str, str] | None]:
    """A turn's span (the GenAI conventions' `invoke_agent`), continuing the trace of the call
    that queued its prompt; its outcome is noted when it is recorded (`outcomes.finish`)."""
    attributes = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": turn.session_id,
        "gen_ai.request.model": turn.model or "", "oar.turn.id": turn.id,
    }
    return "invoke_agent", "internal", attributes, tracing.prompt_carrier(turn.id)


def claim_next_turn(session_id: str) -> Message | None:
    while True:
        with write_transaction():
            session = Session.get_or_none(Session.id == session_id)
            # An agent outside the relay takes its conversation's prompts itself (oar.turns.outside).
            if session is None or session.active_turn or session.archived or session.deleted or session.agent_outside:
                return None
            turn = (
                Message.select()
                .where((Message.session == session_id) & (Message.status == TurnStatus.QUEUED))
                .order_by(Message.seq)
                .first()
            )
            if turn is None:
                return None
            claimed = (
                Session.update(active_turn=turn.id)
                .where((Session.id == session_id) & Session.active_turn.is_null())
                .execute()
            )
            if not claimed:
                return None
            now = utcnow()
            started = Message.update(status=TurnStatus.RUNNING, started_at=now, heartbeat_at=now, partial_text="").where(
                (Message.id == turn.id) & (Message.status == TurnStatus.QUEUED)
            ).execute()
            if not started:
                # Stopped before it started (`turns.stop_turn`, whose row lock this transaction
                # waited for on PostgreSQL): give the session back and take the next one.
                Session.update(active_turn=None).where(
                    (Session.id == session_id) & (Session.active_turn == turn.id)
                ).execute()
                continue
        return Message.get(Message.id == turn.id)


class TurnWatcher(threading.Thread):
    """Heartbeat, stop requests and the turn time limit, beside a running turn."""

    def __init__(
        self, runtime: Runtime, turn: Message, control: TurnControl, max_seconds: float, *, copies_output: bool = False,
    ) -> None:
        super().__init__(name=f"oar-turn-{turn.id}", daemon=True)
        self.runtime = runtime
        self.turn_id = turn.id
        # The agent runs on this machine and writes its tasks' output here: where output is kept in
        # the database, the watcher copies it there (docs/tasks.md#where-the-output-is-kept).
        self.copies_output = copies_output
        self.control = control
        self.deadline = time.monotonic() + max_seconds
        self._card_credit = 0.0
        self.finished = threading.Event()
        self.stopped = False
        self.timed_out = False

    def run(self) -> None:
        pubsub = self._subscribe()
        heartbeat_every = self.runtime.time("TURN_HEARTBEAT_SECONDS")
        poll_every = self.runtime.time("STOP_POLL_SECONDS")
        copy_every = self.runtime.time("TASK_OUTPUT_COPY_SECONDS") if self.copies_output else math.inf
        next_heartbeat = time.monotonic() + heartbeat_every
        next_copy = time.monotonic() + copy_every
        try:
            while not self.finished.is_set():
                self._wait_for_signal(pubsub, min(poll_every, copy_every))
                if self.finished.is_set():
                    return
                row = Message.get_or_none(Message.id == self.turn_id)
                if row is None or row.stop_requested or row.status not in LIVE_TURN:
                    self.stopped = True
                    self.control.cancelled.set()
                    return
                if time.monotonic() >= self.deadline and not self._credit_card_waits():
                    self.timed_out = True
                    self.control.cancelled.set()
                    return
                if time.monotonic() >= next_copy:
                    output_store.mirror_reported(self.runtime, self.turn_id)
                    next_copy = time.monotonic() + copy_every
                if time.monotonic() >= next_heartbeat:
                    Message.update(heartbeat_at=utcnow()).where(Message.id == self.turn_id).execute()
                    next_heartbeat = time.monotonic() + heartbeat_every
                release_connection()  # not held between checks (docs/waiting.md#how-waiting-wakes: waits hold none)
        finally:
            if pubsub is not None:
                pubsub.close()
            database.close()

    def _credit_card_waits(self) -> bool:
        """Time on approval cards does not count either (docs/rules.md#outcomes); the card may wait in another
        process (an agent's HTTP call), so it is read from the cards. True if the deadline moved."""
        waited = cards.seconds_waited(self.turn_id, utcnow())
        credit = waited - self._card_credit
        if credit <= 0:
            return False
        self._card_credit = waited
        self.deadline += credit
        return time.monotonic() < self.deadline

    def pause(self) -> None:
        """Time waiting for an answer does not count toward the turn's time limit."""
        self._paused_at = time.monotonic()

    def resume(self) -> None:
        self.deadline += time.monotonic() - self._paused_at

    def finish(self) -> tuple[bool, bool]:
        """End the watch at once; returns (stopped, timed_out) as they are now.

        It neither waits for the thread to exit nor wakes it (`close` does both, after the
        outcome is recorded): the thread may be in a database check or waiting for a core, and
        neither that wait nor a Redis round trip should come between the stream's end and the
        recorded outcome (docs/benchmarks.md#provider-streaming-python--m-bench-providers). A stop that the watcher sees
        only now came after the reply was complete; a stop that ended the stream had set these
        before it cancelled.
        """
        self.finished.set()
        return self.stopped, self.timed_out

    def close(self) -> None:
        """Wake the thread (it may be blocked waiting for a stop signal) and let it exit."""
        publish(self.runtime.redis, keys.turn_stop_channel(self.runtime.config.namespace, self.turn_id))
        self.join(timeout=WATCHER_EXIT_SECONDS)

    def _subscribe(self) -> Any:
        try:
            pubsub = self.runtime.redis.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(keys.turn_stop_channel(self.runtime.config.namespace, self.turn_id))
            return pubsub
        except redis.RedisError:
            return None

    def _wait_for_signal(self, pubsub: Any, seconds: float) -> None:
        if pubsub is None:
            self.finished.wait(seconds)
            return
        try:
            pubsub.get_message(timeout=seconds)
        except redis.RedisError:
            self.finished.wait(seconds)


def execute(runtime: Runtime, turn: Message) -> bool:
    """Run one claimed turn and record its outcome; True if another prompt of the session was
    queued by then (see `finish`)."""
    session = Session.get_by_id(turn.session_id)
    provider = providers.get(session.provider)
    if provider is None:
        return finish(runtime, turn, TurnStatus.FAILED, "", f'Provider "{session.provider}" is not configured on this relay.')
    if usage.token_cap(provider) is not None and usage.meter(provider, utcnow()).capped:
        cap = usage.token_cap(provider)
        return finish(runtime, turn, TurnStatus.FAILED, "", f"{provider.name} is over its monthly token cap of {cap:,}; the turn did not run.")
    try:
        folder = _working_folder(runtime, session, provider)
    except work_folders.FolderRefused as refused:
        return finish(runtime, turn, TurnStatus.FAILED, "", f"The session's folder {session.cwd} {refused.reason}; the turn did not run.")
    if provider.kind == "external":  # the attached process long-polls for this turn
        external.announce(runtime, session.id)
    model = provider.model_for(turn.model)
    if model != turn.model:  # a model that no longer belongs to the provider is not sent (docs/providers.md)
        Message.update(model=model).where(Message.id == turn.id).execute()
        turn.model = model
    control = TurnControl(call_relay_tool=lambda args: services.call_relay_tool_as(runtime, session.id, turn.id, args))
    control.call_openclaw = lambda tool, args: services.call_openclaw_as(runtime, session.id, turn.id, tool, args)
    watcher = TurnWatcher(
        runtime, turn, control, runtime.settings()["max_turn_seconds"],
        copies_output=provider.writes_task_output and output_store.in_database(),
    )
    control.ask_user = lambda question, options, allow_freeform=True: ask_user(
        runtime, turn, watcher, control, question, options, allow_freeform
    )
    control.start_task = lambda command: services.start_task(runtime, session.id, turn.id, command)
    control.receive_external = lambda seconds: external.receive(runtime, turn.id, seconds)
    control.note_reachable = lambda reachable: services.note_reachable(provider.name, reachable)
    control.recall = lambda key: services.recall(runtime, session.id, key)
    control.remember = lambda key, value: services.remember(runtime, session.id, key, value)
    reported_tasks: dict[str, str] = {}  # the agent's task id → the relay's
    used: list[Usage] = []
    watcher.start()
    request = TurnRequest(
        session_id=session.id,
        prompt=turn.text,
        model=turn.model,
        effort=turn.effort,
        mode=turn.mode or session.mode,
        cwd=folder,
        thinking="inline" if session.thinking_display in ("summarized", "full") else "omit",
        agent_session_id=session.agent_session_id,
        task_output_dir=output_files.prepare_agent_folder(runtime, session.id) if provider.writes_task_output else None,
        connect_timeout=runtime.time("PROVIDER_CONNECT_TIMEOUT_SECONDS"),
        read_timeout=runtime.time("PROVIDER_READ_TIMEOUT_SECONDS"),
        history=lambda: services.history_of(session.id, turn.seq),
        system_prompt=system_prompt(),
        relay_tool=relay_tool(),
    )
    stream = PartialWriter(turn.id, runtime.time("PARTIAL_WRITE_SECONDS"))
    failure: str | None = None
    # A turn mostly waits on its provider: it takes a connection only to write, so that
    # many turns in one worker process share a few connections.
    release_connection()
    try:
        for event in provider.run_turn(request, control):
            # What a provider sends is kept even where it holds characters no database
            # stores (a NUL, a lone surrogate): the outcome could not be written otherwise.
            if isinstance(event, TextDelta):
                stream.add_text(storable(event.text))
            elif isinstance(event, Activity):
                stream.add_activity(storable(event.text))
            elif isinstance(event, TurnFailed):
                failure = storable(event.message)
                break
            elif isinstance(event, Usage):
                # Written with the outcome: a write here, between a stream's last two events,
                # would wait for the lock while the end of the reply waits in the socket.
                used.append(event)
            elif isinstance(event, AgentSession):
                # Any provider's agent id goes back to its agent: only a safe shape is kept (docs/providers.md#cli-arguments).
                if safe_agent_session_id(event.id) is None:
                    log.warning("turn %s: provider %s reported an agent session id of an unsafe shape; it is ignored", turn.id, provider.name)
                else:
                    Session.update(agent_session_id=event.id).where(Session.id == session.id).execute()
                    release_connection()
            elif isinstance(event, OutputTruncated):
                Message.update(output_truncated=True).where(Message.id == turn.id).execute()
                release_connection()
            elif isinstance(event, TaskReported):
                reported_tasks[event.agent_task_id] = services.record_reported_task(runtime, session.id, turn.id, event)
            elif isinstance(event, TaskEnded) and event.agent_task_id in reported_tasks:
                services.end_reported_task(runtime, reported_tasks[event.agent_task_id], event)
            if control.cancelled.is_set():
                break
    except Exception:
        reference = secrets.token_hex(4)
        log.exception("turn %s failed in provider %s (log reference %s)", turn.id, provider.name, reference)
        failure = f"The {provider.name} provider failed unexpectedly (log reference {reference})."
    finally:
        stopped, timed_out = watcher.finish()
    try:
        services.end_leftover_tasks(runtime, list(reported_tasks.values()))
        text, activities = stream.text, stream.recent_activities()
        metered = [(provider.name, event) for event in used]
        error: str | None = None
        if timed_out:
            limit = runtime.settings()["max_turn_seconds"]
            status, error = TurnStatus.FAILED, f"The turn ran longer than the relay's limit of {limit} s and was ended."
        elif stopped:
            status = TurnStatus.STOPPED
        elif failure is not None:
            status, error = TurnStatus.FAILED, failure
        else:
            status = TurnStatus.DONE
        return finish(runtime, turn, status, text, error, activities, metered)
    finally:
        watcher.close()


def _working_folder(runtime: Runtime, session: Session, provider: Provider) -> str | None:
    """The folder the turn works in. A provider that runs an agent on this machine gets it checked
    as a task's is (docs/tasks.md#the-folder-a-task-runs-in): never through a link, only where a
    session may work; such an agent runs outside the sandbox, so this is the one check it gets."""
    if not provider.writes_task_output or provider.workspace != "folder":
        return session.cwd
    with work_folders.opened(runtime.config, session, runtime.settings()["allowed_roots"]) as (folder, _):
        return folder


def ask_user(
    runtime: Runtime, turn: Message, watcher: TurnWatcher, control: TurnControl, question: str, options: list[str],
    allow_freeform: bool = True,
) -> str | None:
    """Raise an `ask_user` card and wait for its answer; the turn is `waiting_for_answer` meanwhile.

    Returns the answer, "(dismissed)" when the owner dismissed the card, or None when the turn
    was stopped (the card then ends unanswered).
    """
    with write_transaction():
        card = questions.create_ask_user(turn.id, turn.session_id, question, options, turn.hops, allow_freeform)
        Message.update(status=TurnStatus.WAITING_FOR_ANSWER).where(
            (Message.id == turn.id) & (Message.status == TurnStatus.RUNNING)
        ).execute()
        events.record(turn.session_id, "question_asked", {"questionId": card.id, "question": question}, utcnow())
    runtime.signal_turn(turn.id)  # waiting callers return with pendingQuestions
    jobs.poke_delivery(runtime)
    release_connection()
    watcher.pause()
    answer = None
    try:
        answer = _wait_for_answer(runtime, card.id, control)
    finally:
        watcher.resume()
        if answer is None:
            Question.update(status=QuestionStatus.ENDED, answered_at=utcnow()).where(
                (Question.id == card.id) & (Question.status == QuestionStatus.PENDING)
            ).execute()
    with write_transaction():
        Message.update(status=TurnStatus.RUNNING).where(
            (Message.id == turn.id) & (Message.status == TurnStatus.WAITING_FOR_ANSWER)
        ).execute()
    release_connection()
    return answer


def _wait_for_answer(runtime: Runtime, question_id: str, control: TurnControl) -> str | None:
    """The answer, "(dismissed)", or None when the turn was stopped or the card ended unanswered."""

    def look() -> Look[str | None]:
        if control.cancelled.is_set():
            return settled(None)
        card = Question.get_by_id(question_id)
        release_connection()
        if card.status == QuestionStatus.ANSWERED:
            return settled(card.answer)
        if card.status == QuestionStatus.DISMISSED:
            return settled("(dismissed)")
        if card.status != QuestionStatus.PENDING:
            return settled(None)
        return not_yet(None)

    # The answer arrives by signal; a stop is seen within the stop-poll period.
    return wait_on_signals(
        runtime, [keys.question_channel(runtime.config.namespace, question_id)], look,
        recheck_seconds=runtime.time("STOP_POLL_SECONDS"),
    )
