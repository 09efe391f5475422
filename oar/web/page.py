"""The owner's page (docs/owner-api.md#the-page): sessions, a session and the Inbox, as HTML; its
blueprint, sign-in guard and the form helpers its other modules (page_settings, page_tokens, …) share.

Server-rendered Jinja templates (autoescaped: agent-written text is never marked safe) and
a little JavaScript that polls `/live/…` about once a second. Every form carries a CSRF
token and every action calls the same owner service function (`oar.owner`) as the owner API's route for it.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from flask import (
    Blueprint,
    Response,
    flash,
    has_request_context,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from oar.core.errors import ActionError, http_error
from oar.core.fields import refuse_unstorable
from oar.core.numbers import INT64_MAX, read_whole
from oar.core.statuses import DecidedVia
from oar.core.words import plural
from oar.owner import conversations, inbox, schedules, subscriptions
from oar.sessions import sessions
from oar.web import page_auth, page_filters, page_views, runtime
from oar.web.auth import is_owner_token

blueprint = Blueprint("page", __name__)

# Endpoints an unsigned visitor may use: the sign-in form and its POST, and the service worker
# (a static script a browser fetches again on its own).
PUBLIC = {"page.index", "page.sign_in", "page.service_worker"}
LIVE = {
    "page.live_session", "page.live_overview", "page.live_inbox", "page.live_notifications", "page.live_team_run",
    "page.live_team_runs",
}

@blueprint.record_once
def setup(state: Any) -> None:
    page_auth.install(state.app)
    state.app.add_template_filter(page_filters.ago)
    state.app.add_template_filter(page_filters.when)
    state.app.add_template_filter(plural)


@blueprint.before_request
def guard() -> ResponseReturnValue | None:
    """CSRF on every POST, then the sign-in check (JSON 401 for the live endpoints)."""
    if request.method == "POST":
        page_auth.check_csrf()
    if request.endpoint in PUBLIC or page_auth.signed_in(runtime().config):
        return None
    if request.endpoint in LIVE:
        # The documented error shape (docs/errors.md), as every other JSON refusal.
        refusal = ActionError("REMOTE_RELAY_UNAUTHORIZED", "Not signed in: sign in on the page first. Nothing was sent.")
        return jsonify(refusal.to_dict()), refusal.status
    return redirect(url_for("page.index"))


@blueprint.app_context_processor
def page_context() -> dict[str, Any]:
    if not has_request_context() or not page_auth.is_page_path(request.path):
        return {}
    context: dict[str, Any] = {"csrf_token": page_auth.csrf_token, "relay_name": runtime().relay_name,
                               "signed_in": page_auth.signed_in(runtime().config), "page_kind": None}
    if context["signed_in"]:
        count = page_views.inbox_count()
        context.update(inbox_count=count, nav_version=page_views.digest(count))
    return context


# Pages show tokens and agent-written text: no caching, no framing, scripts only from here.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@blueprint.after_app_request
def security_headers(response: Response) -> Response:
    if page_auth.is_page_path(request.path) and not request.path.startswith("/static/"):
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
    return response


# Helpers ---------------------------------------------------------------------------------------


def form_text(name: str) -> str:
    return request.form.get(name, "")


def payload_of(fields: dict[str, Any]) -> dict[str, Any]:
    """A form as the JSON body the owner API would get: empty fields are left out."""
    payload = {key: value for key, value in fields.items() if value not in (None, "", [])}
    refuse_unstorable(payload, "The form holds", "Nothing was changed.", form=True)
    return payload


def same_site_path(target: str) -> bool:
    r"""Whether a form's `next` is a path on this site (docs/owner-api.md#the-page).

    Browsers drop tabs and newlines from a URL, read `\` as `/` and fold look-alike slashes, so
    `/\t/evil.example` leads off-site as `//evil.example` does: a path starts with one `/`, and
    neither it nor its NFKC form holds a second leading `/`, a `\`, a control character or a
    space. A carriage return would also break the Location header.
    """
    for text in (target, unicodedata.normalize("NFKC", target)):
        if not text.startswith("/") or text[1:2] == "/" or "\\" in text:
            return False
        if any(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in text):
            return False
    return True


def back(default: str) -> str:
    """Where a form returns to: its `next` field when that is a path on this site, else `default`."""
    target = request.form.get("next", "")
    return target if same_site_path(target) else default


def done(message: str, default: str) -> ResponseReturnValue:
    flash(message, "ok")
    return redirect(back(default), code=303)


def refused(error: ActionError, default: str) -> ResponseReturnValue:
    flash(error.message, "error")
    return redirect(back(default), code=303)


# Signing in --------------------------------------------------------------------------------


@blueprint.get("/")
def index() -> ResponseReturnValue:
    if not page_auth.signed_in(runtime().config):
        return render_template("sign_in.html")
    return sessions_list()


@blueprint.post("/")
def sign_in() -> ResponseReturnValue:
    """The owner token signs in; after too many wrong ones from an address, it waits first
    (docs/owner-api.md#signing-in)."""
    wait = page_auth.sign_in_wait()
    if wait is not None:
        error = f"Too many wrong owner tokens from this address. Try again in {wait} s; nothing was checked."
        return render_template("sign_in.html", error=error), 429, {"Retry-After": str(wait)}
    if is_owner_token(runtime().config, form_text("token").strip()):
        page_auth.sign_in_succeeded()
        page_auth.sign_in(runtime().config)
        return redirect(url_for("page.index"), code=303)
    page_auth.sign_in_failed()
    return render_template("sign_in.html", error="That is not the owner token of this relay. Try again."), 401


@blueprint.post("/sign-out")
def sign_out() -> ResponseReturnValue:
    page_auth.sign_out()
    return redirect(url_for("page.index"), code=303)


@blueprint.post("/sign-out/everywhere")
def sign_out_everywhere() -> ResponseReturnValue:
    page_auth.sign_out_everywhere()
    return redirect(url_for("page.index"), code=303)


# Sessions ------------------------------------------------------------------------------------


def sessions_list(status: int = 200, **extra: Any) -> ResponseReturnValue:
    archived = request.args.get("show") == "archived"
    data = page_views.overview(archived)
    return render_template(
        "sessions.html", archived=archived, providers=page_views.provider_choices(), page_kind="overview", **data,
        **extra,
    ), status


@blueprint.post("/sessions/new")
def new_session() -> ResponseReturnValue:
    values = {key: form_text(key).strip() for key in ("title", "provider", "model")}
    values["text"] = form_text("text")
    try:
        session, token, _message = conversations.start_conversation(runtime(), payload_of(values))
    except ActionError as error:
        return sessions_list(400, new_error=error.message, new_values=values)
    return render_template("created.html", session=session, token=token)


@blueprint.get("/sessions/<session_id>")
def session_page(session_id: str) -> ResponseReturnValue:
    session = sessions.resolve(session_id, runtime().relay_name())
    if session.id != session_id:  # a short id: the page lives at the full one
        return redirect(url_for("page.session_page", session_id=session.id))
    return render_template("session.html", page_kind="session", **page_views.session_page(session))


@blueprint.post("/sessions/<session_id>/messages")
def write(session_id: str) -> ResponseReturnValue:
    here = url_for("page.session_page", session_id=session_id)
    try:
        conversations.write_as_user(runtime(), session_id, payload_of({"text": form_text("text")}))
    except ActionError as error:
        return refused(error, here)
    return redirect(here + "#end", code=303)


@blueprint.post("/sessions/<session_id>/archive")
def archive(session_id: str) -> ResponseReturnValue:
    here = url_for("page.session_page", session_id=session_id)
    try:
        conversations.archive(runtime(), session_id)
    except ActionError as error:
        return refused(error, here)
    return done("Archived: its turn was stopped and queued prompts cancelled.", here)


@blueprint.post("/sessions/<session_id>/may-create")
def may_create(session_id: str) -> ResponseReturnValue:
    here = url_for("page.session_page", session_id=session_id)
    allowed = form_text("may_create_sessions") == "on"
    try:
        conversations.change_session_settings(runtime(), session_id, {"may_create_sessions": allowed})
    except ActionError as error:
        return refused(error, here)
    state = "may now start sessions" if allowed else "may no longer start sessions"
    return done(f"Agents in this conversation {state}.", here)


@blueprint.post("/sessions/<session_id>/agent-outside")
def agent_outside(session_id: str) -> ResponseReturnValue:
    """Whether the conversation's agent works outside the relay (docs/sessions.md#agents-outside-the-relay)."""
    here = url_for("page.session_page", session_id=session_id)
    chosen = form_text("agent_outside") == "on"
    try:
        conversations.change_session_settings(runtime(), session_id, {"agent_outside": chosen})
    except ActionError as error:
        return refused(error, here)
    said = "works outside the relay: what arrives waits for it" if chosen else "is the relay's: what waits runs on its provider"
    return done(f"Its agent {said}.", here)


@blueprint.post("/sessions/<session_id>/approvals")
def approvals(session_id: str) -> ResponseReturnValue:
    """The Allows remembered for this conversation's agent, granted ahead or revoked (docs/rules.md#when-a-card-is-asked)."""
    here = url_for("page.session_page", session_id=session_id)
    try:
        conversations.change_session_settings(runtime(), session_id, {"approvals": request.form.getlist("approvals")})
    except ActionError as error:
        return refused(error, here)
    return done("Saved what this conversation's agent may do without asking.", here)


# Questions and approval cards -------------------------------------------------------------------


@blueprint.post("/questions/<question_id>")
def answer(question_id: str) -> ResponseReturnValue:
    inbox_page = url_for("page.inbox")
    if form_text("dismiss"):
        fields: dict[str, Any] = {"dismiss": True}
    elif request.form.getlist("choices") or form_text("choice"):
        fields = {"choices": request.form.getlist("choices") or [form_text("choice")]}
    else:
        fields = {"answer": form_text("answer").strip()}
    try:
        inbox.answer_question(runtime(), question_id, payload_of(fields), via=DecidedVia.PAGE)
    except ActionError as error:
        return refused(error, inbox_page)
    return done("Dismissed." if fields.get("dismiss") else "Answered.", inbox_page)


@blueprint.post("/cards/<card_id>")
def decide(card_id: str) -> ResponseReturnValue:
    inbox_page = url_for("page.inbox")
    decision = form_text("decision")
    try:
        inbox.decide(runtime(), card_id, decision, via=DecidedVia.PAGE)
    except ActionError as error:
        return refused(error, inbox_page)
    return done("Denied." if decision == "deny" else "Allowed.", inbox_page)


@blueprint.get("/inbox", endpoint="inbox")
def inbox_view() -> ResponseReturnValue:
    return render_template("inbox.html", page_kind="inbox", **page_views.inbox())


# Watching and schedules -------------------------------------------------------------------------


@blueprint.post("/subscriptions/<subscription_id>/unsubscribe")
def unsubscribe(subscription_id: str) -> ResponseReturnValue:
    try:
        ended, row = subscriptions.end_subscription(runtime(), subscription_id)
    except ActionError as error:
        return refused(error, url_for("page.index"))
    return done(f"Unsubscribed {row.id}." if ended else f"{row.id} had already ended.", url_for("page.index"))


@blueprint.post("/schedules/<schedule_id>/cancel")
def cancel_schedule(schedule_id: str) -> ResponseReturnValue:
    try:
        ended, row = schedules.end_schedule(runtime(), schedule_id)
    except ActionError as error:
        return refused(error, url_for("page.index"))
    return done(f"Cancelled ⏰ {row.title}." if ended else f"{row.id} had already ended.", url_for("page.index"))


# Form values ------------------------------------------------------------------------------------


def whole_number(text: str) -> Any:
    """The form's text as a number when it is one (oar.core.numbers: ASCII digits, a sign allowed so
    that the check names the range; the white space a form field keeps around it dropped); else the
    text, which the check refuses by name."""
    number = read_whole(text.strip(), -INT64_MAX, INT64_MAX, signed=True)
    return text if number is None else number


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# Errors -----------------------------------------------------------------------------------------

CSRF_REFUSED = (
    "The form was refused: its security token (CSRF) was missing or did not match this browser's. "
    "Nothing was changed. Reload the page and try again."
)


def error_page(status: int, message: str, code: str) -> ResponseReturnValue:
    """A small HTML error page for page paths (JSON for the live endpoints, in the API's error
    shape: docs/errors.md); never a stack trace."""
    if request.path.startswith("/live/"):
        return jsonify({"ok": False, "code": code, "error": message}), status
    return render_template("error.html", status=status, message=message), status


def http_refusal(error: HTTPException) -> ActionError:
    """An HTTP error on the page's paths: the page's own sentence, the API's code and status."""
    if error.code == 400 and error.description == "csrf":
        return http_error(400, CSRF_REFUSED)
    messages = {
        404: "There is no such page on this relay.",
        405: "This page does not take that kind of request.",
        413: "The form was too large. Nothing was changed.",
    }
    return http_error(error.code or 500, messages.get(error.code or 0, f"{error.name}. Nothing was changed."))


def is_page_request() -> bool:
    """Whether the request is the page's (HTML errors) rather than the JSON API's."""
    return page_auth.is_page_path(request.path)
