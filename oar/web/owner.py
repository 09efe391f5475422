"""The owner API (docs/owner-api.md): everything a person can do on the page, as JSON.

Each route reads the request, calls the owner service (`oar.owner`) and answers with its
result; the service holds the checks and the texts.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from oar.core import settings as relay_settings
from oar.core.errors import invalid
from oar.core.fields import refuse_unstorable
from oar.notifications import channels as notification_channels
from oar.notifications import webpush
from oar.owner import (
    conversations,
    groups,
    inbox,
    notifications,
    providers,
    schedules,
    settings,
    signins,
    subscriptions,
    team_runs,
)
from oar.providers import provider_settings
from oar.web import runtime
from oar.web.auth import require_owner
from oar.web.bodies import json_body
from oar.web.described import MAYBE_TEXT, OBJECT, OBJECTS, OWNER, TEXT, TEXTS, Operation, described

blueprint = Blueprint("owner", __name__, url_prefix="/api/v1/owner")


@blueprint.before_request
def owner_only() -> None:
    require_owner(runtime().config)


def body() -> dict[str, Any]:
    payload = json_body()
    if payload is None and not request.get_data():
        return {}
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object. Nothing was changed.")
    refuse_unstorable(payload, "The body holds", "Nothing was changed.")
    return payload


def ok(**fields: Any) -> Response:
    return jsonify({"ok": True, **fields})


def owner(summary: str, **fields: Any) -> Operation:
    """An owner API route for the OpenAPI document: the owner token, and 400 for a refused body
    or argument, 404 for an unknown id."""
    errors = (400, 404, *fields.pop("errors", ()))
    return Operation(summary=summary, caller=OWNER, tag="owner", errors=errors, **fields)


COUNT = {"type": "integer"}


# Settings -------------------------------------------------------------------------------


@blueprint.get("/settings")
@described(owner("Every setting, stored or default", answer={"settings": OBJECT}))
def get_settings() -> ResponseReturnValue:
    return ok(settings=settings.read_settings(runtime()))


@blueprint.patch("/settings")
@described(owner("Change one or more settings", body=relay_settings.FIELDS, answer={"settings": OBJECT}))
def patch_settings() -> ResponseReturnValue:
    return ok(settings=settings.change_settings(runtime(), body()))


# Sign-ins of the page ---------------------------------------------------------------------


@blueprint.delete("/sign-ins")
@described(owner("Sign every browser out of the page (sign out everywhere)", answer={"signedOut": COUNT}))
def sign_out_everywhere() -> ResponseReturnValue:
    """End every sign-in of the owner's page: each browser's next page asks for the owner token."""
    return ok(signedOut=signins.end_all())


# Sessions -------------------------------------------------------------------------------


@blueprint.post("/sessions")
@described(owner(
    "Start a conversation: the session and its agent token",
    body=conversations.NEW_SESSION, status=201, errors=(403, 409),
    answer={"session": OBJECT, "token": TEXT, "message_id": MAYBE_TEXT},
))
def create_session() -> ResponseReturnValue:
    """A conversation of the user's, and the agent token its agent uses."""
    session, token, message = conversations.start_conversation(runtime(), body())
    view = conversations.session_view(session)
    return ok(session=view, token=token, message_id=message.id if message else None), 201


@blueprint.get("/sessions")
@described(owner("Every session not deleted, most recently active first", answer={"sessions": OBJECTS}))
def list_sessions() -> ResponseReturnValue:
    return ok(sessions=conversations.list_sessions(runtime()))


@blueprint.get("/sessions/<session_id>")
@described(owner("A session and its newest messages", answer={"session": OBJECT, "messages": OBJECTS}))
def read_session(session_id: str) -> ResponseReturnValue:
    session, messages = conversations.read_session(runtime(), session_id)
    return ok(session=conversations.session_view(session), messages=messages)


