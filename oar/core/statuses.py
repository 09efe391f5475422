"""Every status, state and end reason the relay records or reports, and the sets of them that
more than one module asks about, defined once.

Each is a `StrEnum` whose values are the strings the database rows, the JSON answers and the
events already hold: a member compares equal to its string, hashes like it and serialises as
it, so a row read back (a plain `str`) matches the member, and nothing stored changes.
"""

from __future__ import annotations

from enum import StrEnum


class TurnStatus(StrEnum):
    """A turn's status, kept on its prompt message (`Message.status`):
    `queued → running (⇄ waiting_for_answer) → done | failed | stopped`, or `cancelled`."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_ANSWER = "waiting_for_answer"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"


class TaskStatus(StrEnum):
    """A background task's status (`Task.status`)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"


class McpTaskStatus(StrEnum):
    """An MCP task's status (`McpTask.status`), as the Tasks extension names them (docs/mcp.md#tasks)."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# An MCP task in one of these has ended: its result, error or cancellation no longer changes.
ENDED_MCP_TASK = (McpTaskStatus.COMPLETED, McpTaskStatus.FAILED, McpTaskStatus.CANCELLED)


class QuestionStatus(StrEnum):
    """A question card's status (`Question.status`): `ended` when its turn ended unanswered."""

    PENDING = "pending"
    ANSWERED = "answered"
    DISMISSED = "dismissed"
    WITHDRAWN = "withdrawn"
    ENDED = "ended"


class CardStatus(StrEnum):
    """An approval card's status (`Card.status`)."""

    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


class DecidedVia(StrEnum):
    """How the owner decided a card or answered a question (`Card.decided_via`,
    `Question.decided_via`; docs/notifications.md#how-it-was-decided). None: nobody decided it
    (it expired, was withdrawn) or an agent answered it."""

    PAGE = "page"  # the signed-in page's Inbox or session page
    API = "api"  # the owner API
    LINK = "link"  # the page a notification's decision link opens (no sign-in)
    ACTION = "action"  # a notification's own button: a Web Push action or an ntfy button


class NotificationStatus(StrEnum):
    """An outbox row's status (`Notification.status`, docs/notifications.md#reliable)."""

    PENDING = "pending"  # waiting for its due time (now, a merge window's end, a retry, quiet hours' end)
    SENDING = "sending"  # claimed by a sender
    SENT = "sent"
    DROPPED = "dropped"  # its cards or questions were answered before it went out
    FAILED = "failed"  # every attempt failed


class SessionState(StrEnum):
    """A session's state, from its turns and tasks (never stored)."""

    RUNNING_TURN = "running_turn"
    BACKGROUND_ONLY = "background_only"
    IDLE = "idle"


class ScheduleEndReason(StrEnum):
    """Why a schedule ended (`Schedule.end_reason`)."""

    UNSCHEDULED = "unscheduled"
    FIRED = "fired"
    ARCHIVED = "archived"
    DELETED = "deleted"


class SubscriptionEndReason(StrEnum):
    """Why a subscription ended (`Subscription.end_reason`)."""

    UNSUBSCRIBED = "unsubscribed"
    ARCHIVED = "archived"
    FIRED = "fired"
    UNPAIRED = "unpaired"
    TRANSFERRED = "transferred"


# What a queued prompt's progress says while another turn of its session runs (it is never stored).
WAITING_BEHIND_TURN = "waiting_behind_turn"

# Sets of turn statuses ---------------------------------------------------------------------

# Open: the turn is not over yet, so its session is busy (queued, running or waiting for an answer).
OPEN_TURN = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING_FOR_ANSWER)
# Live: the turn has started and not ended (a turn waiting for an answer still runs): it can
# show a card, be stopped, take an external agent's posts, and it needs a heartbeat.
LIVE_TURN = (TurnStatus.RUNNING, TurnStatus.WAITING_FOR_ANSWER)
# In progress: queued or running; a caller gets its progress and is told to wait again.
IN_PROGRESS_TURN = (TurnStatus.QUEUED, TurnStatus.RUNNING)
# Finished: the turn is over and will not change again.
FINISHED_TURN = (TurnStatus.DONE, TurnStatus.FAILED, TurnStatus.STOPPED, TurnStatus.CANCELLED)
# Settled: a waiting call returns (finished, or waiting on a question card).
SETTLED_TURN = (*FINISHED_TURN, TurnStatus.WAITING_FOR_ANSWER)
# Failed or cancelled: the turn's error is shown with its prompt.
ERRED_TURN = (TurnStatus.FAILED, TurnStatus.CANCELLED)
# Ended without a reply: finished other than done (a stopped turn's partial reply may be kept).
UNANSWERED_TURN = (TurnStatus.FAILED, TurnStatus.STOPPED, TurnStatus.CANCELLED)

# Sets of task statuses ---------------------------------------------------------------------

# Ended: the task is over (it ran to its end, failed, or was killed).
TASK_ENDED = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.KILLED)

# Sets of end reasons -----------------------------------------------------------------------

# A session's archiving or deletion ends the schedules set by it or firing into it.
SCHEDULE_ENDED_WITH_SESSION = (ScheduleEndReason.ARCHIVED, ScheduleEndReason.DELETED)
