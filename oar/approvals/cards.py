"""Approval cards (docs/rules.md#approval-cards): a write call of a conversation's agent waits for the owner.

A card is asked when the call needs one (`reasons_for`, pure). Each action declares its own
reasons in its spec (`@action(..., approval=(...))`, see DECLARED_REASONS): the
conversation's first `create_session` and first watch on a relay, `update_session` on
sessions it did not start, `stop` and `archive` of sessions it did not start (these four
Allows are remembered per conversation and relay, across restarts, as `Approval` rows),
`transfer_subscriptions` always. Two reasons come
from the call itself: every write while the conversation is in `ask` or `plan` mode, and the
31st agent-to-agent prompt (`Request.counted`; loop protection, docs/rules.md#loop-protection, `oar.approvals.loop`).

The card is shown in the calling conversation's live turn (docs/rules.md#where-a-card-waits): the
turn the relay runs for it, or, for a caller whose turns the relay does not run (an HTTP agent, a
script, an MCP client), the waiting call itself — a card with no turn, whose waiting call renews a
lease (`waiter_until`) so that the clock can tell a live wait from a dead process. A call that
cannot wait fails closed (`REMOTE_RELAY_NO_ACTIVE_TURN`). The call then blocks — holding no
database connection — until the owner decides, the turn ends, the caller goes away or the card
expires. A caller going away does nothing: a card with a remembered Allow stays pending, marked
`stoppedWaiting`, so that its Allow lets the agent's next such call through; others are withdrawn.
Each handler asks for its card after its own checks and before it writes, so a refused call
changes nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from oar.approvals import loop
from oar.core import ids, jobs, keys
from oar.core.db import write_transaction
from oar.core.errors import ActionError, invalid, not_found
from oar.core.models import Approval, Card, Message, Session
from oar.core.runtime import Runtime
from oar.core.signals import publish
from oar.core.statuses import LIVE_TURN, CardStatus, DecidedVia
from oar.core.timeutil import iso, utcnow
from oar.core.wait_slots import wait_slot
from oar.core.waiting import CallerGone, Look, current_watch, not_yet, settled, wait_on_signals

# The Allows remembered per conversation and relay.
REMEMBERED = ("create_sessions", "watch_sessions", "change_other_sessions", "end_other_sessions")
# Reasons about a session the caller did not start: asked only when the call's target is one.
OTHER_SESSIONS = ("change_other_sessions", "end_other_sessions")
# Reasons an action may declare in its spec: asked unless remembered, and OTHER_SESSIONS only
# when the target is a session the caller did not start.
DECLARED_REASONS = ("transfer", "end_other_sessions", "change_other_sessions", "create_sessions", "watch_sessions")
# The card's sentence comes from the first of its reasons in this order.
PRIORITY = (
    "loop", "transfer", "end_other_sessions", "change_other_sessions", "create_sessions", "watch_sessions", "mode",
)
EXCERPT_CHARS = 200


class Asker(Protocol):
    """Who asks for a card: the calling conversation and, when known, the turn making the call."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def caller_session(self) -> Session: ...
    @property
    def turn(self) -> Message | None: ...
    @property
    def relay_name(self) -> str: ...
    @property
    def approval(self) -> tuple[str, ...]:
        """The approval reasons the running action declares."""
        ...
    @property
    def can_wait(self) -> bool:
        """Whether someone waits on this call's answer, so it can be its own live turn."""
        ...
    @property
    def max_wait_seconds(self) -> int | None:
        """How long the caller waits at most (an MCP client without progress cuts a call at 60 s)."""
        ...


@dataclass(frozen=True)
class Request:
    """What a write call will do, as its card shows it."""

    action: str
    nothing: str
    target: Session | None = None
    mode: str | None = None
    provider: str | None = None
    model: str | None = None
    folder: str | None = None
    excerpt: str | None = None
    lines: tuple[str, ...] = ()  # options, billing switch, group, the changes
    counted: bool = False  # an agent-to-agent prompt (loop protection)
    denied_code: str = "REMOTE_RELAY_APPROVAL_DENIED"


