"""Messages between a run's agents (docs/team-runs.md#the-tools): direct, or to everyone."""

from __future__ import annotations

import calendar
import secrets
from datetime import datetime
from typing import Any

from oar.core import defaults
from oar.core.db import write_transaction
from oar.team.models import TeamMessage, TeamRun
from oar.team.runs import charge_text, refuse_past


def send(run: TeamRun, agent_id: str, to: str | None, content: str, thread_id: str | None, now: datetime) -> str:
    message_id = f"tmsg_{secrets.token_hex(8)}"
    with write_transaction():
        charge_text(run, len(content))
        refuse_past(TeamMessage.select().where(TeamMessage.run == run.id).count(), defaults.TEAM_MESSAGES_PER_RUN,
                    "messages", run)
        TeamMessage.create(id=message_id, run=run.id, from_agent=agent_id, to_agent=to, content=content,
                           thread_id=thread_id, created_at=now)
    return message_id


def unix_seconds(moment: datetime) -> int:
    return calendar.timegm(moment.timetuple())


def message_view(row: TeamMessage) -> dict[str, Any]:
    return {
        "id": row.id,
        "from_agent": row.from_agent,
        "to_agent": row.to_agent,
        "content": row.content,
        "thread_id": row.thread_id,
        "created_at": unix_seconds(row.created_at),
    }


def inbox(run: TeamRun, agent_id: str) -> list[dict[str, Any]]:
    """Messages to this agent and broadcasts by others, oldest first (the newest
    `TEAM_MESSAGES_RETURNED` of them)."""
    rows = (
        TeamMessage.select()
        .where(
            (TeamMessage.run == run.id)
            & ((TeamMessage.to_agent == agent_id) | (TeamMessage.to_agent.is_null() & (TeamMessage.from_agent != agent_id)))
        )
        .order_by(TeamMessage.seq.desc())
        .limit(defaults.TEAM_MESSAGES_RETURNED)
    )
    return [message_view(row) for row in reversed(list(rows))]


def latest(run: TeamRun, limit: int) -> list[dict[str, Any]]:
    """The run's newest messages, every agent's, oldest first (the page)."""
    rows = TeamMessage.select().where(TeamMessage.run == run.id).order_by(TeamMessage.seq.desc()).limit(limit)
    return [message_view(row) for row in reversed(list(rows))]
