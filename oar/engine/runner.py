"""Running turns, inside RQ workers only (docs/providers.md, docs/operations.md#durability-and-recovery).

`run_turns(session_id)` claims the session's oldest queued prompt with a conditional
UPDATE (so a session never runs two turns at once, whatever the number of workers), runs
it through the session's provider, records the outcome, and goes on with the next queued
prompt. A watcher thread beside each turn (`turn_watcher`) writes a heartbeat, honours stop
requests and ends turns that run past `max_turn_seconds`; what the provider asks of the relay
meanwhile goes through the turn's `RelayTurnServices` (`turn_services`).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

from oar import providers
from oar.actions.schema import relay_tool, system_prompt
from oar.background import output_files, output_store
from oar.core import tracing, work_folders
from oar.core.db import release_connection, write_transaction
from oar.core.fields import storable
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.statuses import TurnStatus
from oar.core.timeutil import utcnow
from oar.engine import turn_services as services
from oar.engine.outcomes import finish
from oar.engine.partial_writer import PartialWriter
from oar.engine.turn_services import RelayTurnServices
from oar.engine.turn_watcher import TurnWatcher
from oar.providers import usage
from oar.providers.base import (
    Activity,
    AgentSession,
    CancelEvent,
    OutputTruncated,
    Provider,
    TaskEnded,
    TaskReported,
    TextDelta,
    TurnControl,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    Usage,
    safe_agent_session_id,
)
from oar.turns import external

log = logging.getLogger(__name__)


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


class TurnNotRun(Exception):
    """A claimed turn that cannot run (no such provider, over its cap, a refused folder): it fails
    with `reason`, and its provider is never called."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class StreamedReply:
    """What a provider's stream left for the turn's outcome, besides the reply text (`writer`)."""

    writer: PartialWriter
    failure: str | None = None
    # Written with the outcome: a write between a stream's last two events would wait for the
    # lock while the end of the reply waits in the socket.
    used: list[Usage] = field(default_factory=list)
    reported_tasks: dict[str, str] = field(default_factory=dict)  # the agent's task id → the relay's


def execute(runtime: Runtime, turn: Message) -> bool:
    """Run one claimed turn and record its outcome; True if another prompt of the session was
    queued by then (see `finish`)."""
    session = Session.get_by_id(turn.session_id)
    try:
        provider, folder = _ready_to_run(runtime, session, turn)
    except TurnNotRun as refused:
        return finish(runtime, turn, TurnStatus.FAILED, "", refused.reason)
    cancelled = CancelEvent()
    watcher = TurnWatcher(
        runtime, turn, cancelled, runtime.settings()["max_turn_seconds"],
        copies_output=provider.writes_task_output and output_store.in_database(),
    )
    control = TurnControl(RelayTurnServices(runtime, session.id, turn, provider.name, watcher, cancelled), cancelled)
    watcher.start()
    request = _request_for(runtime, session, turn, provider, folder)
    reply = StreamedReply(PartialWriter(turn.id, runtime.time("PARTIAL_WRITE_SECONDS")))
    # A turn mostly waits on its provider: it takes a connection only to write, so that
    # many turns in one worker process share a few connections.
    release_connection()
    try:
        _stream(runtime, turn, provider, request, control, reply)
    finally:
        stopped, timed_out = watcher.finish()
    try:
        return _record(runtime, turn, provider, reply, stopped=stopped, timed_out=timed_out)
    finally:
        watcher.close()


def _ready_to_run(runtime: Runtime, session: Session, turn: Message) -> tuple[Provider, str | None]:
    """The turn's provider and working folder; raises TurnNotRun. Announces the turn to an attached
    external agent, and drops a model that no longer belongs to the provider (docs/providers.md)."""
    provider = providers.get(session.provider)
    if provider is None:
        raise TurnNotRun(f'Provider "{session.provider}" is not configured on this relay.')
    cap = usage.token_cap(provider)
    if cap is not None and usage.meter(provider, utcnow()).capped:
        raise TurnNotRun(f"{provider.name} is over its monthly token cap of {cap:,}; the turn did not run.")
    try:
        folder = _working_folder(runtime, session, provider)
    except work_folders.FolderRefused as refused:
        raise TurnNotRun(f"The session's folder {session.cwd} {refused.reason}; the turn did not run.") from None
    if provider.kind == "external":  # the attached process long-polls for this turn
        external.announce(runtime, session.id)
    model = provider.model_for(turn.model)
    if model != turn.model:  # a model that no longer belongs to the provider is not sent
        Message.update(model=model).where(Message.id == turn.id).execute()
        turn.model = model
    return provider, folder