@blueprint.post("/sessions/<session_id>/messages")
@described(owner(
    "Write in the conversation as the user",
    body=conversations.NEW_MESSAGE, status=201, answer={"message_id": TEXT, "session": TEXT},
))
def write_message(session_id: str) -> ResponseReturnValue:
    message = conversations.write_as_user(runtime(), session_id, body())
    return ok(message_id=message.id, session=message.session_id), 201


@blueprint.post("/sessions/<session_id>/tokens")
@described(owner("A new agent token for the session (shown once)", status=201, answer={"token": TEXT, "session": TEXT}))
def new_token(session_id: str) -> ResponseReturnValue:
    session, token = conversations.issue_token(runtime(), session_id)
    return ok(token=token, session=session.id), 201


@blueprint.post("/tokens/revoke")
@described(owner("Revoke one agent token, given in the body", body=conversations.TOKEN_TO_REVOKE,
                 answer={"revoked": {"type": "boolean"}, "session": TEXT}))
def revoke_token() -> ResponseReturnValue:
    """Revoke the agent token in the body: its next call is 401; the session's other tokens stay."""
    session = conversations.revoke_given_token(runtime(), body())
    return ok(revoked=True, session=session.id)


@blueprint.delete("/sessions/<session_id>/tokens")
@described(owner("Revoke every agent token of the session", answer={"revoked": COUNT, "session": TEXT}))
def revoke_tokens(session_id: str) -> ResponseReturnValue:
    """Revoke every agent token of the session: each one's next call is 401."""
    session, revoked = conversations.revoke_tokens(runtime(), session_id)
    return ok(revoked=revoked, session=session.id)


@blueprint.patch("/sessions/<session_id>")
@described(owner(
    "Change a session's title, mode, group, switch and remembered Allows",
    body=conversations.SESSION_CHANGES, answer={"session": OBJECT},
))
def change_session(session_id: str) -> ResponseReturnValue:
    session = conversations.change_session_settings(runtime(), session_id, body())
    return ok(session=conversations.session_view(session))


@blueprint.post("/sessions/<session_id>/archive")
@described(owner("Archive a session", answer={"archived": {"const": True}, "session": TEXT}))
def archive_session(session_id: str) -> ResponseReturnValue:
    session = conversations.archive(runtime(), session_id)
    return ok(archived=True, session=session.id)


@blueprint.delete("/sessions/<session_id>")
@described(owner("Delete a session", answer={"deleted": {"const": True}, "session": TEXT}))
def delete_session(session_id: str) -> ResponseReturnValue:
    session = conversations.delete(runtime(), session_id)
    return ok(deleted=True, session=session.id)


# Inbox ----------------------------------------------------------------------------------


@blueprint.get("/inbox")
@described(owner("Every pending approval card and question", answer={"cards": OBJECTS, "questions": OBJECTS}))
def list_inbox() -> ResponseReturnValue:
    """Every pending approval card and question, across sessions."""
    return ok(**inbox.inbox(runtime()))


@blueprint.post("/cards/<card_id>")
@described(owner("Allow or Deny an approval card", body=inbox.DECISION, answer={"card": OBJECT}))
def decide_card(card_id: str) -> ResponseReturnValue:
    """The owner's Allow or Deny on an approval card."""
    return ok(card=inbox.decide_card(runtime(), card_id, body()))


@blueprint.post("/questions/<question_id>")
@described(owner("Answer or dismiss a question card", body=inbox.ANSWER, answer={"question": OBJECT}))
def answer_question(question_id: str) -> ResponseReturnValue:
    """The owner answers or dismisses a question card (ask_user or ask)."""
    return ok(question=inbox.answer_question(runtime(), question_id, body()))


# Groups ---------------------------------------------------------------------------------


@blueprint.get("/groups")
@described(owner("Every group not dissolved, in the owner's order", answer={"groups": OBJECTS}))
def list_groups() -> ResponseReturnValue:
    return ok(groups=groups.list_groups(runtime()))


@blueprint.post("/groups")
@described(owner("Create a group", body=groups.NEW_GROUP, status=201, answer={"group": OBJECT}))
def create_group() -> ResponseReturnValue:
    return ok(group=groups.create_group(runtime(), body())), 201


