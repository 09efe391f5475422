"""Every Redis key, pub/sub channel and RQ job id the relay uses, built in one place.

Running relays and queued RQ jobs hold these strings (a relay restarted in place finds its
locks, nudges, notes and scheduled jobs by them, and processes of two versions side by side
signal each other through them), so each is kept exactly as it is: changing one means
changing what Redis already holds. Every key and channel starts with the relay's namespace
(`OAR_NAMESPACE`), which is also the name of its RQ queue.
"""

from __future__ import annotations

# Wake-up channels ------------------------------------------------------------------------
# One `WakeHub` listener per process subscribes to them all (`wake_pattern`); a signal only
# says "look again" (oar.core.waiting).


def wake_pattern(namespace: str) -> str:
    return f"{namespace}:wake:*"


def turn_channel(namespace: str, message_id: str) -> str:
    """A turn's status changed (waiting calls return), or a task it started ended."""
    return f"{namespace}:wake:turn:{message_id}"


def turn_started_channel(namespace: str, session_id: str) -> str:
    """A turn of the session started running (an attached external agent waits on it)."""
    return f"{namespace}:wake:started:{session_id}"


def arrivals_channel(namespace: str, session_id: str) -> str:
    """Something was queued for the session (its agent outside the relay may take it)."""
    return f"{namespace}:wake:arrived:{session_id}"


def due_channel(namespace: str) -> str:
    """A due time (a schedule's, a held event's) was written: the clock's due-time timer reads
    the earliest again (oar.engine.due_timer)."""
    return f"{namespace}:wake:due"


def card_channel(namespace: str, card_id: str) -> str:
    """An approval card was decided."""
    return f"{namespace}:wake:card:{card_id}"


def question_channel(namespace: str, question_id: str) -> str:
    """A question card was answered, dismissed or ended."""
    return f"{namespace}:wake:question:{question_id}"


def mcp_task_channel(namespace: str, task_id: str) -> str:
    """An MCP task changed (its status, or a cancel was asked): its runner and its listeners look again."""
    return f"{namespace}:wake:mcptask:{task_id}"


# Stop channels ---------------------------------------------------------------------------
# Subscribed to by the one thread watching a running turn or task, outside the wake-up hub.


def turn_stop_channel(namespace: str, message_id: str) -> str:
    return f"{namespace}:stop:{message_id}"


def task_stop_channel(namespace: str, task_id: str) -> str:
    return f"{namespace}:taskstop:{task_id}"


# Keys ------------------------------------------------------------------------------------


def external_events(namespace: str, turn_id: str) -> str:
    """The list of what an attached external agent posted for its turn."""
    return f"{namespace}:external:{turn_id}"


def provider_note(namespace: str, session_id: str, key: str) -> str:
    """A note a provider keeps about a session between turns."""
    return f"{namespace}:providernote:{session_id}:{key}"


def sign_in_failures(namespace: str, address: str) -> str:
    """The sorted set of a client address's recent wrong owner tokens on the sign-in form."""
    return f"{namespace}:signinfail:{address}"


def decision_requests(namespace: str, address: str) -> str:
    """The sorted set of a client address's recent requests to the decision links' endpoints."""
    return f"{namespace}:decidereq:{address}"


def rate_calls(namespace: str, conversation: str, budget: str = "") -> str:
    """The sorted set of a conversation's recent relay calls (of `budget`: "" relay_tool's, "team" the team tools')."""
    return f"{namespace}:rate:{budget + ':' if budget else ''}{conversation}:calls"


def rate_writes(namespace: str, conversation: str, budget: str = "") -> str:
    """The sorted set of a conversation's recent write calls (of `budget`, as `rate_calls`)."""
    return f"{namespace}:rate:{budget + ':' if budget else ''}{conversation}:writes"


def wait_slots(namespace: str, conversation: str) -> str:
    """The sorted set of a conversation's waiting calls, scored by the end of each one's lease."""
    return f"{namespace}:waits:{conversation}"


def prompt_trace(namespace: str, message_id: str) -> str:
    """The trace context of the call that queued a prompt, for its turn's span (oar.core.tracing)."""
    return f"{namespace}:trace:{message_id}"


def turns_nudge(namespace: str, session_id: str) -> str:
    """Set while the reconciler's last re-enqueue of the session's queued turns is recent."""
    return f"{namespace}:nudged:{session_id}"


def task_nudge(namespace: str, task_id: str) -> str:
    """Set while the reconciler's last re-enqueue of a task no worker took is recent."""
    return f"{namespace}:tasknudged:{task_id}"


def presence(namespace: str, kind: str) -> str:
    """The sorted set of the running processes of a kind ("worker", "clock"), each scored by the
    Redis time it last said it was there (oar.core.presence)."""
    return f"{namespace}:presence:{kind}"


def ingest_lock(namespace: str) -> str:
    """Held by the one relay process ingesting new events (docs/events.md#how-events-are-held)."""
    return f"{namespace}:ingesting"


def delivery_lock(namespace: str) -> str:
    """Held by the one relay process delivering overdue events."""
    return f"{namespace}:delivering"


# RQ job ids ------------------------------------------------------------------------------
# Fixed per due time, so that enqueueing again never makes two jobs (RQ prefixes its own keys).


def delivery_job_id(stamp_ms: int, suffix: str = "") -> str:
    """The delivery job of one due time (UTC milliseconds); `suffix` for a job enqueued again."""
    return f"dlv-{stamp_ms}{suffix}"


def schedule_job_id(schedule_id: str, due_ms: int) -> str:
    """The job firing a schedule at one due time (UTC milliseconds)."""
    return f"{schedule_id}-{due_ms}"


# Team runs -------------------------------------------------------------------------------


def team_thoughts(namespace: str, run_id: str) -> str:
    """A run's newest `broadcast_thinking` entries (JSON, newest first): shown live, never stored."""
    return f"{namespace}:team:thoughts:{run_id}"


def team_thought_seq(namespace: str, run_id: str) -> str:
    """The counter numbering a run's thoughts, so that an open page asks only for newer ones."""
    return f"{namespace}:team:thoughtseq:{run_id}"


# Paired relays and notifications ----------------------------------------------------------


def peer_asks_nudge(namespace: str, peer_id: str) -> str:
    """Set while a check of a paired relay's asks is queued (the clock enqueues one at a time)."""
    return f"{namespace}:peerasks:{peer_id}"


def peer_events_nudge(namespace: str, peer_id: str) -> str:
    """Set while a fetch of a paired relay's events is queued or running (one at a time)."""
    return f"{namespace}:peerevents:{peer_id}"


def notify_job_id(stamp_ms: int) -> str:
    """The notification sender's job of one due time (UTC milliseconds)."""
    return f"ntf-{stamp_ms}"


def notify_nudge(namespace: str) -> str:
    """Set when the clock's sweep enqueued the notification sender (it does so once in a while)."""
    return f"{namespace}:notify-nudge"
