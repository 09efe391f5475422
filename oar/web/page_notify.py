"""The page's notifications (docs/notifications.md#the-open-page): the live feed the open page
polls for its Inbox count and browser notifications, and the Settings page's channel forms.

Routes of the page's blueprint (its CSRF check and sign-in guard apply); each calls the owner
service (`oar.owner.notifications`, `oar.owner.settings`) as the owner API's route does.
"""

from __future__ import annotations

from typing import Any

from flask import jsonify, request, url_for
from flask.typing import ResponseReturnValue

from oar.core.errors import ActionError
from oar.notifications.kinds import CHOOSABLE, ChannelType
from oar.owner import notifications, settings
from oar.web import runtime
from oar.web.page import blueprint, done, form_text, payload_of, refused

HERE = "page.settings_view"
KIND_LABELS = {
    "card_waiting": "Approval cards waiting",
    "question_waiting": "Questions waiting",
    "reply_ready": "Replies ready (conversations I started)",
    "provider_trouble": "Provider capped or failing",
    "relay_lost": "Paired relay lost",
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
    }


@blueprint.get("/live/notifications")
def live_notifications() -> ResponseReturnValue:
    """The Inbox count and the page channels' notifications after `after` (the page polls it)."""
    after = request.args.get("after", "")
    return jsonify({"ok": True, **notifications.page_feed(runtime(), int(after) if after.isdigit() else None)})


@blueprint.post("/settings/notifications")
def save_channel() -> ResponseReturnValue:
    name = form_text("name").strip()
    try:
        fields = {
            "type": form_text("type").strip(),
            "url": form_text("url").strip(),  # empty: the stored URL is kept
            "kinds": request.form.getlist("kinds"),
        }
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
