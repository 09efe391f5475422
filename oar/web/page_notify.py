"""The page's notifications (docs/notifications.md#the-open-page): the live feed the open page
polls for its Inbox count and browser notifications, and the Settings page's channel forms.

Routes of the page's blueprint (its CSRF check and sign-in guard apply); each calls the owner
service (`oar.owner.notifications`, `oar.owner.settings`) as the owner API's route does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Response, jsonify, request, send_from_directory, url_for
from flask.typing import ResponseReturnValue

from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.numbers import whole_or_refuse
from oar.notifications.kinds import CHOOSABLE, ChannelType
from oar.owner import notifications, settings
from oar.web import runtime
from oar.web.page import blueprint, done, form_text, payload_of, refused

HERE = "page.settings_view"
STATIC = Path(__file__).resolve().parent / "static"
KIND_LABELS = {
    "card_waiting": "Approval cards waiting",
    "question_waiting": "Questions waiting",
    "reply_ready": "Replies ready (conversations I started)",
    "provider_trouble": "Provider capped or failing",
    "relay_lost": "Paired relay lost",
}


# What may be decided from a notification (the `notify_decide_kinds` setting), as the form names it.
DECIDE_KIND_LABELS = {
    "questions": "Questions",
    "loop": "Keep going after 30 prompts to other sessions (loop protection)",
    "mode": "Writes in ask or plan mode",
    "create_sessions": "Starting sessions",
    "watch_sessions": "Watching sessions",
    "change_other_sessions": "Changing sessions it did not start",
    "end_other_sessions": "Stopping or archiving sessions it did not start",
    "transfer": "Moving subscriptions (transfer_subscriptions)",
}


def here() -> str:
    return url_for(HERE) + "#notifications"


@blueprint.app_template_global()
def notification_settings() -> dict[str, Any]:
    """What the Settings page's Notifications section shows (never a channel's URL)."""
    stored = settings.read_settings(runtime())
    return {
        "channels": notifications.list_channels(runtime()),
        "kinds": [(kind.value, KIND_LABELS[kind]) for kind in CHOOSABLE],
        "types": [kind.value for kind in ChannelType],
        "quiet": stored.get("notify_quiet_hours") or {},
        "hold_all": stored.get("notify_quiet_hours_hold_all"),
        "push": notifications.push_settings(runtime()),
        "decide_kinds": [(kind, DECIDE_KIND_LABELS[kind]) for kind in defaults.NOTIFY_DECIDE_KINDS],
        "decide_chosen": stored.get("notify_decide_kinds") or [],
    }


@blueprint.get("/service-worker.js")
def service_worker() -> Response:
    """The service worker, at the site's root so that its scope is the whole page."""
    answer = send_from_directory(STATIC, "service-worker.js", mimetype="text/javascript", max_age=0)
    answer.headers["Service-Worker-Allowed"] = "/"
    return answer


@blueprint.post("/settings/push")
def subscribe_browser() -> ResponseReturnValue:
    """This browser's Web Push subscription, posted by page.js after the browser subscribed."""
    try:
        notifications.subscribe_browser(runtime(), payload_of({
            "endpoint": form_text("endpoint").strip(),
            "keys": {"p256dh": form_text("p256dh").strip(), "auth": form_text("auth").strip()},
            "label": form_text("label").strip()[:100],
        }))
    except ActionError as error:
        return refused(error, here())
    return done("This browser receives Web Push notifications.", here())


@blueprint.post("/settings/push/<subscription_id>/delete")
def unsubscribe_browser(subscription_id: str) -> ResponseReturnValue:
    try:
        notifications.unsubscribe_browser(runtime(), subscription_id)
    except ActionError as error:
        return refused(error, here())
    return done("The browser no longer receives Web Push notifications.", here())


@blueprint.get("/live/notifications")
def live_notifications() -> ResponseReturnValue:
    """The Inbox count and the page channels' notifications after `after` (the page polls it)."""
    after = request.args.get("after")
    since = None if after is None else whole_or_refuse(
        "after", after, nothing="Give the id of the last notification shown, or no after for none.")
    return jsonify({"ok": True, **notifications.page_feed(runtime(), since)})


@blueprint.post("/settings/notifications")
def save_channel() -> ResponseReturnValue:
    name = form_text("name").strip()
    try:
        fields: dict[str, Any] = {
            "type": form_text("type").strip(),
            "url": form_text("url").strip(),  # empty: the stored URL is kept
            "kinds": request.form.getlist("kinds"),
        }
        decisions = form_text("decisions").strip()
        if decisions:  # empty: the channel type's default (docs/notifications.md#which-channels-carry-them)
            fields["decisions"] = decisions == "on"
        channel = notifications.save_channel(runtime(), name, payload_of(fields))
    except ActionError as error:
        return refused(error, here())
    return done(f'Notification channel "{channel["name"]}" saved.', here())


@blueprint.post("/settings/notifications/<name>/test")
def test_channel(name: str) -> ResponseReturnValue:
    try:
        notifications.test_channel(runtime(), name)
    except ActionError as error:
        return refused(error, here())
    return done(f'A test notification is on its way through "{name}".', here())


@blueprint.post("/settings/notifications/<name>/delete")
def delete_channel(name: str) -> ResponseReturnValue:
    try:
        notifications.delete_channel(runtime(), name)
    except ActionError as error:
        return refused(error, here())
    return done(f'Notification channel "{name}" deleted.', here())


@blueprint.post("/settings/notifications/decisions")
def save_decide_kinds() -> ResponseReturnValue:
    """What may be decided from a notification's link or buttons (docs/notifications.md#deciding-from-a-notification)."""
    try:
        settings.change_settings(runtime(), {"notify_decide_kinds": request.form.getlist("decide_kinds")})
    except ActionError as error:
        return refused(error, here())
    return done("Saved what may be decided from a notification.", here())


@blueprint.post("/settings/notifications/quiet-hours")
def save_quiet_hours() -> ResponseReturnValue:
    window = {key: form_text(key).strip() for key in ("from", "to", "tz")}
    try:
        settings.change_settings(runtime(), {
            "notify_quiet_hours": window if any(window.values()) else None,
            "notify_quiet_hours_hold_all": "hold_all" in request.form,
        })
    except ActionError as error:
        return refused(error, here())
    return done("Notification quiet hours saved.", here())
