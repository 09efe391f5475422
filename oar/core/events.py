"""The event record: what happened in a session, kept durably for the delivery engine (docs/events.md#events).

Events are written where they happen, inside the transaction of the change they report,
so none is lost and none is recorded for a change that was rolled back. Subscriptions
(the delivery engine) read them in `seq` order and decide whom to wake; this module only
records. Kinds written today:

- `task_started`, `task_finished` (every task end), `task_failed` (status failed or a
  non-zero exit) — payload `{taskId, description, type, status, exitCode}`;
- `stalled` — recorded by the clock's sweeper (`oar.watching.engine_events.record_stalls`) when a
  running turn or task has shown no output for a `stalled_minutes` value some subscription
  watching it uses, once per value and quiet spell — payload `{turnId, prompt, status} |
  {taskId, description, type}` plus `{stalledMinutes, quietSince}`; each subscription receives
  those of its own value. Tasks also record a task-health `stalled` at the owner's
  `quiet_after_minutes` (payload `{taskId, description, minutesSinceOutput}`, no
  `stalledMinutes`): it reaches no subscription;
- `session_idle` — the session has no turn and no task running any more after a task
  ended (feeds `all_idle`, which is a transition over all of a subscription's sessions).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import peewee

from oar.core.models import Event
from oar.core.prepared import Prepared
from oar.core.timeutil import utcnow

KINDS = (
    "task_started", "task_finished", "task_failed", "stalled", "session_idle",
    # Turns and questions (the delivery engine, oar/watching/): `turn_end` {turnId,
    # status, excerpt, fromSession, startedBy (the prompt's provenance kind)}, `error` {turnId, error}, `question_asked` /
    # `question_answered` {questionId, question, answer}. `subagent_finished` is not written today:
    # a `task_finished` of a task of type `subagent` reaches subscriptions under that name.
    "turn_end", "error", "question_asked", "question_answered", "subagent_finished",
)


# Written as every turn ends, inside its outcome's transaction: its SQL built once
# (oar/core/prepared.py). Every column is given, so no default is frozen into the statement.
_INSERT = Prepared(
    lambda session_id, kind, payload, created_at: Event.insert(
        session=session_id, kind=kind, payload=peewee.Value(payload, converter=False), created_at=created_at
    )
)


def record(session_id: str, kind: str, payload: dict[str, Any], now: datetime | None = None) -> Event:
    """Record one event (call inside the write transaction of the change it reports)."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind}")
    created_at = now or utcnow()
    seq = _INSERT.insert(session_id, kind, Event.payload.db_value(payload), created_at)
    return Event(seq=seq, session=session_id, kind=kind, payload=payload, created_at=created_at)
