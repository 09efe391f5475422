"""Team runs and which run a call acts in (docs/team-runs.md#runs-and-connections).

A run (the seed's "session") has an id `YYYY-MM-DD-NNN-XXXX`: its UTC day, its number that
day and four random characters. MCP over HTTP is stateless, so "the active run of the
connection" is kept per agent token in `team_connection`: `start_session` declares it, and it
survives restarts. The stdio bridge names its run on every request instead (its
`RELAY_SESSION_ID`), which wins over the declared one. A run is its team's (oar.team.access):
another team's run is refused wherever it is named.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import date, datetime

from oar.core import defaults
from oar.core.db import lock_rows, write_transaction
from oar.core.errors import ActionError, invalid
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.team.access import Scope, not_open
from oar.team.models import TeamConnection, TeamRun

RUN_ID = re.compile(r"^(\d{4})-(\d{2})-(\d{2})-(\d{3})(?:-([0-9a-z]{4}))?$")
# Agent ids name memory files too: letters, digits, dot, dash and underscore, not starting with a dot.
AGENT_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
RUN_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
RUNS_PER_DAY = 999  # the most new ids a day has (NNN is three digits)
NOTHING = "Nothing was changed."
# The HTTP header in which a request names its run (the stdio bridge sends its RELAY_SESSION_ID in it).
RUN_HEADER = "Relay-Session-Id"


@dataclass(frozen=True)
class TeamCall:
    """One team tool call: the relay, the agent token it came with, the run it names (if any),
    and what its conversation sees (its team's runs and memory, or all that the owner shares)."""

    runtime: Runtime
    session_id: str  # the relay session whose token calls
    token_hash: str
    named_run: str | None  # the stdio bridge's RELAY_SESSION_ID, sent with every request
    now: datetime
    scope: Scope


def refuse(message: str, **extra: object) -> ActionError:
    return invalid(message, **extra)


def charge_text(run: TeamRun, added: int) -> None:
    """Count `added` characters (less when text was replaced by shorter) against the run's
    TEAM_RUN_TEXT_MAX_CHARS, or refuse; inside the writing transaction, whose rollback takes the
    count back. The conditional UPDATE locks the run's row (PostgreSQL) for the rest of the
    transaction, so that counts read after it (messages, artifacts) see every concurrent write."""
    limit = defaults.TEAM_RUN_TEXT_MAX_CHARS
    charged = TeamRun.update(text_chars=TeamRun.text_chars + added).where(
        (TeamRun.id == run.id) & ((TeamRun.text_chars + added <= limit) | (added <= 0))
    ).execute()
    if charged != 1:
        raise refuse(f"Team run {run.id} stores {limit:,} characters of text already (messages, tasks, artifacts, "
                     f"reviews, its summary and state), the most a run may: start a new run. {NOTHING}")


def refuse_past(count: int, limit: int, what: str, run: TeamRun) -> None:
    """A count cap of one run (messages, artifacts, reviews), read after `charge_text` locked the run."""
    if count >= limit:
        raise refuse(f"Team run {run.id} has {limit:,} {what}, the most a run may have: start a new run. {NOTHING}")


def checked_agent(name: str, value: str) -> str:
    """An agent id as given (stripped), or a refusal naming the rule."""
    value = value.strip()
    if not AGENT_ID.match(value):
        raise refuse(
            f'{name} "{value[:80]}" is not an agent id: use up to 64 letters, digits, ".", "-" or "_" '
            f"(not starting with a dot). {NOTHING}"
        )
    return value


def checked_run_id(value: str, what: str = "session_id") -> str:
    """A run id `YYYY-MM-DD-NNN-XXXX` (the seed's shorter `YYYY-MM-DD-NNN` too) on a real day."""
    value = value.strip()
    found = RUN_ID.match(value)
    if found:
        try:
            date(int(found.group(1)), int(found.group(2)), int(found.group(3)))
            return value
        except ValueError:
            pass
    raise refuse(
        f'{what} "{value[:80]}" is not a team run id: it looks like YYYY-MM-DD-NNN-XXXX '
        f"(e.g. 2026-03-14-007-k3f9; YYYY-MM-DD-NNN is accepted too). {NOTHING}"
    )


def new_run_id(now: datetime) -> str:
    """The next id of `now`'s UTC day: its number that day, then four random characters."""
    day = now.strftime("%Y-%m-%d")
    taken = TeamRun.select().where(TeamRun.id.startswith(f"{day}-")).count()
    if taken >= RUNS_PER_DAY:
        raise refuse(f"{RUNS_PER_DAY} team runs were started on {day} already (NNN has three digits): give "
                     f"session_id to use one of them. {NOTHING}")
    suffix = "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(4))
    return f"{day}-{taken + 1:03d}-{suffix}"


def ensure_run(call: TeamCall, run_id: str, agent_id: str) -> TeamRun:
    """The run, created for the caller's team if new (two callers at once: one insert wins, both
    read it); a run of another team is refused, as long as the owner does not share runs."""
    run = TeamRun.get_or_none(TeamRun.id == run_id)
    if run is None:
        with write_transaction():
            refuse_past_daily_runs(call)
            TeamRun.insert(id=run_id, started_by=agent_id, started_in_session=call.session_id,
                           team_root=call.scope.team, created_at=call.now).on_conflict_ignore().execute()
        run = TeamRun.get(TeamRun.id == run_id)
    if not call.scope.sees_run(run):
        raise not_open(run.id)
    return run


def refuse_past_daily_runs(call: TeamCall) -> None:
    """At most TEAM_RUNS_PER_CONVERSATION_PER_DAY new runs per conversation and UTC day (inside the
    creating transaction, the conversation's row locked, so that concurrent creates count each other)."""
    lock_rows(Session.select().where(Session.id == call.session_id))
    day = call.now.replace(hour=0, minute=0, second=0, microsecond=0)
    started = TeamRun.select().where((TeamRun.started_in_session == call.session_id) & (TeamRun.created_at >= day))
    if started.count() >= defaults.TEAM_RUNS_PER_CONVERSATION_PER_DAY:
        raise refuse(f"This conversation started {defaults.TEAM_RUNS_PER_CONVERSATION_PER_DAY} team runs today (UTC), the "
                     f"most a conversation starts in a day: go on in one of them (start_session with its id). {NOTHING}")


def declared(call: TeamCall, agent_id: str, run_id: str | None) -> TeamRun:
    """`start_session`'s run: `run_id`'s (created if new), or a new run."""
    return ensure_run(call, checked_run_id(run_id) if run_id else new_run_id(call.now), agent_id)


def declare(call: TeamCall, run: TeamRun, agent_id: str) -> None:
    """Make `run` this connection's active run (its agent id is checked before)."""
    with write_transaction():
        TeamConnection.insert(token=call.token_hash, run=run.id, agent_id=agent_id, declared_at=call.now).on_conflict(
            conflict_target=[TeamConnection.token],
            update={TeamConnection.run: run.id, TeamConnection.agent_id: agent_id, TeamConnection.declared_at: call.now},
        ).execute()


def declared_run(call: TeamCall) -> str | None:
    """The id of the run this call acts in, or None when the connection declared none."""
    if call.named_run:
        return call.named_run
    row = TeamConnection.get_or_none(TeamConnection.token == call.token_hash)
    return row.run_id if row else None


def active_run(call: TeamCall, agent_id: str) -> TeamRun:
    """The run this call acts in, or a refusal telling the agent to call start_session first. The
    team is checked on every call: a run declared while the owner shared runs is the team's again
    once sharing is off."""
    if call.named_run:
        return ensure_run(call, checked_run_id(call.named_run, "RELAY_SESSION_ID"), agent_id)
    row = TeamConnection.select(TeamConnection, TeamRun).join(TeamRun).where(
        TeamConnection.token == call.token_hash
    ).first()
    if row is None:
        raise refuse(
            "No team run is active for this connection: call start_session {agent_id, session_id} first "
            f"(the stdio bridge takes RELAY_SESSION_ID). {NOTHING}"
        )
    if not call.scope.sees_run(row.run):
        raise not_open(row.run.id)
    return row.run


def visible_run(scope: Scope, run_id: str) -> TeamRun | None:
    """The run if it exists and `scope` sees it: another team's run reads as no run at all."""
    run = TeamRun.get_or_none(TeamRun.id == run_id)
    return run if run is not None and scope.sees_run(run) else None


def runs_newest_first(scope: Scope, limit: int | None = None) -> list[TeamRun]:
    """The runs `scope` sees, newest first by id: the id starts with the run's day and its number that day."""
    query = TeamRun.select().order_by(TeamRun.id.desc())
    if scope.team is not None and not scope.shared:
        query = query.where(TeamRun.team_root == scope.team)
    if limit is not None:
        query = query.limit(limit)
    return list(query)


def run_by_id(run_id: str) -> TeamRun | None:
    return TeamRun.get_or_none(TeamRun.id == run_id)
