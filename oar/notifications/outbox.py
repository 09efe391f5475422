"""The outbox (docs/notifications.md#not-a-flood): writing a notification for a channel, merged
with the others of its kind and session within the merge window.

The first notification of a kind for a session goes out at once; those that follow within
`NOTIFY_MERGE_SECONDS` of the last one sent join one row, due when the window ends, which
says how many there were. Call inside the write transaction that records what it announces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from oar.core import defaults
from oar.core.statuses import NotificationStatus
from oar.notifications.kinds import Kind
from oar.notifications.models import Channel, Notification

# One notification's heading, and that of several merged (`{n}`: how many).
HEADINGS: dict[str, tuple[str, str]] = {
    Kind.CARD_WAITING: ("An approval card waits", "{n} approval cards wait"),
    Kind.QUESTION_WAITING: ("A question waits for your answer", "{n} questions wait for your answer"),
    Kind.REPLY_READY: ("A reply is ready", "{n} replies are ready"),
    Kind.PROVIDER_TROUBLE: ("A provider needs attention", "{n} provider problems"),
    Kind.RELAY_LOST: ("A paired relay is lost", "{n} paired relays lost"),
    Kind.TEST: ("Test notification", "{n} test notifications"),
}
TITLE_CHARS = 200
SESSION_TITLE_CHARS = 60


def excerpt(text: str | None, limit: int = defaults.NOTIFY_EXCERPT_CHARS) -> str:
    """The start of agent-written text, on one line: never more than a short excerpt."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class Item:
    """Something to tell the owner, before it is written for each channel that receives its kind."""

    kind: Kind
    body: str
    link: str | None
    session_id: str | None = None
    session_title: str | None = None
    subjects: tuple[str, ...] = field(default=())
    # What a merge groups by when there is no session (a provider's name, a relay's).
    about: str | None = None

    @property
    def merge_key(self) -> str:
        return f"{self.kind}:{self.session_id or self.about or '-'}"[:80]

    def title(self, count: int) -> str:
        one, several = HEADINGS[self.kind]
        heading = one if count == 1 else several.format(n=count)
        where = excerpt(self.session_title, SESSION_TITLE_CHARS) if self.session_title else None
        return (f"{heading} · {where}" if where else heading)[:TITLE_CHARS]


def announce(channel: Channel, item: Item, now: datetime, window_seconds: float) -> Notification:
    """Write `item` for `channel`: merged into its kind and session's row still to be sent, or a
    new row due now, or at the end of the merge window opened by the last one sent."""
    waiting = (
        Notification.select()
        .where((Notification.channel == channel.name) & (Notification.merge_key == item.merge_key)
               & (Notification.status == NotificationStatus.PENDING) & (Notification.attempts == 0))
        .order_by(Notification.id.desc()).first()
    )
    if waiting is not None and item.kind != Kind.TEST:
        count = waiting.count + 1
        Notification.update(
            count=count, title=item.title(count), body=item.body, link=item.link,
            subjects=[*waiting.subjects, *item.subjects],
        ).where(Notification.id == waiting.id).execute()
        return Notification.get_by_id(waiting.id)
    due = now
    last_sent = (
        Notification.select(Notification.sent_at)
        .where((Notification.channel == channel.name) & (Notification.merge_key == item.merge_key)
               & (Notification.status == NotificationStatus.SENT))
        .order_by(Notification.sent_at.desc()).first()
    )
    if last_sent is not None and last_sent.sent_at is not None and item.kind != Kind.TEST:
        due = max(now, last_sent.sent_at + timedelta(seconds=window_seconds))
    return Notification.create(
        channel=channel.name, kind=item.kind, session_id=item.session_id, merge_key=item.merge_key,
        subjects=list(item.subjects), title=item.title(1), body=item.body, link=item.link,
        created_at=now, due_at=due,
    )


def receives(channel: Channel, kind: Kind) -> bool:
    return kind == Kind.TEST or kind in (channel.kinds or [])


def announce_test(channel: Channel, link: str, now: datetime) -> Notification:
    """The test button: one notification for this channel alone, due now, whatever its kinds."""
    item = Item(Kind.TEST, f'This is a test of the notification channel "{channel.name}".', link, about=channel.name)
    return announce(channel, item, now, 0)
