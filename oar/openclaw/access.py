"""Who sees and may write to which session: visibility and the send policy (docs/openclaw.md#visibility).

Visibility (owner setting `sessions_visibility`, default `tree`): `self` the calling
conversation only; `tree` it and the sessions it started, and theirs; `agent` those and every
session of the same agent (the relay's agent id is the provider); `all` every session. The
refusal texts are the reference's, naming its setting `tools.sessions.visibility`.

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

# How deep `tree` follows sessions started by sessions started by the caller.
TREE_DEPTH = 4


def tree_of(caller: Session) -> set[str]:
    """The caller and the sessions started from it, to TREE_DEPTH levels."""
    found = {caller.id}
    frontier = [caller.id]
    for _level in range(TREE_DEPTH):
        if not frontier:
            break
        frontier = [
            row.id for row in Session.select(Session.id).where(
                Session.created_by_session.in_(frontier) & (Session.deleted == False)  # noqa: E712
            ) if row.id not in found
        ]
        found.update(frontier)
    return found


def is_visible(caller: Session, target: Session, visibility: str, tree: set[str]) -> bool:
    if target.id == caller.id or visibility == "all":
        return True
    if visibility == "self":
        return False
    if target.id in tree:
        return True
    return visibility == "agent" and target.provider == caller.provider


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
    visibility = settings["sessions_visibility"]
    if not is_visible(caller, target, visibility, tree_of(caller)):
        raise refusal(action, visibility)


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
