"""list_relays, relay_info, usage (docs/sessions.md#list_relays, docs/sessions.md#relay_info, docs/sessions.md#usage)."""

from __future__ import annotations

import platform
from typing import Any

from peewee import fn

from oar import __version__, providers
from oar.actions.context import CallContext
from oar.actions.registry import action
from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.models import Session
from oar.core.settings import default_cwd
from oar.core.shapes import RELAY
from oar.core.timeutil import utcnow
from oar.federation import peers
from oar.federation.models import Peer
from oar.providers import usage as token_usage
from oar.sessions import groups


@action("list_relays", params={}, level=None)
def list_relays(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Relays this conversation can act on, this relay first."""
    relays = []
    if ctx.settings["agent_sessions_enabled"]:
        relays.append(
            {
                "name": ctx.relay_name,
                "self": True,
                "url": ctx.runtime.config.base_url,
                "online": True,
                "version": __version__,
                "permission": "full",
                "unlocked": True,
            }
        )
    relays.extend(paired_relays(ctx))
    unlocked = sum(1 for relay in relays if relay["unlocked"])
    noun = "relay" if len(relays) == 1 else "relays"
    return {
        "summary": f"list_relays: {len(relays)} {noun}, {unlocked} unlocked",
        "relays": relays,
        "self": {"name": ctx.relay_name},
        "limits": {
            "maxWaitSeconds": ctx.settings["max_wait_seconds"],
            "maxActiveSessions": defaults.MAX_ACTIVE_SESSIONS,
        },
    }


def paired_relays(ctx: CallContext) -> list[dict[str, Any]]:
    """The relays this one is paired with, as this conversation sees them (only this relay's own
    conversations act on them). Each is asked whether it answers, briefly."""
    if not ctx.caller.is_local:
        return []
    unlocks = peers.unlocks_of(ctx.caller_session.id)
    listed = []
    for peer in Peer.select().order_by(Peer.created_at):
        link = peers.link_to(ctx.runtime, peer)
        try:
            hello = link.hello(timeout=ctx.runtime.time("PEER_PING_TIMEOUT_SECONDS"))
        except ActionError as error:
            peers.note_failure(peer, error.code)
            online, version = False, peer.version
        else:
            version = str(hello.get("version") or "")[:40] or peer.version
            peers.note_answer(peer, version, hello)
            online = True
        listed.append({
            "name": peer.name,
            "url": peer.url,
            "online": online,
            "version": version,
            "permission": peer.level,
            "unlocked": peer.id in unlocks,
            "unlockedBy": unlocks.get(peer.id),
        })
    return listed


@action("relay_info", params={"relay": RELAY}, level="read")
def relay_info(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """What the relay offers: providers, folders, groups."""
    configured = providers.configured()
    visible = ctx.view.where()  # the sessions this conversation sees (docs/rules.md#visibility)
    with_folder = Session.cwd.is_null(False) & Session.live()
    recent_cwds = [
        row.cwd
        for row in Session.select(Session.cwd)
        .where(with_folder if visible is None else with_folder & visible)
        .group_by(Session.cwd)
        .order_by(fn.MAX(Session.last_activity_at).desc())
        .limit(defaults.RECENT_CWDS)
    ]
    listed_groups, total = groups.listing(defaults.GROUPS_IN_RELAY_INFO, visible)
    result: dict[str, Any] = {
        "summary": f"relay_info → {ctx.relay_name}: {len(configured)} providers, {total} groups",
        "name": ctx.relay_name,
        "version": __version__,
        "platform": f"{platform.system().lower()}-{platform.machine()}",
        "acceptsAgentPrompts": ctx.settings["accept_agent_prompts"],
        "providers": [
            {
                "name": provider.name,
                "kind": provider.kind,
                "defaultModel": provider.default_model,
                "models": provider.models,
                "efforts": provider.efforts,
            }
            for provider in configured
        ],
        "defaultCwd": str(default_cwd(ctx.runtime.config).resolve()),
        "recentCwds": recent_cwds,
        "mode": ctx.caller_session.mode,
        "groups": listed_groups,
    }
    if total > len(listed_groups):
        result["groupsTotal"] = total
    return result


@action("usage", params={"relay": RELAY}, level="read")
def usage(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Usage meters per provider (never account names, addresses or tokens)."""
    # Metered providers (billed per token, or given a cap) have a monthly meter; echo is untracked.
    now = utcnow()
    entries = [token_usage.status_of(provider, now) for provider in providers.configured()]
    return {"summary": f"usage → {ctx.relay_name}: {len(entries)} providers", "providers": entries}
