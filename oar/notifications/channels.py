"""Notification channels (docs/notifications.md#channels): checking, saving, showing and deleting them.

A URL channel's `url` is write-only, like a provider's API key: stored, never returned, logged
or quoted in an error (an Apprise URL holds the service's token or password). A PUT without
`url` keeps the stored one, since no client can send back what it never sees.
"""

from __future__ import annotations

import re
from typing import Any

from peewee import EXCLUDED

from oar.core import defaults, jobs
from oar.core.db import write_transaction
from oar.core.errors import invalid, not_found
from oar.core.fields import Param, check_fields
from oar.core.models import Setting
from oar.core.timeutil import iso, utcnow
from oar.notifications import collect, transports
from oar.notifications.kinds import CHOOSABLE, DEFAULT_KINDS, ChannelType
from oar.notifications.models import Channel, Notification

NOTHING = "Nothing was changed."
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_URL_CHARS = 2000

FIELDS = {
    "type": Param("str", required=True, choices=tuple(ChannelType), description="page, url or webpush"),
    "url": Param(
        "str", max_length=MAX_URL_CHARS,
        description="url: an Apprise URL such as ntfy://ntfy.sh/topic, json://host/path, slack://…; write-only",
    ),
    "kinds": Param("list", items=Param("str"), description=f"what it receives: {', '.join(CHOOSABLE)}"),
    "decisions": Param(
        "bool", description="whether its notifications carry decision links and buttons (url and webpush channels; "
        "default: on for webpush and ntfy URLs, off for other URLs)",
    ),
}


class HiddenText(str):
    """A URL on its way into the database: the same text, but its repr hides it, so the SQL
    log (peewee logs every query's parameters at DEBUG) never shows it."""

    def __repr__(self) -> str:
        return "'[url hidden]'"


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise invalid(
            f'Channel name "{(name or "")[:64]}" must be 1–64 letters, digits, ".", "_" or "-", '
            f"starting with a letter or digit. {NOTHING}"
        )
    return name


def check(name: str, payload: dict[str, Any], existing: Channel | None) -> dict[str, Any]:
    """The checked row fields of a PUT body; raises INVALID_INPUT naming the problem."""
    check_name(name)
    args, _ = check_fields("notification channel", FIELDS, payload, strict=True, nothing=NOTHING)
    kind = ChannelType(args["type"])
    kinds = _checked_kinds(args.get("kinds"))
    url = args.get("url")
    if kind != ChannelType.URL and url is not None:
        raise invalid(f"notification channel: url is for url channels only (a {kind} channel needs none). {NOTHING}")
    if kind == ChannelType.URL:
        if url is None:
            if existing is None or existing.type != ChannelType.URL or not existing.url:
                raise invalid(
                    "notification channel: a url channel needs url, an Apprise URL such as ntfy://ntfy.sh/my-topic "
                    f"or json://example.com/hook. {NOTHING}"
                )
            url = existing.url  # kept: the owner never sees it to send it back
        elif not transports.url_is_valid(url.strip()):
            # The URL itself is not quoted: it may hold a token.
            raise invalid(
                "notification channel: url is not a notification URL this relay can send to (an Apprise URL "
                f"such as ntfy://ntfy.sh/my-topic, json://example.com/hook or mailto://user:password@example.com). {NOTHING}"
            )
        else:
            url = url.strip()
    decisions = args.get("decisions")
    if kind == ChannelType.PAGE and decisions:
        raise invalid(f"notification channel: decisions is for url and webpush channels (the page's owner is signed in). {NOTHING}")
    if decisions is None:
        decisions = decisions_by_default(kind, url)
    return {"type": kind, "kinds": kinds, "url": HiddenText(url) if url else None, "decisions": decisions}


