"""Decision links (docs/notifications.md#deciding-from-a-notification): a random token per
notification and card or question, sent through one channel, that decides that card or
question once without signing in.

The token is `DECISION_TOKEN_BYTES` random bytes; only its SHA-256 hash is stored, so the table
opens nothing. A link is live while it is unused, before its `expires_at` (the card's expiry,
and at most `DECISION_LINK_MAX_SECONDS`), while its card or question is pending, while its
channel still sends decision links and while the owner's `notify_decide_kinds` lets its card
or question be decided from a notification. Whatever decides the card another way (the Inbox,
the owner API, another link, its expiry, its withdrawal) kills every link to it at once: a
link looks at its subject each time it is used.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from oar.approvals.cards import REMEMBERED
from oar.core import defaults, ids
from oar.core.db import write_transaction
from oar.core.models import Card, Question, Session
from oar.core.statuses import CardStatus, QuestionStatus
from oar.notifications.models import Channel, DecisionLink

CARD, QUESTION = "card", "question"
# A token as a link carries it: `oar_d_` and url-safe base64 (letters, digits, `-`, `_`).
TOKEN_PREFIX = "oar_d_"
MAX_TOKEN_CHARS = 100


class LinkState(StrEnum):
    """What a decision link can still do, as its page says it."""

    OPEN = "open"  # it decides its card or question once
    UNKNOWN = "unknown"  # no such link (never given out, forged, or long pruned), or its card is gone
    USED = "used"  # it decided its card or question already
    DECIDED = "decided"  # its card or question was decided (or expired, or withdrawn) another way
    EXPIRED = "expired"  # the link's own time ran out while its question still waits
    CLOSED = "closed"  # its channel no longer sends decision links, or the owner decides this kind in the Inbox only


@dataclass(frozen=True)
class Subject:
    """A card or question a notification may offer to decide."""

    kind: str  # CARD | QUESTION
    card: Card | None = None
    question: Question | None = None

    @property
    def id(self) -> str:
        return self.card.id if self.card is not None else self.question.id  # type: ignore[union-attr]

    @property
    def pending(self) -> bool:
        if self.card is not None:
            return self.card.status == CardStatus.PENDING
        return self.question is not None and self.question.status == QuestionStatus.PENDING

    @property
    def decide_kinds(self) -> set[str]:
        """What `notify_decide_kinds` must list for it: "questions", or each of the card's reasons."""
        return set(self.card.reasons or []) if self.card is not None else {"questions"}

    @property
    def rememberable(self) -> list[str]:
        """The card's reasons an Allow may remember (docs/rules.md#when-a-card-is-asked)."""
        return [reason for reason in self.card.reasons or [] if reason in REMEMBERED] if self.card is not None else []


def subject_of(subject_id: str) -> Subject | None:
    """The card or question with this id, its session's title loaded; None when there is none
    (or its conversation was deleted)."""
    card = Card.select(Card, Session).join(Session).where(Card.id == subject_id).first()
    if card is not None:
        return None if card.session.deleted else Subject(CARD, card=card)
    question = Question.select(Question, Session).join(Session).where(Question.id == subject_id).first()
    if question is not None and not question.session.deleted:
        return Subject(QUESTION, question=question)
    return None


def may_decide(subject: Subject, settings: Mapping[str, Any]) -> bool:
    """Whether the owner lets this card or question be decided from a notification."""
    allowed = set(settings.get("notify_decide_kinds") or ())
    return bool(subject.decide_kinds) and subject.decide_kinds <= allowed


def offerable(subject_ids: Iterable[str], settings: Mapping[str, Any]) -> list[Subject]:
    """The pending cards and questions of `subject_ids` that may be decided from a notification,
    in their order, at most `DECISION_LINKS_PER_NOTIFICATION`."""
    found = []
    for subject_id in subject_ids:
        subject = subject_of(subject_id)
        if subject is not None and subject.pending and may_decide(subject, settings):
            found.append(subject)
    return found[-defaults.DECISION_LINKS_PER_NOTIFICATION:]


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(defaults.DECISION_TOKEN_BYTES)


def mint(channel: Channel, subject: Subject, now: datetime) -> str:
    """A new link to `subject` for one notification through `channel`: returns its token (the
    only copy; the table keeps its hash)."""
    token = new_token()
    expires = now + timedelta(seconds=defaults.DECISION_LINK_MAX_SECONDS)
    if subject.card is not None:
        expires = min(expires, subject.card.expires_at)
    with write_transaction():
        DecisionLink.create(token_hash=ids.hash_token(token), subject=subject.id, subject_kind=subject.kind,
                            channel=channel.name, created_at=now, expires_at=expires)
    return token


def find(token: str) -> DecisionLink | None:
    """The link of this token, if the relay gave it out (and has not pruned it)."""
    if not token or len(token) > MAX_TOKEN_CHARS or not token.startswith(TOKEN_PREFIX):
        return None
    return DecisionLink.get_or_none(DecisionLink.token_hash == ids.hash_token(token))


def state_of(link: DecisionLink | None, subject: Subject | None, settings: Mapping[str, Any], now: datetime) -> LinkState:
    """What the link can still do (the order matters: a used link says so even once its card
    is decided, since using it decided the card)."""
    if link is None or subject is None:
        return LinkState.UNKNOWN
    if link.used_at is not None:
        return LinkState.USED
    if not subject.pending or (subject.card is not None and subject.card.expires_at <= now):
        return LinkState.DECIDED
    if link.expires_at <= now:
        return LinkState.EXPIRED
    channel = Channel.get_or_none(Channel.name == link.channel_id)
    if channel is None or not channel.decisions or not may_decide(subject, settings):
        return LinkState.CLOSED
    return LinkState.OPEN


def claim(link: DecisionLink, now: datetime) -> bool:
    """Use the link up: True for the one caller whose conditional UPDATE marked it used."""
    with write_transaction():
        claimed = (
            DecisionLink.update(used_at=now)
            .where((DecisionLink.token_hash == link.token_hash) & DecisionLink.used_at.is_null()
                   & (DecisionLink.expires_at > now))
            .execute()
        )
    return claimed == 1


def prune(now: datetime) -> int:
    """Forget links whose time ran out a while ago (their pages then say "unknown")."""
    cutoff = now - timedelta(seconds=defaults.NOTIFY_KEEP_SECONDS)
    return int(DecisionLink.delete().where(DecisionLink.expires_at < cutoff).execute())
