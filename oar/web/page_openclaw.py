"""The Settings page's section for OpenClaw's session tools (docs/openclaw.md#settings): the
ping-pong limit, the send policy and what sessions_spawn may do. A route of the
page's blueprint (its CSRF check and sign-in guard apply) that calls the owner service as
`PATCH /api/v1/owner/settings` does."""

from __future__ import annotations

import json
from typing import Any

from flask import url_for
from flask.typing import ResponseReturnValue

from oar.core import defaults
from oar.core.errors import ActionError, invalid
from oar.openclaw import policy_store
from oar.owner import settings
from oar.web import runtime
from oar.web.page import blueprint, comma_list, done, form_text, refused, whole_number


def here() -> str:
    return url_for("page.settings_view") + "#openclaw"


@blueprint.app_template_global()
def openclaw_settings() -> dict[str, Any]:
    """What the section shows: the stored values, the send policy's rules as JSON to edit."""
    stored = settings.read_settings(runtime())
    policy = stored.get("send_policy") or {"rules": [], "default": "allow"}
    return {
        "max_ping_pong_turns": stored.get("max_ping_pong_turns"),
        "ping_pong_range": defaults.OPENCLAW_MAX_PING_PONG_RANGE,
        "policy_default": policy.get("default", "allow"),
        "policy_rules": json.dumps(policy.get("rules", []), indent=2) if policy.get("rules") else "",
        "spawn_allow_agents": ", ".join(stored.get("spawn_allow_agents") or []),
        "spawn_archive_after_minutes": stored.get("spawn_archive_after_minutes"),
    }


@blueprint.post("/settings/openclaw")
def save_openclaw_settings() -> ResponseReturnValue:
    try:
        rules_text = form_text("send_policy_rules").strip()
        try:
            rules = json.loads(rules_text) if rules_text else []
        except ValueError:
            raise invalid(
                'The send policy\'s rules must be JSON: [{"match": {"keyPrefix": "cron:"}, "action": "deny"}]. '
                "Nothing was changed."
            ) from None
        settings.change_settings(runtime(), {
            "max_ping_pong_turns": whole_number(form_text("max_ping_pong_turns").strip()),
            "send_policy": {"rules": rules, "default": form_text("send_policy_default")},
            "spawn_allow_agents": comma_list(form_text("spawn_allow_agents")),
            "spawn_archive_after_minutes": whole_number(form_text("spawn_archive_after_minutes").strip()),
        })
    except ActionError as error:
        return refused(error, here())
    return done("OpenClaw's tool settings saved.", here())


@blueprint.post("/sessions/<session_id>/send-policy")
def send_policy(session_id: str) -> ResponseReturnValue:
    """The session's own send policy for OpenClaw's sessions_send (docs/openclaw.md#send-policy)."""
    here = url_for("page.session_page", session_id=session_id)
    choice = form_text("send_policy").strip().lower()
    try:
        if choice not in policy_store.CHOICES:
            raise invalid(f"Send policy must be one of {', '.join(policy_store.CHOICES)}. Nothing was changed.")
        policy_store.set_policy(session_id, choice, runtime().relay_name())
    except ActionError as error:
        return refused(error, here)
    return done(f"sessions_send to this session: {choice}.", here)