def reasons_for(caller: Session, request: Request, declared: tuple[str, ...], approved: set[str]) -> list[str]:
    """Why this call needs a card (empty: it needs none), given the reasons its action
    declares and the Allows remembered for the caller."""
    reasons = [reason for reason in declared if _applies(reason, caller, request, approved)]
    if request.counted and loop.used_up(caller):
        reasons.append("loop")
    if caller.mode in ("ask", "plan"):
        reasons.append("mode")
    return sorted(reasons, key=PRIORITY.index)


def _applies(reason: str, caller: Session, request: Request, approved: set[str]) -> bool:
    if reason in REMEMBERED and reason in approved:
        return False
    if reason in OTHER_SESSIONS:
        return request.target is not None and request.target.created_by_session != caller.id
    return True


def approve(ctx: Asker, request: Request) -> None:
    """Return when the call may go on: at once when it needs no card, else on the owner's Allow."""
    caller = Session.get_by_id(ctx.caller_session.id)  # the loop count may have moved since the call began
    reasons = reasons_for(caller, request, ctx.approval, approved(caller.id, "this"))
    if not reasons:
        return
    turn = live_turn(ctx)
    if turn is None and not ctx.can_wait:
        raise ActionError(
            "REMOTE_RELAY_NO_ACTIVE_TURN",
            f"{request.action} needs the owner's approval ({why(reasons[0])}), and nobody waits on this call for "
            f"the owner's answer. {request.nothing}".strip(),
        )
    # An HTTP or MCP caller waits for the owner in a web thread: one of its conversation's wait
    # slots (docs/limits.md#waits-at-once), taken before the card exists so that a refusal changes nothing.
    # An HTTP or MCP call made while its conversation's turn runs shows its card in that turn, and
    # keeps it if the turn ends first: the call itself still waits for the answer.
    waits_itself = ctx.turn is None and ctx.can_wait
    with wait_slot(ctx.runtime, ctx.caller_session.id, request.nothing) if ctx.can_wait else contextlib.nullcontext():
        card = _create(ctx, caller, turn, request, reasons, waits_itself=waits_itself)
        watch = current_watch()
        if watch is not None:
            watch.on_owner(f"Waiting for the owner to allow or deny {request.action} (approval card {card.id}, "
                           f"in the relay's Inbox: {ctx.runtime.config.base_url}/inbox).")
        try:
            # A waiting call that is its own live turn waits as long as its caller does; the card stays
            # for the owner (or is withdrawn) as when the caller goes away.
            outcome = _await(ctx.runtime, card.id, turn.id if turn is not None else None,
                             seconds=ctx.max_wait_seconds if waits_itself or turn is None else None,
                             waits_itself=waits_itself)
        finally:
            if watch is not None:
                watch.on_owner(None)
    if outcome == CardStatus.ALLOWED:
        return
    raise _refusal(card, outcome, request)


def live_turn(ctx: Asker) -> Message | None:
    """The caller's turn a card can be shown in: the one making the call, else any running."""
    if ctx.turn is not None:
        return ctx.turn
    return (
        Message.select()
        .where((Message.session == ctx.caller_session.id) & Message.status.in_(LIVE_TURN))
        .order_by(Message.seq)
        .first()
    )


def approved(session_id: str, relay: str) -> set[str]:
    rows = Approval.select(Approval.kind).where((Approval.session == session_id) & (Approval.relay == relay))
    return {row.kind for row in rows}


def set_approvals(session_id: str, relay: str, kinds: set[str], card_id: str | None = None) -> None:
    """Remember exactly these Allows (the owner's list on the page and the API); inside a transaction."""
    Approval.delete().where(
        (Approval.session == session_id) & (Approval.relay == relay) & Approval.kind.not_in(list(kinds) or [""])
    ).execute()
    _grant(session_id, relay, kinds, card_id)