@blueprint.patch("/groups/<group_id>")
@described(owner("Rename a group or move it in the order", body=groups.GROUP_CHANGES, answer={"group": OBJECT}))
def change_group(group_id: str) -> ResponseReturnValue:
    return ok(group=groups.change_group(runtime(), group_id, body()))


@blueprint.delete("/groups/<group_id>")
@described(owner("Dissolve a group; its members stay, ungrouped", answer={"dissolved": {"const": True}, "group": TEXT}))
def dissolve_group(group_id: str) -> ResponseReturnValue:
    """Dissolve: the members stay, ungrouped."""
    group = groups.dissolve_group(runtime(), group_id)
    return ok(dissolved=True, group=group.id)


# Providers ------------------------------------------------------------------------------


@blueprint.get("/providers")
@described(owner("Every configured provider", answer={"providers": OBJECTS}))
def list_providers() -> ResponseReturnValue:
    return ok(providers=providers.list_providers(runtime()))


@blueprint.get("/providers/<name>")
@described(owner("One provider's configuration (never its API key)", answer={"provider": OBJECT}))
def get_provider(name: str) -> ResponseReturnValue:
    return ok(provider=providers.read_provider(runtime(), name))


@blueprint.put("/providers/<name>")
@described(owner(
    "Create or replace a provider's configuration",
    body=provider_settings.FIELDS, answer={"provider": OBJECT, "modelNote": TEXT},
))
def put_provider(name: str) -> ResponseReturnValue:
    """Create or replace a provider's configuration; models are discovered when not listed."""
    row, note = providers.save_provider(runtime(), name, body())
    fields: dict[str, Any] = {"provider": providers.stored_view(row)}
    if note:
        fields["modelNote"] = note
    return ok(**fields)


@blueprint.delete("/providers/<name>")
@described(owner("Delete a provider's configuration", answer={"deleted": {"const": True}, "provider": TEXT}))
def delete_provider(name: str) -> ResponseReturnValue:
    providers.delete_provider(runtime(), name)
    return ok(deleted=True, provider=name)


# Schedules (the page's ⏰ list) ------------------------------------------------------------


@blueprint.get("/schedules")
@described(owner("Every active schedule, and those ended within the hour", answer={"schedules": OBJECTS}))
def list_schedules() -> ResponseReturnValue:
    """Every active schedule, and those ended within the hour (docs/schedules.md)."""
    return ok(schedules=schedules.list_schedules(runtime()))


@blueprint.delete("/schedules/<schedule_id>")
@described(owner("Cancel a schedule", answer={"ended": {"type": "boolean"}, "schedule": OBJECT}))
def cancel_schedule(schedule_id: str) -> ResponseReturnValue:
    """The ⏰ list's Cancel: the schedule ends with endReason `unscheduled`."""
    ended, row = schedules.end_schedule(runtime(), schedule_id)
    return ok(ended=ended, schedule=schedules.schedule_view(row))


# Subscriptions (the page's "watching N sessions" chips) ------------------------------------


@blueprint.get("/subscriptions")
@described(owner("Every active subscription, with its watcher", answer={"subscriptions": OBJECTS}))
def list_subscriptions() -> ResponseReturnValue:
    """Every active subscription on this relay, with its watcher."""
    return ok(subscriptions=subscriptions.list_subscriptions(runtime()))


@blueprint.delete("/subscriptions/<subscription_id>")
@described(owner("End a subscription", answer={"ended": {"type": "boolean"}, "subscription": OBJECT}))
def unsubscribe(subscription_id: str) -> ResponseReturnValue:
    """The page's Unsubscribe: the subscription ends with endReason `unsubscribed` (docs/events.md#lifetime)."""
    ended, row = subscriptions.end_subscription(runtime(), subscription_id)
    return ok(ended=ended, subscription=subscriptions.subscription_view(row))


# Team runs (docs/team-runs.md#the-owner-api) ------------------------------------------------


