"""What the owner can be told, and the channels that tell it (docs/notifications.md#kinds)."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """A notification's kind: each channel lists the kinds it receives."""

    CARD_WAITING = "card_waiting"  # an approval card waits for Allow or Deny
    QUESTION_WAITING = "question_waiting"  # a question card (ask_user) or an ask waits for an answer
    REPLY_READY = "reply_ready"  # a reply is ready in a conversation the owner started
    PROVIDER_TROUBLE = "provider_trouble"  # a provider reached its monthly cap, or a turn failed
    # A paired relay stopped answering. Pairing (oar.federation) raises it once it exists;
    # nothing on this relay raises it yet.
    RELAY_LOST = "relay_lost"
    TEST = "test"  # the Settings page's and the owner API's test button (sent whatever the kinds)


class ChannelType(StrEnum):
    PAGE = "page"  # the owner's open page: a browser notification
    URL = "url"  # a notification URL for chat and push services, sent through Apprise
    WEBPUSH = "webpush"  # Web Push to every subscribed browser of the owner's, even with no page open


# What a channel may list (TEST is not listed: a test goes to the channel it tests).
CHOOSABLE = (Kind.CARD_WAITING, Kind.QUESTION_WAITING, Kind.REPLY_READY, Kind.PROVIDER_TROUBLE, Kind.RELAY_LOST)
# A channel that names no kinds receives these: "reply ready" is off by default, since a reply
# arrives after most prompts (docs/notifications.md#kinds).
DEFAULT_KINDS = (Kind.CARD_WAITING, Kind.QUESTION_WAITING, Kind.PROVIDER_TROUBLE, Kind.RELAY_LOST)
# Cards and questions keep an agent waiting: the owner's quiet hours hold them only when the
# owner says so (`notify_quiet_hours_hold_all`).
URGENT = (Kind.CARD_WAITING, Kind.QUESTION_WAITING, Kind.TEST)
# Kinds whose notification announces cards or questions that may be answered before it goes out.
ANSWERABLE = (Kind.CARD_WAITING, Kind.QUESTION_WAITING)
