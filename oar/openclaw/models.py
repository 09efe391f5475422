"""OpenClaw's own tables: the runs its tools start (a sessions_send's reply ping-pong and announce,
a sessions_spawn's child), the prompts they wrote, and the owner's per-session send policy.

Sessions and messages stay in the core's tables: these rows only say which of them belong to a
run and where the run is (docs/openclaw.md#runs).
"""

from __future__ import annotations

import peewee as pw

from oar.core.models import BaseModel
from oar.core.timeutil import utcnow


class Run(BaseModel):
    """One sessions_send or sessions_spawn and the steps the relay takes after it.

    `awaiting_message_id` is the prompt whose turn the run waits for (indexed): when that turn
    ends, the run's next step is taken by whoever claims it first (the worker that ran the turn,
    or the clock's sweep after a restart), with a conditional UPDATE on this column.
    """

    id = pw.CharField(primary_key=True, max_length=36)
    kind = pw.CharField(max_length=8)  # send | spawn
    requester_session_id = pw.CharField(max_length=32, index=True)
    # Whether the relay runs the requester's turns (its call came from a turn the relay runs);
    # an MCP or HTTP caller has no side in the ping-pong (docs/openclaw.md#callers-the-relay-doesnt-run).
    requester_runs = pw.BooleanField(default=False)
    target_session_id = pw.CharField(max_length=32, index=True)
    # sessions_spawn: the child's key `agent:<agentId>:subagent:<uuid>`, its label and options.
    child_key = pw.CharField(null=True, max_length=300, unique=True)
    agent_id = pw.CharField(null=True, max_length=64)
    label = pw.CharField(null=True, max_length=200)
    mode = pw.CharField(default="run", max_length=8)  # run | session
    cleanup = pw.CharField(default="keep", max_length=8)  # keep | delete
    request_text = pw.TextField()
    request_message_id = pw.CharField(max_length=32)
    first_reply = pw.TextField(null=True)
    latest_reply = pw.TextField(null=True)
    step = pw.CharField(default="main", max_length=10)  # main | reply | announce | done
    ping_pong_done = pw.IntegerField(default=0)
    max_ping_pong = pw.IntegerField(default=0)
    awaiting_message_id = pw.CharField(null=True, max_length=32, index=True)
    # sessions_spawn's runTimeoutSeconds, as a due time; set once it passed and the child was stopped.
    deadline_at = pw.DateTimeField(null=True, index=True)
    timed_out = pw.BooleanField(default=False)
    # When the kept child of a `run` spawn is archived (archiveAfterMinutes after its announce).
    archive_at = pw.DateTimeField(null=True, index=True)
    # How the run ended: announced | skipped | silent | failed | … (docs/openclaw.md#runs).
    outcome = pw.CharField(null=True, max_length=16)
    created_at = pw.DateTimeField(default=utcnow)
    ended_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "openclaw_run"


class InterSessionMessage(BaseModel):
    """A prompt an OpenClaw tool or run step wrote: its provenance as OpenClaw shows it,
    `{kind: "inter_session", sourceSessionKey, sourceTool}`."""

    message_id = pw.CharField(primary_key=True, max_length=32)
    run_id = pw.CharField(max_length=36, index=True)
    source_session_key = pw.CharField(max_length=300)
    source_tool = pw.CharField(max_length=32)

    class Meta:
        table_name = "openclaw_message"


class SessionSendPolicy(BaseModel):
    """The owner's per-session override of the send policy: allow or deny (no row: inherit)."""

    session_id = pw.CharField(primary_key=True, max_length=32)
    send_policy = pw.CharField(max_length=8)

    class Meta:
        table_name = "openclaw_send_policy"


MODELS: tuple[type[BaseModel], ...] = (Run, InterSessionMessage, SessionSendPolicy)