@blueprint.get("/team-runs")
@described(owner("Every team run, newest first, with its task counts", answer={"runs": OBJECTS}))
def list_team_runs() -> ResponseReturnValue:
    return ok(runs=team_runs.list_runs(runtime()))


@blueprint.get("/team-runs/<run_id>")
@described(owner("A team run: its board by status, messages, artifacts with reviews, and memory",
                 answer={"run": OBJECT}))
def read_team_run(run_id: str) -> ResponseReturnValue:
    return ok(run=team_runs.run_view(runtime(), run_id))


@blueprint.post("/team-runs/memory/export")
@described(owner("Write the team memory as .relay/memory/*.md files under a folder",
                 body=team_runs.MEMORY_FOLDER, answer={"folder": TEXT, "files": TEXTS}))
def export_team_memory() -> ResponseReturnValue:
    folder, files = team_runs.export_memory(runtime(), body())
    return ok(folder=folder, files=files)


@blueprint.post("/team-runs/memory/import")
@described(owner("Read the team memory from a folder's .relay/memory/*.md files",
                 body=team_runs.MEMORY_FOLDER, answer={"folder": TEXT, "imported": TEXTS, "skipped": TEXTS}))
def import_team_memory() -> ResponseReturnValue:
    folder, found = team_runs.import_memory(runtime(), body())
    return ok(folder=folder, imported=found.imported, skipped=found.skipped)
# Notification channels (docs/notifications.md) ------------------------------------------------


@blueprint.get("/notifications")
@described(owner("Every notification channel (never a URL)", answer={"channels": OBJECTS}))
def list_notification_channels() -> ResponseReturnValue:
    return ok(channels=notifications.list_channels(runtime()))


@blueprint.get("/notifications/<name>")
@described(owner("One notification channel, its last error and its newest notifications (never its URL)",
                 answer={"channel": OBJECT, "recent": OBJECTS}))
def get_notification_channel(name: str) -> ResponseReturnValue:
    channel, recent = notifications.read_channel(runtime(), name)
    return ok(channel=channel, recent=recent)


@blueprint.put("/notifications/<name>")
@described(owner("Create or replace a notification channel: its type, kinds and URL (write-only)",
                 body=notification_channels.FIELDS, answer={"channel": OBJECT}))
def put_notification_channel(name: str) -> ResponseReturnValue:
    return ok(channel=notifications.save_channel(runtime(), name, body()))


@blueprint.delete("/notifications/<name>")
@described(owner("Delete a notification channel and what it still had to send",
                 answer={"deleted": {"const": True}, "channel": TEXT}))
def delete_notification_channel(name: str) -> ResponseReturnValue:
    notifications.delete_channel(runtime(), name)
    return ok(deleted=True, channel=name)


@blueprint.post("/notifications/<name>/test")
@described(owner("Send a test notification through the channel (queued: it goes out at once)",
                 answer={"queued": {"const": True}, "notification": COUNT}))
def test_notification_channel(name: str) -> ResponseReturnValue:
    return ok(queued=True, notification=notifications.test_channel(runtime(), name))


@blueprint.get("/push-subscriptions")
@described(owner("The relay's Web Push key and the subscribed browsers (never their endpoints)",
                 answer={"publicKey": TEXT, "subscriptions": OBJECTS}))
def list_push_subscriptions() -> ResponseReturnValue:
    return ok(**notifications.push_settings(runtime()))


@blueprint.post("/push-subscriptions")
@described(owner("Subscribe a browser to Web Push (its PushSubscription.toJSON())", body=webpush.FIELDS,
                 status=201, answer={"subscription": OBJECT}))
def add_push_subscription() -> ResponseReturnValue:
    return ok(subscription=notifications.subscribe_browser(runtime(), body())), 201


@blueprint.delete("/push-subscriptions/<subscription_id>")
@described(owner("Remove a browser's Web Push subscription", answer={"deleted": {"const": True}, "subscription": TEXT}))
def delete_push_subscription(subscription_id: str) -> ResponseReturnValue:
    notifications.unsubscribe_browser(runtime(), subscription_id)
    return ok(deleted=True, subscription=subscription_id)