def _grant(session_id: str, relay: str, kinds: set[str] | list[str], card_id: str | None) -> None:
    rows = [{"session": session_id, "relay": relay, "kind": kind, "card_id": card_id} for kind in sorted(kinds)]
    if rows:
        Approval.insert_many(rows).on_conflict_ignore().execute()


def _create(
    ctx: Asker, caller: Session, turn: Message | None, request: Request, reasons: list[str], *, waits_itself: bool
) -> Card:
    now = utcnow()
    lines = [line for line in (_settings_line(request), *request.lines) if line]
    lines += [_also(reason) for reason in reasons[1:]]
    excerpt = (request.excerpt or "").strip() or None
    if excerpt and len(excerpt) > EXCERPT_CHARS:
        excerpt = excerpt[: EXCERPT_CHARS - 1] + "…"
    target = request.target
    with write_transaction():
        card = Card.create(
            id=ids.prefixed_id("card"), session=caller.id, turn_id=turn.id if turn is not None else None,
            waiter_until=(
                now + timedelta(seconds=ctx.runtime.time("CARD_WAITER_LEASE_SECONDS"))
                if waits_itself or turn is None else None
            ),
            action=request.action,
            relay=ctx.relay_name, target_id=target.id if target else None, reasons=reasons,
            text=_sentence(reasons[0], ctx.relay_name, caller, request),
            details={"lines": lines, "excerpt": excerpt, "targetTitle": target.title if target else None},
            created_at=now, expires_at=now + timedelta(seconds=ctx.runtime.time("CARD_EXPIRY_SECONDS")),
        )
    jobs.poke_notifications(ctx.runtime)  # the owner hears of it (docs/notifications.md)
    return card


# What `_await` answers when the caller went away before a decision: the card stays pending for
# its remembered Allow (`stoppedWaiting`), or it was withdrawn.
STOPPED_WAITING = "stopped_waiting"


def _await(
    runtime: Runtime, card_id: str, turn_id: str | None, seconds: float | None = None, *, waits_itself: bool = False
) -> str:
    """Block until the card is decided, its turn ends (or, with no turn, its caller goes away or
    `seconds` pass), or it expires; returns its final status (or STOPPED_WAITING).

    `waits_itself`: the caller is an HTTP or MCP call, which renews its lease on the card all
    along; when the turn the card showed in ends on its own, the card stays with the call."""
    namespace = runtime.config.namespace
    lease = runtime.time("CARD_WAITER_LEASE_SECONDS")
    shown_in = [turn_id]

    def look() -> Look[str]:
        card = Card.get_or_none(Card.id == card_id)
        turn = Message.get_or_none(Message.id == shown_in[0]) if shown_in[0] is not None else None
        if card is None:  # deleted with its conversation while the call waited
            return settled(CardStatus.WITHDRAWN)
        if card.status != CardStatus.PENDING:
            return settled(card.status)
        now = utcnow()
        if shown_in[0] is not None and (turn is None or turn.stop_requested or turn.status not in LIVE_TURN):
            # A turn that ended on its own hands the card to the call still waiting for it; a
            # stopped turn (Stop, archive, delete) takes its cards with it.
            if waits_itself and turn is not None and not turn.stop_requested:
                _detach(card_id, now + timedelta(seconds=lease))
                shown_in[0] = None
                return not_yet(card.status, again_within=0)
            _end(card_id, CardStatus.WITHDRAWN, now)
            return not_yet(card.status, again_within=0)
        if now >= card.expires_at:
            _end(card_id, CardStatus.EXPIRED, now)
            return not_yet(card.status, again_within=0)
        if card.waiter_until is not None and (card.waiter_until - now).total_seconds() < lease / 2:
            _renew(card_id, now + timedelta(seconds=lease))
        elif shown_in[0] is None and card.waiter_until is None:
            _renew(card_id, now + timedelta(seconds=lease))
        return not_yet(card.status, again_within=(card.expires_at - now).total_seconds())

    channels = [keys.card_channel(namespace, card_id)]
    if turn_id is not None:
        channels.append(keys.turn_channel(namespace, turn_id))
    # A decision and the turn's end arrive by signal; a stop, and a caller gone, are seen within the poll period.
    try:
        outcome = wait_on_signals(runtime, channels, look, recheck_seconds=min(runtime.time("STOP_POLL_SECONDS"), lease / 3),
                                  seconds=seconds)
    except CallerGone:
        return caller_gone(card_id, utcnow())
    return caller_gone(card_id, utcnow()) if outcome == CardStatus.PENDING else outcome