def _request_for(runtime: Runtime, session: Session, turn: Message, provider: Provider, folder: str | None) -> TurnRequest:
    return TurnRequest(
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


def _stream(
    runtime: Runtime, turn: Message, provider: Provider, request: TurnRequest, control: TurnControl, reply: StreamedReply,
) -> None:
    """Take the provider's events into `reply` until the stream ends, fails or the turn is stopped.
    A provider that raises fails the turn with a log reference, never the worker."""
    try:
        for event in provider.run_turn(request, control):
            if _take(runtime, turn, provider, event, reply) or control.cancelled.is_set():
                break
    except Exception:
        reference = secrets.token_hex(4)
        log.exception("turn %s failed in provider %s (log reference %s)", turn.id, provider.name, reference)
        reply.failure = f"The {provider.name} provider failed unexpectedly (log reference {reference})."


def _take(runtime: Runtime, turn: Message, provider: Provider, event: TurnEvent, reply: StreamedReply) -> bool:
    """One event of the stream into `reply`; True when it ends the stream (the provider failed).

    What a provider sends is kept even where it holds characters no database stores (a NUL, a
    lone surrogate): the outcome could not be written otherwise."""
    if isinstance(event, TextDelta):
        reply.writer.add_text(storable(event.text))
    elif isinstance(event, Activity):
        reply.writer.add_activity(storable(event.text))
    elif isinstance(event, TurnFailed):
        reply.failure = storable(event.message)
        return True
    elif isinstance(event, Usage):
        reply.used.append(event)
    elif isinstance(event, AgentSession):
        # Any provider's agent id goes back to its agent: only a safe shape is kept (docs/providers.md#cli-arguments).
        if safe_agent_session_id(event.id) is None:
            log.warning("turn %s: provider %s reported an agent session id of an unsafe shape; it is ignored", turn.id, provider.name)
        else:
            Session.update(agent_session_id=event.id).where(Session.id == turn.session_id).execute()
            release_connection()
    elif isinstance(event, OutputTruncated):
        Message.update(output_truncated=True).where(Message.id == turn.id).execute()
        release_connection()
    elif isinstance(event, TaskReported):
        reply.reported_tasks[event.agent_task_id] = services.record_reported_task(runtime, turn.session_id, turn.id, event)
    elif isinstance(event, TaskEnded) and event.agent_task_id in reply.reported_tasks:
        services.end_reported_task(runtime, reply.reported_tasks[event.agent_task_id], event)
    return False


def _record(runtime: Runtime, turn: Message, provider: Provider, reply: StreamedReply, *, stopped: bool, timed_out: bool) -> bool:
    """The turn's outcome recorded (`finish`), with the tasks its agent left running ended."""
    services.end_leftover_tasks(runtime, list(reply.reported_tasks.values()))
    metered = [(provider.name, event) for event in reply.used]
    error: str | None = None
    if timed_out:
        limit = runtime.settings()["max_turn_seconds"]
        status, error = TurnStatus.FAILED, f"The turn ran longer than the relay's limit of {limit} s and was ended."
    elif stopped:
        status = TurnStatus.STOPPED
    elif reply.failure is not None:
        status, error = TurnStatus.FAILED, reply.failure
    else:
        status = TurnStatus.DONE
    return finish(runtime, turn, status, reply.writer.text, error, reply.writer.recent_activities(), metered)


def _working_folder(runtime: Runtime, session: Session, provider: Provider) -> str | None:
    """The folder the turn works in. A provider that runs an agent on this machine gets it checked
    as a task's is (docs/tasks.md#the-folder-a-task-runs-in): never through a link, only where a
    session may work; such an agent runs outside the sandbox, so this is the one check it gets."""
    if not provider.writes_task_output or provider.workspace != "folder":
        return session.cwd
    with work_folders.opened(runtime.config, session, runtime.settings()["allowed_roots"]) as (folder, _):
        return folder
