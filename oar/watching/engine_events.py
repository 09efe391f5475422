"""Stalls and heartbeats: the delivery engine's own events (docs/events.md#events), made by the clock's sweeper.

`stalled` is recorded as an event of its session (a running turn or task without output for
a subscription's `stalled_minutes`); a heartbeat is held straight for its watcher, like
`all_idle`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import peewee as pw
from peewee import fn

from oar.background.task_views import last_output_time
from oar.core import jobs
from oar.core.db import write_transaction
from oar.core.events import record as record_event
from oar.core.models import Message, Session, StallWatch, Subscription, Task
from oar.core.runtime import Runtime
from oar.core.statuses import SessionState, TaskStatus, TurnStatus
from oar.core.timeutil import iso
from oar.watching import delivery, due_jobs, event_lines, held, lifetime, subscription_rules
from oar.watching.holding import Holding


def record_stalls(runtime: Runtime, now: datetime) -> int:
    """`stalled` events (docs/events.md#events): a running turn or task without output for a watching
    subscription's `stalled_minutes`, once per value and quiet spell; returns how many.

    The sweeper looks at every running turn and task: a turn's output is its reply text and
    activity lines (their size changes while it produces any), a task's is its output file.
    A turn waiting for an answer is not stalled: it waits for a person, and its
    `question_asked` went out already.
    """
    wanting = [s for s in Subscription.select().where(Subscription.ended_at.is_null()) if "stalled" in (s.events or [])]
    if not wanting:
        return 0
    size = fn.LENGTH(fn.COALESCE(Message.partial_text, "")) + fn.LENGTH(fn.COALESCE(Message.activities, ""))
    turns_running = list(
        Message.select(Message.id, Message.session, Message.text, Message.started_at, size.alias("size"))
        .where(Message.status == TurnStatus.RUNNING)
    )
    tasks_running = list(Task.select().where(Task.status == TaskStatus.RUNNING))
    watched = {row.subject: row for row in StallWatch.select()}
    minute = subscription_rules.timing(runtime).minute_seconds
    recorded = 0
    # (subject, session, output size — None for a task —, event payload, started): `size` is
    # the alias selected with the turns above.
    observed_now: list[tuple[str, str, int | None, dict[str, Any], datetime]] = [
        *((t.id, t.session_id, int(getattr(t, "size", 0) or 0),
           {"turnId": t.id, "prompt": event_lines.excerpt(t.text), "status": TurnStatus.RUNNING},
           t.started_at or now) for t in turns_running),
        *((t.id, t.session_id, None, {"taskId": t.id, "description": t.description, "type": t.type},
           t.started_at) for t in tasks_running),
    ]
    for subject, session_id, observed, payload, started_at in observed_now:
        row = watched.get(subject)
        if observed is None:  # a task: its output file says when it last wrote
            task = next(t for t in tasks_running if t.id == subject)
            since = max(started_at, task.last_output_at or started_at, last_output_time(task))
        else:
            since = delivery.quiet_since(row.size if row else None, row.quiet_since if row else None, observed,
                                         started_at, now)
        reported = list(row.reported or []) if row is not None and row.quiet_since == since else []
        thresholds = [s.stalled_minutes for s in wanting if subscription_rules.watches(s, session_id) and s.created_at <= now]
        due = delivery.stalls_due(since, thresholds, reported, now, minute)
        if row is not None and row.quiet_since == since and row.size == observed and not due:
            continue
        try:
            with write_transaction():
                StallWatch.insert(
                    subject=subject, session_id=session_id, size=observed, quiet_since=since, reported=reported + due
                ).on_conflict(
                    conflict_target=[StallWatch.subject],
                    update={StallWatch.size: observed, StallWatch.quiet_since: since,
                            StallWatch.reported: reported + due},
                ).execute()
                for minutes in due:
                    record_event(session_id, "stalled",
                                 {**payload, "stalledMinutes": minutes, "quietSince": iso(since)}, now)
        except pw.IntegrityError:
            continue  # another sweeper wrote it first
        recorded += len(due)
    gone = [subject for subject in watched if subject not in {t.id for t in turns_running} | {t.id for t in tasks_running}]
    if gone:
        StallWatch.delete().where(StallWatch.subject.in_(gone)).execute()
    if recorded:
        jobs.poke_delivery(runtime)
    return recorded


# Sessions named in a heartbeat line, at most (at work, and idle ones when that few).
HEARTBEAT_NAMED = 10


def make_heartbeats(runtime: Runtime, now: datetime) -> int:
    """Heartbeats that are due (docs/events.md#events): every `heartbeat_minutes` on the grid from the
    subscription's creation, one line of the watched sessions' state, held for the watcher
    like any other non-urgent event. None inside quiet hours; a relay that was down sends
    one for all it missed. Returns how many were made."""
    engine = subscription_rules.timing(runtime)
    due = list(Subscription.select().where(
        Subscription.ended_at.is_null() & Subscription.heartbeat_minutes.is_null(False)
        & (Subscription.heartbeat_due_at.is_null() | (Subscription.heartbeat_due_at <= now))
    ))
    holding = Holding(now, engine)
    made = 0
    for subscription in due:
        if subscription.heartbeat_minutes is None:
            continue  # not selected above; narrowed for the type checker
        quiet = subscription_rules.quiet_of(subscription)
        every = subscription.heartbeat_minutes * engine.minute_seconds
        with write_transaction():
            current = subscription.heartbeat_due_at
            if current is None:  # the first look: the grid starts at the subscription's creation
                current = delivery.heartbeat_after(subscription.created_at, every, subscription.created_at, quiet)
            following = delivery.heartbeat_after(subscription.created_at, every, max(now, current), quiet)
            if current > now:
                following = current
            # The claim: only one sweeper moves the due time on, and makes the heartbeat.
            match_current = (
                Subscription.heartbeat_due_at.is_null() if subscription.heartbeat_due_at is None
                else Subscription.heartbeat_due_at == subscription.heartbeat_due_at
            )
            claimed = (
                Subscription.update(heartbeat_due_at=following)
                .where((Subscription.id == subscription.id) & Subscription.ended_at.is_null() & match_current)
                .execute()
            )
            if not claimed or not delivery.heartbeat_wanted(current, now, quiet):
                continue
            line = heartbeat_line(subscription, holding)
            when, reason, _ = holding.due(subscription.watcher_id, [subscription], "heartbeat")
            holding.add(subscription.watcher_id, when, reason, subscription_id=subscription.id, kind="heartbeat",
                        line=line, position=held.cursor())
            holding.flush()
            lifetime.fire_once([subscription], now)
        due_jobs.schedule_next(runtime, subscription.watcher_id)
        made += 1
    return made


def heartbeat_line(subscription: Subscription, holding: Holding) -> str:
    """`[relay event] heartbeat: 1 of 3 watched sessions at work — session "Build" (3f9c…)
    running; idle: "Review" (a12b…), "Docs" (77aa…) (subscription sub_…)`."""
    watched = holding.watched(subscription)
    turns_open, tasks = holding.turn_states(), holding.tasks_running()
    states = {
        sid: turns_open.get(sid) or (SessionState.BACKGROUND_ONLY if sid in tasks else SessionState.IDLE)
        for sid in watched
    }
    at_work = [sid for sid in watched if states[sid] != SessionState.IDLE]
    idle = [sid for sid in watched if states[sid] == SessionState.IDLE]
    named = at_work[:HEARTBEAT_NAMED] + (idle if len(idle) <= HEARTBEAT_NAMED else [])
    titles = {row.id: row.title for row in Session.select(Session.id, Session.title).where(Session.id.in_(named))} if named else {}

    def name(sid: str) -> str:
        return f'"{titles.get(sid, "?")}" ({sid[:4]}…)'

    count = len(watched)
    text = f"[relay event] heartbeat: {len(at_work)} of {count} watched session{'s' if count != 1 else ''} at work"
    if at_work:
        text += " — " + ", ".join(f"{name(sid)} {states[sid]}" for sid in at_work[:HEARTBEAT_NAMED])
        if len(at_work) > HEARTBEAT_NAMED:
            text += f", and {len(at_work) - HEARTBEAT_NAMED} more"
    if idle:
        text += "; idle: " + (", ".join(name(sid) for sid in idle) if len(idle) <= HEARTBEAT_NAMED else f"{len(idle)} sessions")
    return f"{text} (subscription {subscription.id})"