def _detach(card_id: str, until: datetime) -> None:
    """The turn the card showed in ended while its call still waits: the card is the call's now."""
    Card.update(turn_id=None, waiter_until=until).where(
        (Card.id == card_id) & (Card.status == CardStatus.PENDING)
    ).execute()


def _renew(card_id: str, until: datetime) -> None:
    Card.update(waiter_until=until).where((Card.id == card_id) & (Card.status == CardStatus.PENDING)).execute()


def caller_gone(card_id: str, now: datetime) -> str:
    """Nobody waits on the card any more: keep it for its remembered Allow, else withdraw it (nothing is done)."""
    card = Card.get_or_none(Card.id == card_id)
    if card is None:
        return CardStatus.WITHDRAWN
    if card.status != CardStatus.PENDING:
        return card.status
    if any(reason in REMEMBERED for reason in card.reasons):
        Card.update(stopped_waiting_at=now, waiter_until=None).where(
            (Card.id == card_id) & (Card.status == CardStatus.PENDING)
        ).execute()
        return STOPPED_WAITING
    _end(card_id, CardStatus.WITHDRAWN, now)
    return CardStatus.WITHDRAWN


def _end(card_id: str, status: CardStatus, now: datetime) -> bool:
    ended = (
        Card.update(status=status, decided_at=now)
        .where((Card.id == card_id) & (Card.status == CardStatus.PENDING))
        .execute()
    )
    return bool(ended)


# The owner's decisions on a card: Allow (remembering the card's rememberable reasons), Allow
# this call only (remembering nothing), Deny.
DECISIONS = ("allow", "allow_once", "deny")


def decide(
    runtime: Runtime, card_id: str, decision: str, via: DecidedVia = DecidedVia.API, channel: str | None = None,
) -> dict[str, Any]:
    """The owner's Allow or Deny (page, API and decision links alike), recorded with how it was
    given (`via`, and the notification `channel` of a link or button). Nothing changes on a refusal."""
    nothing = "Nothing was changed."
    if decision not in DECISIONS:
        raise invalid(f'decision must be "allow", "allow_once" or "deny". {nothing}')
    card = Card.get_or_none(Card.id == (card_id or "").strip())
    if card is None:
        raise not_found(f'Relay "{runtime.relay_name()}" has no approval card "{(card_id or "")[:64]}". {nothing}')
    now = utcnow()
    if card.status == CardStatus.PENDING and card.expires_at <= now:
        _end(card.id, CardStatus.EXPIRED, now)  # refused below as expired
    status = CardStatus.DENIED if decision == "deny" else CardStatus.ALLOWED
    with write_transaction():
        decided = (
            Card.update(status=status, decided_at=now, decided_via=via, decided_channel=channel)
            .where((Card.id == card.id) & (Card.status == CardStatus.PENDING))
            .execute()
        )
        if decided and decision == "allow":
            _grant(card.session_id, "this", [r for r in card.reasons if r in REMEMBERED], card.id)
        if decided and status == CardStatus.ALLOWED and "loop" in card.reasons:
            loop.start_over(card.session_id)  # Allow on the loop card starts the count over (docs/rules.md#loop-protection)
    if not decided:
        current = Card.get_by_id(card.id).status
        raise invalid(f"Card {card.id} is {current}, not pending. {nothing}")
    publish(runtime.redis, keys.card_channel(runtime.config.namespace, card.id))
    return shape(Card.get_by_id(card.id))


