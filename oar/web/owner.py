"""The owner API (docs/owner-api.md): everything a person can do on the page, as JSON.

Each route reads the request, calls the owner service (`oar.owner`) and answers with its
result; the service holds the checks and the texts.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from oar.core.errors import invalid
from oar.core.fields import unstorable_text
from oar.owner import conversations, groups, inbox, providers, schedules, settings, subscriptions
from oar.web import runtime
from oar.web.auth import require_owner

blueprint = Blueprint("owner", __name__, url_prefix="/api/v1/owner")


@blueprint.before_request
def owner_only() -> None:
    require_owner(runtime().config)


def body() -> dict[str, Any]:
    try:
        payload = request.get_json(force=True, silent=True)
    except RecursionError:  # nested deeper than the JSON parser goes
        payload = None
    if payload is None and not request.get_data():
        return {}
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object. Nothing was changed.")
    if unstorable_text(payload):
        raise invalid(
            "The body holds text the relay cannot store (a NUL character or a lone surrogate such as \\ud800). "
            "Nothing was changed."
        )
    return payload


def ok(**fields: Any) -> Response:
    return jsonify({"ok": True, **fields})


# Settings -------------------------------------------------------------------------------


@blueprint.get("/settings")
def get_settings() -> ResponseReturnValue:
    return ok(settings=settings.read_settings(runtime()))


@blueprint.patch("/settings")
def patch_settings() -> ResponseReturnValue:
    return ok(settings=settings.change_settings(runtime(), body()))


# Sessions -------------------------------------------------------------------------------


@blueprint.post("/sessions")
def create_session() -> ResponseReturnValue:
    """A conversation of the user's, and the agent token its agent uses."""
    session, token, message = conversations.start_conversation(runtime(), body())
    view = conversations.session_view(session)
    return ok(session=view, token=token, message_id=message.id if message else None), 201


@blueprint.get("/sessions")
def list_sessions() -> ResponseReturnValue:
    return ok(sessions=conversations.list_sessions(runtime()))


@blueprint.get("/sessions/<session_id>")
def read_session(session_id: str) -> ResponseReturnValue:
    session, messages = conversations.read_session(runtime(), session_id)
    return ok(session=conversations.session_view(session), messages=messages)


@blueprint.post("/sessions/<session_id>/messages")
def write_message(session_id: str) -> ResponseReturnValue:
    message = conversations.write_as_user(runtime(), session_id, body())
    return ok(message_id=message.id, session=message.session_id), 201


@blueprint.post("/sessions/<session_id>/tokens")
def new_token(session_id: str) -> ResponseReturnValue:
    session, token = conversations.issue_token(runtime(), session_id)
    return ok(token=token, session=session.id), 201


@blueprint.patch("/sessions/<session_id>")
def change_session(session_id: str) -> ResponseReturnValue:
    session = conversations.change_session_settings(runtime(), session_id, body())
    return ok(session=conversations.session_view(session))


@blueprint.post("/sessions/<session_id>/archive")
def archive_session(session_id: str) -> ResponseReturnValue:
    session = conversations.archive(runtime(), session_id)
    return ok(archived=True, session=session.id)


@blueprint.delete("/sessions/<session_id>")
def delete_session(session_id: str) -> ResponseReturnValue:
    session = conversations.delete(runtime(), session_id)
    return ok(deleted=True, session=session.id)


# Inbox ----------------------------------------------------------------------------------


@blueprint.get("/inbox")
def list_inbox() -> ResponseReturnValue:
    """Every pending approval card and question, across sessions."""
    return ok(**inbox.inbox(runtime()))


@blueprint.post("/cards/<card_id>")
def decide_card(card_id: str) -> ResponseReturnValue:
    """The owner's Allow or Deny on an approval card."""
    return ok(card=inbox.decide_card(runtime(), card_id, body()))


@blueprint.post("/questions/<question_id>")
def answer_question(question_id: str) -> ResponseReturnValue:
    """The owner answers or dismisses a question card (ask_user or ask)."""
    return ok(question=inbox.answer_question(runtime(), question_id, body()))


# Groups ---------------------------------------------------------------------------------


@blueprint.get("/groups")
def list_groups() -> ResponseReturnValue:
    return ok(groups=groups.list_groups(runtime()))


@blueprint.post("/groups")
def create_group() -> ResponseReturnValue:
    return ok(group=groups.create_group(runtime(), body())), 201


@blueprint.patch("/groups/<group_id>")
def change_group(group_id: str) -> ResponseReturnValue:
    return ok(group=groups.change_group(runtime(), group_id, body()))


@blueprint.delete("/groups/<group_id>")
def dissolve_group(group_id: str) -> ResponseReturnValue:
    """Dissolve: the members stay, ungrouped."""
    group = groups.dissolve_group(runtime(), group_id)
    return ok(dissolved=True, group=group.id)


# Providers ------------------------------------------------------------------------------


@blueprint.get("/providers")
def list_providers() -> ResponseReturnValue:
    return ok(providers=providers.list_providers(runtime()))


@blueprint.get("/providers/<name>")
def get_provider(name: str) -> ResponseReturnValue:
    return ok(provider=providers.read_provider(runtime(), name))


@blueprint.put("/providers/<name>")
def put_provider(name: str) -> ResponseReturnValue:
    """Create or replace a provider's configuration; models are discovered when not listed."""
    row, note = providers.save_provider(runtime(), name, body())
    fields: dict[str, Any] = {"provider": providers.stored_view(row)}
    if note:
        fields["modelNote"] = note
    return ok(**fields)


@blueprint.delete("/providers/<name>")
def delete_provider(name: str) -> ResponseReturnValue:
    providers.delete_provider(runtime(), name)
    return ok(deleted=True, provider=name)


# Schedules (the page's ⏰ list) ------------------------------------------------------------


@blueprint.get("/schedules")
def list_schedules() -> ResponseReturnValue:
    """Every active schedule, and those ended within the hour (docs/schedules.md)."""
    return ok(schedules=schedules.list_schedules(runtime()))


@blueprint.delete("/schedules/<schedule_id>")
def cancel_schedule(schedule_id: str) -> ResponseReturnValue:
    """The ⏰ list's Cancel: the schedule ends with endReason `unscheduled`."""
    ended, row = schedules.end_schedule(runtime(), schedule_id)
    return ok(ended=ended, schedule=schedules.schedule_view(row))


# Subscriptions (the page's "watching N sessions" chips) ------------------------------------


@blueprint.get("/subscriptions")
def list_subscriptions() -> ResponseReturnValue:
    """Every active subscription on this relay, with its watcher."""
    return ok(subscriptions=subscriptions.list_subscriptions(runtime()))


@blueprint.delete("/subscriptions/<subscription_id>")
def unsubscribe(subscription_id: str) -> ResponseReturnValue:
    """The page's Unsubscribe: the subscription ends with endReason `unsubscribed` (docs/events.md#lifetime)."""
    ended, row = subscriptions.end_subscription(runtime(), subscription_id)
    return ok(ended=ended, subscription=subscriptions.subscription_view(row))
