"""What a notification offers to decide (docs/notifications.md#deciding-from-a-notification): the
decision links in a message, ntfy's action buttons, and a Web Push notification's actions.

Each is made as the notification is sent, one token per card or question and delivery (each
browser of a Web Push channel gets its own). A button never remembers an Allow: it allows the
one call (`allow_once`) where the card could remember; the decision page offers "Allow and
remember". A question's options become buttons when it takes one of them; a question taking
several, or free text alone, is answered on the page the link opens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oar.core import defaults
from oar.core.runtime import Runtime
from oar.notifications import decision_links
from oar.notifications.decision_links import Subject
from oar.notifications.models import Channel
from oar.notifications.outbox import excerpt

# Where a link's page is, and where a button posts its decision (both take no sign-in).
PAGE_PATH = "/decide/"
ACTION_PATH = "/api/v1/decide"
# A button's label, at most (ntfy and browsers cut longer ones themselves, less kindly).
LABEL_CHARS = 40
# What a button reads "open the page" as, when a question has more options than fit.
MORE = "More…"


@dataclass(frozen=True)
class Offer:
    """One card or question a notification offers to decide, with its own single-use token."""

    subject: Subject
    token: str
    page_url: str

    def buttons(self) -> list[tuple[dict[str, Any], str]]:
        """(what the button posts besides the token, its label): Allow and Deny for a card, a
        question's options when one of them answers it; none for anything else."""
        if self.subject.card is not None:
            if self.subject.card.stopped_waiting_at is not None:
                return []  # only an Allow that remembers would mean anything: the page offers it
            allow = "allow_once" if self.subject.rememberable else "allow"
            return [({"decision": allow}, "Allow"), ({"decision": "deny"}, "Deny")]
        question = self.subject.question
        if question is None or question.multi_select:
            return []
        return [({"option": index}, excerpt(option, LABEL_CHARS)) for index, option in enumerate(question.options or [])]


def offers_for(runtime: Runtime, channel: Channel, subject_ids: list[str], now: datetime) -> list[Offer]:
    """Links to the still-pending cards and questions of a notification that the owner lets be
    decided from one, each with a new token; none when the channel sends no decision links."""
    if not channel.decisions:
        return []
    offers = []
    for subject in decision_links.offerable(subject_ids, runtime.settings()):
        token = decision_links.mint(channel, subject, now)
        offers.append(Offer(subject, token, f"{runtime.config.base_url}{PAGE_PATH}{token}"))
    return offers


def message_text(body: str, offers: list[Offer], link: str | None) -> str:
    """A notification URL's message: the excerpt, the decision links, then the usual link."""
    lines = [body]
    if len(offers) == 1:
        lines.append(f"Decide without signing in: {offers[0].page_url}")
    elif offers:
        lines.append("Decide each without signing in:")
        lines += [offer.page_url for offer in offers]
    if link:
        lines.append(link)
    return "\n".join(lines)


def ntfy_extras(runtime: Runtime, offers: list[Offer]) -> dict[str, Any]:
    """ntfy's click URL and action buttons (ntfy's `http` actions, which POST the token to the
    relay from the owner's phone) for a notification offering one card or question; nothing
    for several (their links are in the message)."""
    if len(offers) != 1:
        return {}
    offer = offers[0]
    url = f"{runtime.config.base_url}{ACTION_PATH}"
    actions = [
        {"action": "http", "label": label, "url": url, "method": "POST", "clear": True,
         "headers": {"Content-Type": "application/json"}, "body": json.dumps({"token": offer.token, **posted})}
        for posted, label in fitting(offer.buttons(), defaults.DECISION_NTFY_BUTTONS)
    ]
    if len(offer.buttons()) > defaults.DECISION_NTFY_BUTTONS:
        actions.append({"action": "view", "label": MORE, "url": offer.page_url, "clear": False})
    # ASCII JSON: it travels in an HTTP header (X-Actions), which ntfy reads as JSON when it starts with "[".
    return {"click": offer.page_url, "actions": json.dumps(actions, ensure_ascii=True)} if actions else {"click": offer.page_url}


def fitting(buttons: list[tuple[dict[str, Any], str]], limit: int) -> list[tuple[dict[str, Any], str]]:
    """All the buttons when they fit; else the first `limit - 1`, the last place left for "More…"."""
    return buttons if len(buttons) <= limit else buttons[: limit - 1]


def push_fields(offers: list[Offer], inbox_link: str | None) -> dict[str, Any]:
    """What a Web Push notification adds for one card or question: the link opens its decision
    page, and its actions post the token (the service worker shows as many as the platform
    allows, `Notification.maxActions`, the last as "More…" when they do not all fit). Several
    cards or questions open the Inbox, as before."""
    if len(offers) != 1:
        return {"link": inbox_link}
    offer = offers[0]
    buttons = offer.buttons()[: defaults.DECISION_PUSH_OPTIONS]
    return {
        "link": offer.page_url,
        "token": offer.token,
        "actions": [{"action": action_name(posted), "title": label} for posted, label in buttons],
        "more": len(offer.buttons()) > len(buttons),
    }


def action_name(posted: dict[str, Any]) -> str:
    """A notification action's name, which the service worker turns back into what it posts:
    `allow`, `allow_once`, `deny`, or `option:<index>`."""
    return f"option:{posted['option']}" if "option" in posted else str(posted["decision"])
