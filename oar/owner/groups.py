"""The owner's groups: listing, creating, renaming or moving, and dissolving them (docs/sessions.md#groups)."""

from __future__ import annotations

from typing import Any

from oar.core import ids
from oar.core.db import write_transaction
from oar.core.errors import refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.models import Group, Session
from oar.core.runtime import Runtime
from oar.sessions import groups

CHANGED_NOTHING = "Nothing was changed."

# A group's name is shown inside lines (cards, refusals listing the groups), as a title is: one line.
NEW_GROUP = {"name": Param("str", required=True, max_length=200, one_line=True)}
GROUP_CHANGES = {"name": Param("str", max_length=200, one_line=True),
                 "position": Param("int", minimum=0, maximum=1_000_000)}


def group_view(group: Group) -> dict[str, Any]:
    members = groups.live_members(group).count()
    return {
        "id": group.id,
        "name": groups.display_name(group),
        "ownerCreated": group.owner_created,
        "memberCount": members,
        "empty": members == 0,
        "position": group.position,
    }


def list_groups(runtime: Runtime) -> list[dict[str, Any]]:
    """Every group not dissolved, in the owner's order."""
    rows = Group.select().where(Group.dissolved == False).order_by(Group.position, Group.created_at)  # noqa: E712
    return [group_view(group) for group in rows]


def create_group(runtime: Runtime, payload: dict[str, Any]) -> dict[str, Any]:
    """A group the owner made, empty until sessions join it."""
    args, _ = check_fields("create group", NEW_GROUP, payload, strict=True, nothing="Nothing was created.")
    with write_transaction():
        group = Group.create(id=ids.prefixed_id("grp"), name=args["name"].strip(), owner_created=True)
    return group_view(group)


def change_group(runtime: Runtime, group_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Rename a group or move it in the owner's order."""
    args, _ = check_fields("change group", GROUP_CHANGES, payload, strict=True, nothing=CHANGED_NOTHING)
    with refusals_ending(CHANGED_NOTHING):
        group = groups.resolve(group_id, runtime.relay_name())
    with write_transaction():
        if args:
            Group.update(**args).where(Group.id == group.id).execute()
    return group_view(Group.get_by_id(group.id))


def dissolve_group(runtime: Runtime, group_id: str) -> Group:
    """Dissolve: the members stay, ungrouped."""
    with refusals_ending(CHANGED_NOTHING):
        group = groups.resolve(group_id, runtime.relay_name())
    with write_transaction():
        Session.update(group=None).where(Session.group == group.id).execute()
        Group.update(dissolved=True, head_session_id=None).where(Group.id == group.id).execute()
    return group