def sweep(now: datetime) -> int:
    """End cards nobody can still be waiting on (their turn ended, their waiting call's lease ran
    out, or they expired): a waiting process that died leaves its card pending, and the Inbox must
    not show it — except a card kept for its remembered Allow, which stays until decided or expired."""
    ended = 0
    pending = list(Card.select().where(Card.status == CardStatus.PENDING))
    if not pending:
        return 0
    turn_ids = [c.turn_id for c in pending if c.turn_id is not None]
    turns = Message.select(Message.id).where(Message.id.in_(turn_ids) & Message.status.in_(LIVE_TURN))
    live = {turn.id for turn in turns}
    for card in pending:
        if card.expires_at <= now:
            ended += _end(card.id, CardStatus.EXPIRED, now)
        elif card.turn_id is not None and card.turn_id not in live:
            # Unless the call that raised it still waits (its lease is live): it takes the card over.
            if card.waiter_until is None or card.waiter_until <= now:
                ended += _end(card.id, CardStatus.WITHDRAWN, now)
        elif card.turn_id is None and card.stopped_waiting_at is None and (card.waiter_until or now) <= now:
            ended += caller_gone(card.id, now) != CardStatus.PENDING
    return ended


def seconds_waited(turn_id: str, now: datetime) -> float:
    """Time the turn spent waiting on cards: it does not count toward `max_turn_seconds`."""
    total = 0.0
    for card in Card.select(Card.created_at, Card.decided_at).where(Card.turn_id == turn_id):
        total += ((card.decided_at or now) - card.created_at).total_seconds()
    return total


def decided_since(since: datetime, limit: int) -> list[dict[str, Any]]:
    """Cards decided, expired or withdrawn since `since`, newest first (the Inbox's "Decided lately")."""
    rows = (
        Card.select(Card, Session).join(Session)
        .where((Card.status != CardStatus.PENDING) & (Card.decided_at >= since) & Session.live())
        .order_by(Card.decided_at.desc()).limit(limit)
    )
    return [shape(card) for card in rows]


def pending() -> list[dict[str, Any]]:
    """Every pending card, oldest first (the Inbox)."""
    return [shape(card) for card in _pending_query()]


def pending_count() -> int:
    """How many cards wait (the page's Inbox badge, on every page)."""
    return _pending_query().count()


def pending_in_session(session_id: str) -> list[dict[str, Any]]:
    """The pending cards of one conversation (its page)."""
    return [shape(card) for card in _pending_query().where(Card.session == session_id)]


def _pending_query() -> Any:
    return (
        Card.select(Card, Session)
        .join(Session)
        .where((Card.status == CardStatus.PENDING) & Session.live())
        .order_by(Card.created_at)
    )


def shape(card: Card) -> dict[str, Any]:
    details = card.details or {}
    return {
        "id": card.id,
        "kind": "approval",
        "status": card.status,
        "reason": card.reasons[0] if card.reasons else None,
        "reasons": card.reasons,
        "session": {"id": card.session_id, "title": card.session.title},
        "action": card.action,
        "relay": card.relay,
        "target": {"id": card.target_id, "title": details.get("targetTitle")} if card.target_id else None,
        "text": card.text,
        "lines": details.get("lines") or [],
        "excerpt": details.get("excerpt"),
        "createdAt": iso(card.created_at),
        "expiresAt": iso(card.expires_at),
        "decidedAt": iso(card.decided_at) if card.decided_at else None,
        # How the owner decided it (page, api, link, action) and through which notification channel.
        "decidedVia": card.decided_via,
        "decidedChannel": card.decided_channel,
        # The caller went away before a decision: nothing was done; an Allow is remembered for its next call.
        "stoppedWaiting": card.stopped_waiting_at is not None,
    }


