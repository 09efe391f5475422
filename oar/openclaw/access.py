"""Who sees and may write to which session: visibility and the send policy (docs/openclaw.md#visibility).

Visibility is the relay's own rule for every agent surface (`oar.sessions.visibility`,
docs/rules.md#visibility); OpenClaw's tools keep the reference's refusal texts, naming its
setting `tools.sessions.visibility`.

The send policy: the target session's own override (`allow` | `deny`, set by the owner) wins;
else the first rule that matches and denies, then the first that matches and allows, then the
default (owner setting `send_policy`).
"""

from __future__ import annotations

from typing import Any

from oar.core.errors import ActionError
from oar.core.models import Session
from oar.openclaw.keys import Keyed
from oar.openclaw.models import SessionSendPolicy
from oar.sessions import visibility as session_visibility


def view_of(caller: Session, settings: dict[str, Any]) -> session_visibility.View:
    return session_visibility.View(caller, settings["sessions_visibility"])


def refusal(action: str, visibility: str) -> ActionError:
    """The reference's text for a session this visibility hides (`action`: history | send)."""
    prefix = f"Session {action}"
    if visibility == "self":
        text = f"{prefix} visibility is restricted to the current session (tools.sessions.visibility=self)."
    elif visibility == "tree":
        text = f"{prefix} visibility is restricted to the current session tree (tools.sessions.visibility=tree)."
    else:
        text = f"{prefix} visibility is restricted. Set tools.sessions.visibility=all to allow cross-agent access."
    return ActionError("REMOTE_RELAY_FORBIDDEN", text)


def check_visible(caller: Session, target: Session, settings: dict[str, Any], action: str) -> None:
    view = view_of(caller, settings)
    if not view.sees(target):
        raise refusal(action, view.visibility)


def overrides(session_ids: list[str]) -> dict[str, str]:
    """The owner's per-session send policies of these sessions (absent: inherit)."""
    if not session_ids:
        return {}
    return {
        row.session_id: row.send_policy
        for row in SessionSendPolicy.select().where(SessionSendPolicy.session_id.in_(session_ids))
    }


def _matches(match: dict[str, str], target: Keyed) -> bool:
    return (
        match.get("channel", target.channel) == target.channel
        and match.get("chatType", target.chat_type) == target.chat_type
        and target.key.startswith(match.get("keyPrefix", ""))
    )


def send_allowed(target: Keyed, policy: dict[str, Any], override: str | None) -> bool:
    """Pure: whether a send to `target` passes the policy (docs/openclaw.md#send-policy)."""
    if override in ("allow", "deny"):
        return override == "allow"
    matching = [rule["action"] for rule in policy.get("rules", []) if _matches(rule.get("match", {}), target)]
    if "deny" in matching:
        return False
    if "allow" in matching:
        return True
    return policy.get("default", "allow") == "allow"


SEND_DENIED = "Send blocked by session policy."