def decisions_by_default(kind: ChannelType, url: str | None) -> bool:
    """Whether a channel carries decision links and buttons when the owner does not say
    (docs/notifications.md#which-channels-carry-them): Web Push reaches only the owner's own
    browsers, and an ntfy topic is the owner's phone; every other service (a chat room, a
    mailing list, a webhook that forwards anywhere) may be read by others, so its links wait
    for the owner to turn them on."""
    if kind == ChannelType.WEBPUSH:
        return True
    return kind == ChannelType.URL and transports.is_ntfy(url or "")


def _checked_kinds(kinds: list[Any] | None) -> list[str]:
    if kinds is None:
        return list(DEFAULT_KINDS)
    unknown = [kind for kind in kinds if kind not in CHOOSABLE]
    if unknown:
        shown = ", ".join(str(kind)[:40] for kind in unknown[:5])
        raise invalid(f"notification channel: unknown kinds {shown}. Kinds: {', '.join(CHOOSABLE)}. {NOTHING}")
    return [kind for kind in CHOOSABLE if kind in kinds]  # in the documented order, once each


def save(name: str, payload: dict[str, Any]) -> Channel:
    """Create or replace a channel; returns the stored row."""
    existing = Channel.get_or_none(Channel.name == name)
    fields = check(name, payload, existing)
    if existing is None and Channel.select().count() >= defaults.NOTIFY_MAX_CHANNELS:
        raise invalid(f"notification channel: at most {defaults.NOTIFY_MAX_CHANNELS} channels. {NOTHING}")
    now = utcnow()
    with write_transaction():
        collect.start_cursor(skip=not Channel.select().exists())
        if existing is None:
            Channel.create(name=name, created_at=now, updated_at=now, **fields)
        else:
            changed_url = fields["url"] != existing.url
            Channel.update(
                updated_at=now, **fields,
                # A new URL starts with no error of the old one's.
                **({"last_error": None, "last_error_at": None} if changed_url else {}),
            ).where(Channel.name == name).execute()
        _count_channels()
    return Channel.get_by_id(name)


def delete(name: str) -> bool:
    """Delete a channel and what it still had to send."""
    with write_transaction():
        deleted = Channel.delete().where(Channel.name == name).execute()
        _count_channels()
    return bool(deleted)


def _count_channels() -> None:
    """How many channels there are, where `oar.core.jobs.poke_notifications` reads it."""
    Setting.insert(key=jobs.NOTIFY_CHANNELS_KEY, value=Channel.select().count()).on_conflict(
        conflict_target=[Setting.key], update={Setting.value: EXCLUDED.value}
    ).execute()


def get(name: str) -> Channel:
    channel = Channel.get_or_none(Channel.name == name)
    if channel is None:
        raise not_found(f'No notification channel "{name[:64]}" is configured.')
    return channel


def listed() -> list[Channel]:
    return list(Channel.select().order_by(Channel.created_at, Channel.name))


def recent(name: str, limit: int = 10) -> list[dict[str, Any]]:
    """The named channel's newest outbox rows: what went out, what waits, what failed and why."""
    rows = Notification.select().where(Notification.channel == name).order_by(Notification.id.desc()).limit(limit)
    return [
        {"id": row.id, "kind": row.kind, "title": row.title, "count": row.count, "status": row.status,
         "attempts": row.attempts, "dueAt": iso(row.due_at), "sentAt": iso(row.sent_at) if row.sent_at else None,
         "error": row.error}
        for row in rows
    ]


def view(channel: Channel) -> dict[str, Any]:
    """Never the URL: only whether one is set and the service it names (its scheme)."""
    shown: dict[str, Any] = {
        "name": channel.name,
        "type": channel.type,
        "kinds": list(channel.kinds or []),
        "decisions": bool(channel.decisions),
        "createdAt": iso(channel.created_at),
        "lastSentAt": iso(channel.last_sent_at) if channel.last_sent_at else None,
        "lastError": channel.last_error,
        "lastErrorAt": iso(channel.last_error_at) if channel.last_error_at else None,
    }
    if channel.type == ChannelType.URL:
        shown["urlSet"] = bool(channel.url)
        shown["service"] = transports.service_of(channel.url or "")
    return shown
