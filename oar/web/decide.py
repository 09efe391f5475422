"""Deciding from a notification (docs/notifications.md#deciding-from-a-notification): the page a
decision link opens and the POSTs that decide, all without signing in.

- `GET /decide/<token>` shows the card or question in full and its choices; it never decides
  (link previews and scanners open links);
- `POST /decide` is that page's form: the token travels in the form's body, and it is the
  credential — there is no cookie to forge a request with, so no CSRF token besides it;
- `POST /api/v1/decide` (JSON) is what a notification's own buttons post: a Web Push action
  from the relay's service worker, an ntfy button from the owner's phone.

Every request counts against its client address's budget (`DECISION_REQUESTS_PER_WINDOW`); past
it the answer is 429 and nothing is looked at. Handlers parse, call the owner service
(`oar.owner.decisions`), and answer.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from flask.typing import ResponseReturnValue

from oar.core import defaults
from oar.core.errors import ActionError, invalid
from oar.core.fields import refuse_unstorable
from oar.core.ratelimit import AddressLimiter
from oar.core.statuses import DecidedVia
from oar.notifications.decision_links import LinkState
from oar.owner import decisions
from oar.web import runtime
from oar.web.bodies import json_body
from oar.web.described import ANYONE, OBJECT, Operation, described

blueprint = Blueprint("decide", __name__)

# A link's page is reached from a notification: it tells no other site where it was (the token
# is in its address) and asks search engines to keep it out.
PAGE_HEADERS = {"Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex, nofollow"}
# The HTTP status of each state of a link's page.
PAGE_STATUS = {LinkState.OPEN: 200, LinkState.UNKNOWN: 404}
GONE = 410


def wait_before_next() -> int | None:
    """Seconds this client address must wait, or None: this request is counted and goes on."""
    relay = runtime()
    limiter = AddressLimiter(relay.redis, relay.config.namespace, allowed=defaults.DECISION_REQUESTS_PER_WINDOW,
                             window=defaults.DECISION_REQUEST_WINDOW_SECONDS)
    return limiter.take(request.remote_addr or "unknown")


def too_many(wait: int) -> ActionError:
    return ActionError(
        "REMOTE_RELAY_RATE_LIMITED",
        f"Too many requests to decision links from this address. Try again in {wait} s; nothing was looked at.",
        retryAfterSeconds=wait,
    )


def page(status: int, **shown: Any) -> Response:
    response = Response(render_template("decide.html", **shown), status=status)
    response.headers.update(PAGE_HEADERS)
    return response


@blueprint.get("/decide/<token>")
def decision_page(token: str) -> ResponseReturnValue:
    wait = wait_before_next()
    if wait is not None:
        refusal = page(429, state="limited", message=too_many(wait).message)
        refusal.headers["Retry-After"] = str(wait)
        return refusal
    shown = decisions.page(runtime(), token)
    return page(PAGE_STATUS.get(shown["state"], GONE), **shown)


@blueprint.post("/decide")
def decide_on_page() -> ResponseReturnValue:
    """The link's page's form: a card's decision, or a question's option(s) or answer."""
    wait = wait_before_next()
    if wait is not None:
        refusal = page(429, state="limited", message=too_many(wait).message)
        refusal.headers["Retry-After"] = str(wait)
        return refusal
    form = request.form
    payload: dict[str, Any] = {"token": form.get("token", "")}
    if form.get("decision"):
        payload["decision"] = form["decision"]
    elif form.getlist("choices") or form.get("choice"):
        payload["choices"] = form.getlist("choices") or [form["choice"]]
    else:
        payload["answer"] = form.get("answer", "")
    try:
        refuse_unstorable(payload, "The form holds", "Nothing was changed.", form=True)
        outcome = decisions.decide(runtime(), payload, DecidedVia.LINK)
    except ActionError as error:
        if error.code == "REMOTE_RELAY_NOT_FOUND":
            return page(404, state="dead", message=error.message, relay=runtime().relay_name())
        shown = decisions.page(runtime(), payload["token"])
        return page(error.status, **shown, error=error.message)
    return page(200, state="done", outcome=outcome, relay=runtime().relay_name())


@blueprint.post("/api/v1/decide")
@described(Operation(
    summary="Decide an approval card or answer a question with a decision link's token (a notification's buttons)",
    caller=ANYONE, tag="decisions", body=decisions.FIELDS, answer={"outcome": OBJECT}, errors=(400, 404, 429),
))
def decide_by_action() -> ResponseReturnValue:
    """A notification's button: `{token, decision}` for a card, `{token, option}` (or `choices`,
    `answer`) for a question; JSON, or a form."""
    wait = wait_before_next()
    if wait is not None:
        raise too_many(wait)
    body = request.form.to_dict() if request.form else json_body()
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object: {token, decision} or {token, option}. Nothing was changed.")
    refuse_unstorable(body, "The body holds", "Nothing was changed.")
    return jsonify({"ok": True, "outcome": decisions.decide(runtime(), body, DecidedVia.ACTION)})
