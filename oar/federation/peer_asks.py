"""Asks kept on a paired relay (docs/relays.md#asks-across-relays): this relay remembers each one
its conversations made there and checks there for the answer, every `PEER_ASK_POLL_SECONDS` while
it is open (every `PEER_ASK_RETRY_SECONDS` while the paired relay does not answer), in a short
RQ job the clock enqueues. An answer or dismissal reaches the asking conversation as the
`question_answered` relay event, once: the row is settled in the same transaction that queues
the message, so a check that runs twice finds it settled."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import redis

from oar.core import jobs, keys
from oar.core.db import write_transaction
from oar.core.errors import ActionError
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.statuses import QuestionStatus
from oar.core.timeutil import utcnow
from oar.federation import peers
from oar.federation.models import Peer, PeerAsk
from oar.turns import automated, turns

log = logging.getLogger(__name__)

SETTLED = tuple(status for status in QuestionStatus if status != QuestionStatus.PENDING)
# Asks checked in one request.
BATCH = 100


def record(runtime: Runtime, peer: Peer, asker: Session, answer: dict[str, Any], args: dict[str, Any], hops: int) -> None:
    """The paired relay took an ask of `asker`: remember it, to check for its answer."""
    question_id = answer.get("question_id")
    if not isinstance(question_id, str) or not question_id.startswith("ask_") or len(question_id) > 32:
        return  # not an ask's answer this relay understands: nothing to check
    with write_transaction():
        PeerAsk.insert(
            id=question_id, peer=peer.id, asker=asker.id, about_session=args.get("session"),
            question=str(args.get("question") or "")[:2000], hops=hops, created_at=utcnow(),
            next_check_at=utcnow() + timedelta(seconds=runtime.time("PEER_ASK_POLL_SECONDS")),
        ).on_conflict_ignore().execute()


def enqueue_due(runtime: Runtime, now: datetime) -> int:
    """The clock's sweep: one check job per paired relay with an ask due for a look."""
    due = (PeerAsk.select(PeerAsk.peer).where(PeerAsk.next_check_at <= now).distinct())
    enqueued = 0
    for row in due:
        key = keys.peer_asks_nudge(runtime.config.namespace, row.peer_id)
        try:
            # One queued check per relay at a time; the key lapses in case a worker died with it.
            if not runtime.redis.set(key, b"1", nx=True, ex=max(1, int(runtime.time("PEER_ASK_RETRY_SECONDS")))):
                continue
            runtime.queue.enqueue(jobs.CHECK_PEER_ASKS, row.peer_id, result_ttl=0, failure_ttl=86_400)
            enqueued += 1
        except redis.RedisError as error:
            log.warning("checking the asks on paired relay %s not enqueued: %s", row.peer_id, error)
    return enqueued


def check(runtime: Runtime, peer_id: str, now: datetime) -> int:
    """Ask the paired relay about this relay's open asks there that are due; returns how many were
    settled. Holds no transaction while the paired relay answers."""
    try:
        peer = Peer.get_or_none(Peer.id == peer_id)
        if peer is None:
            return 0
        due = list(PeerAsk.select().where((PeerAsk.peer == peer.id) & (PeerAsk.next_check_at <= now)).limit(BATCH))
        if not due:
            return 0
        try:
            answer = peers.link_to(runtime, peer).request(
                "GET", "/asks?ids=" + ",".join(row.id for row in due),
                read_timeout=runtime.time("PEER_CONNECT_TIMEOUT_SECONDS") + runtime.time("PEER_READ_MARGIN_SECONDS"),
            )
        except ActionError as error:
            peers.note_failure(peer, error.code)
            later = utcnow() + timedelta(seconds=runtime.time("PEER_ASK_RETRY_SECONDS"))
            with write_transaction():
                PeerAsk.update(next_check_at=later).where(PeerAsk.id.in_([row.id for row in due])).execute()
            return 0
        peers.note_answer(peer)
        found = {entry.get("question_id"): entry for entry in answer.get("asks") or [] if isinstance(entry, dict)}
        settled = 0
        for row in due:
            settled += _apply(runtime, peer, row, found.get(row.id))
        return settled
    finally:
        runtime.redis.delete(keys.peer_asks_nudge(runtime.config.namespace, peer_id))


def _apply(runtime: Runtime, peer: Peer, row: PeerAsk, entry: dict[str, Any] | None) -> int:
    status = entry.get("status") if entry else QuestionStatus.ENDED  # the paired relay no longer has it
    if status not in SETTLED:
        with write_transaction():
            PeerAsk.update(next_check_at=utcnow() + timedelta(seconds=runtime.time("PEER_ASK_POLL_SECONDS"))).where(
                PeerAsk.id == row.id
            ).execute()
        return 0
    tell = status in (QuestionStatus.ANSWERED, QuestionStatus.DISMISSED) and entry is not None
    started = None
    with write_transaction():
        claimed = PeerAsk.update(status=status, next_check_at=None, settled_at=utcnow()).where(
            (PeerAsk.id == row.id) & (PeerAsk.status == QuestionStatus.PENDING)
        ).execute()
        if claimed and tell and entry is not None:
            asker = Session.get_or_none((Session.id == row.asker_id) & Session.live())
            if asker is not None and not asker.archived:
                text = f"{automated.EVENT_HEADER}\n{answer_line(peer.name, row, status, entry)}"
                automated.insert(asker, text, turns.Provenance(kind="event", hops=row.hops))
                started = asker.id
    if started:
        turns.start_turns(runtime, started)
    return 1 if claimed else 0


def answer_line(peer_name: str, row: PeerAsk, status: str, entry: dict[str, Any]) -> str:
    """`[relay event] build-box · question_answered: ask_7d2… "Ship it…?" → "Wait" (via build-box)`."""
    text = row.question if len(row.question) <= 60 else row.question[:59] + "…"
    outcome = "dismissed" if status == "dismissed" else f'"{entry.get("answer")}"'
    via = entry.get("via") or peer_name
    return f'[relay event] {peer_name} · question_answered: {row.id[:7]}… "{text}" → {outcome} (via {via})'