def _sentence(reason: str, relay: str, caller: Session, request: Request) -> str:
    target = request.target
    where = f" (session {target.id[:8]})" if target is not None else ""
    if reason == "loop":
        return (
            f"This agent has sent {caller.loop_prompt_count} prompts to other sessions since you last wrote "
            f'here. Keep going? (next: {request.action} on relay "{relay}"{where})'
        )
    if reason == "transfer":
        return f"Allow the agent to move the subscriptions of session {target.id[:8] if target else '?'} to this conversation?"
    if reason == "change_other_sessions":
        return f'Allow the agent to change session {target.id[:8] if target else "?"} on relay "{relay}", which it did not start?'
    if reason == "end_other_sessions":
        return (
            f'Allow the agent to {request.action} session {target.id[:8] if target else "?"} on relay "{relay}", '
            "which it did not start?"
        )
    if reason == "create_sessions":
        parts = ", ".join(p for p in (request.provider, request.folder) if p)
        return f"This agent wants to start sessions on this relay ({parts}). Sessions it starts use this relay's accounts."
    if reason == "watch_sessions":
        return f'This agent wants to watch sessions on relay "{relay}"{where}.'
    return f'Allow the agent to {request.action} on relay "{relay}"{where}?'


def _settings_line(request: Request) -> str:
    parts = [
        f"{label}: {value}"
        for label, value in (
            ("Mode", request.mode), ("Provider", request.provider), ("Model", request.model), ("Folder", request.folder)
        )
        if value
    ]
    return " · ".join(parts)


def why(reason: str) -> str:
    return {
        "loop": f"{loop.THRESHOLD} prompts to other sessions since the user last wrote here",
        "transfer": "moving subscriptions always needs it",
        "change_other_sessions": "changing a session this conversation did not start",
        "end_other_sessions": "stopping or archiving a session this conversation did not start",
        "create_sessions": "the first session this conversation starts",
        "watch_sessions": "the first session this conversation watches",
        "mode": "this conversation is in ask or plan mode",
    }[reason]


def _also(reason: str) -> str:
    return f"Also asked because: {why(reason)}."


def _refusal(card: Card, outcome: str, request: Request) -> ActionError:
    if outcome == CardStatus.DENIED:
        if request.denied_code == "REMOTE_RELAY_PERMISSION":
            return ActionError(
                "REMOTE_RELAY_PERMISSION",
                f"The owner did not allow changing session {card.target_id[:8] if card.target_id else ''} "
                f"(card {card.id}). {request.nothing}",
            )
        return ActionError(
            "REMOTE_RELAY_APPROVAL_DENIED", f"The owner denied {request.action} (card {card.id}). {request.nothing}"
        )
    if outcome == CardStatus.EXPIRED:
        return ActionError(
            "REMOTE_RELAY_APPROVAL_DENIED",
            f"Nobody decided the approval card {card.id} before it expired; it was withdrawn. {request.nothing}",
        )
    if outcome == STOPPED_WAITING:
        return ActionError(
            "REMOTE_RELAY_APPROVAL_DENIED",
            f"The call stopped waiting before the owner decided the approval card {card.id}. {request.nothing} "
            "The card waits for the owner in the Inbox; once allowed, call again and it goes through without a card.",
        ).in_full()  # it says what comes next after what was not done
    if card.turn_id is None:
        return ActionError(
            "REMOTE_RELAY_APPROVAL_DENIED",
            f"The call stopped waiting before the owner decided the approval card {card.id}; it was withdrawn. "
            f"{request.nothing}",
        )
    return ActionError(
        "REMOTE_RELAY_APPROVAL_DENIED",
        f"The turn ended before the owner decided the approval card {card.id}; it was withdrawn. {request.nothing}",
    )
