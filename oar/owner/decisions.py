"""Deciding from a notification, without signing in (docs/notifications.md#deciding-from-a-notification):
what a decision link's page shows, and a decision given with a link's token.

The token is the credential: whoever holds the notification holds it, for one card or question,
once. A decision goes through the same owner service as the Inbox's (`oar.owner.inbox`), which
records how it was given: `link` from the link's page, `action` from a notification's own button,
with the channel the notification went through. Every refusal of a token — unknown, forged,
used, expired, its card decided another way, its channel or kind closed to links — is the one
answer `dead_link()`, and changes nothing; only bad input for a live link says what was wrong.
"""

from __future__ import annotations

from typing import Any

from oar.approvals import cards, questions
from oar.core.errors import ActionError, invalid, not_found, refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.models import Session
from oar.core.runtime import Runtime
from oar.core.statuses import DecidedVia
from oar.core.timeutil import iso, utcnow
from oar.notifications import decision_links
from oar.notifications.decision_links import LinkState, Subject
from oar.owner import inbox

NOTHING = "Nothing was changed."
FIELDS = {
    "token": Param("str", required=True, max_length=decision_links.MAX_TOKEN_CHARS,
                   description="the decision link's token, as the notification carried it"),
    "decision": Param("str", choices=cards.DECISIONS, description="an approval card's: allow, allow_once or deny"),
    "option": Param("int", minimum=0, maximum=999, description="a question's: the index of the option that answers it"),
    "choices": Param("list", items=Param("str"), description="a question's: the options that answer it"),
    "answer": Param("str", max_length=100_000, description="a question's: an answer in the owner's own words"),
}
REPLIES = ("decision", "option", "choices", "answer")


def dead_link() -> ActionError:
    """The one answer to every token that cannot decide anything (never which reason it was)."""
    return not_found(
        "This decision link decides nothing: it is unknown, used or expired, or what it was for was decided "
        f"already. {NOTHING}"
    )


def page(runtime: Runtime, token: str) -> dict[str, Any]:
    """What the link's page shows: the link's state, the card's or question's full context, how it
    was decided once it was, and the choices while the link is open."""
    link = decision_links.find(token)
    subject = decision_links.subject_of(link.subject) if link is not None else None
    state = decision_links.state_of(link, subject, runtime.settings(), utcnow())
    shown: dict[str, Any] = {"state": state, "relay": runtime.relay_name()}
    if subject is None or state == LinkState.UNKNOWN:
        return shown
    shown.update(context(subject), channel=link.channel_id if link is not None else None)
    if state == LinkState.OPEN:
        shown.update(token=token, choices=choices(subject))
    return shown


def context(subject: Subject) -> dict[str, Any]:
    """The card or question as the page shows it: who asks, for what, with which words, and its outcome."""
    if subject.card is not None:
        card = cards.shape(subject.card)
        return {"kind": "card", "card": card, "outcome": {
            "status": card["status"], "at": card["decidedAt"], "via": card["decidedVia"],
            "channel": card["decidedChannel"]}}
    question = subject.question
    if question is None:  # a Subject holds a card or a question
        return {}
    asker = Session.get_or_none(Session.id == question.asker_session_id)
    return {"kind": "question", "question": {
        **questions.shape(question), "session": {"id": question.session_id, "title": question.session.title},
        "askedBy": asker.title if asker is not None else None, "recommendation": question.recommendation,
        "detail": question.detail, "createdAt": iso(question.created_at),
    }, "outcome": {"status": question.status, "at": iso(question.answered_at) if question.answered_at else None,
                   "via": question.decided_via, "channel": question.decided_channel, "answer": question.answer}}


def choices(subject: Subject) -> list[tuple[str, str]]:
    """A card's decisions as (value, label): Allow, Allow and remember where the card may
    remember (a card whose caller stopped waiting offers only the Allow that remembers), Deny."""
    if subject.card is None:
        return []
    if not subject.rememberable:
        return [("allow", "Allow"), ("deny", "Deny")]
    remember = ("allow", "Allow and remember")
    if subject.card.stopped_waiting_at is not None:
        return [remember, ("deny", "Deny")]
    return [("allow_once", "Allow once"), remember, ("deny", "Deny")]


@refusals_ending(NOTHING)
def decide(runtime: Runtime, payload: dict[str, Any], via: DecidedVia) -> dict[str, Any]:
    """Decide the link's card or answer its question once: `payload` is the token and one of
    `decision` (a card), `option`, `choices` or `answer` (a question). Returns the outcome."""
    args, _ = check_fields("decide", FIELDS, payload, strict=True, nothing=NOTHING)
    given = [name for name in REPLIES if name in args]
    if len(given) != 1:
        raise invalid(f"decide takes the token and one of decision (a card), option, choices or answer (a question). {NOTHING}")
    link = decision_links.find(args["token"])
    subject = decision_links.subject_of(link.subject) if link is not None else None
    now = utcnow()
    if link is None or subject is None or decision_links.state_of(link, subject, runtime.settings(), now) != LinkState.OPEN:
        raise dead_link()
    reply = _checked_reply(subject, args)
    if not decision_links.claim(link, now):
        raise dead_link()
    try:
        if subject.card is not None:
            inbox.decide(runtime, subject.id, reply["decision"], via, link.channel_id)
        else:
            inbox.answer_question(runtime, subject.id, reply, via, link.channel_id)
    except ActionError as error:
        if error.code == "REMOTE_RELAY_INVALID_INPUT":
            raise dead_link() from None  # decided another way between the look and the claim
        raise
    fresh = decision_links.subject_of(subject.id)
    outcome: dict[str, Any] = context(fresh).get("outcome", {}) if fresh is not None else {}
    return outcome


def _checked_reply(subject: Subject, args: dict[str, Any]) -> dict[str, Any]:
    """What the owner gave, checked against the card or question before the link is used up."""
    if subject.card is not None:
        if "decision" not in args:
            raise invalid(f"This link is for an approval card: give decision (allow, allow_once or deny). {NOTHING}")
        return {"decision": args["decision"]}
    question = subject.question
    if question is None:  # a Subject holds a card or a question
        raise dead_link()
    if "decision" in args:
        raise invalid(f"This link is for a question: give option, choices or answer. {NOTHING}")
    if "option" in args:
        options = question.options or []
        if args["option"] >= len(options):
            raise invalid(f"option must be the index of one of the question's {len(options)} options. {NOTHING}")
        reply: dict[str, Any] = {"choices": [options[args["option"]]]}
    elif "choices" in args:
        reply = {"choices": args["choices"]}
    else:
        reply = {"answer": args["answer"].strip()}
    questions.checked_answer(question, reply.get("answer"), reply.get("choices"))
    return reply

