"""Session groups (docs/sessions.md#groups).

A group has a head session and members. Owner groups keep existing when emptied (the page
shows `group · empty`); groups created by agents vanish with their last session. A group's
name is the owner's name for it, else the head session's title.
"""

from __future__ import annotations

from typing import Any

import peewee as pw

from oar.core import defaults, ids
from oar.core.errors import ActionError
from oar.core.models import Group, Session
from oar.sessions.session_state import busy_session_ids, state_of


def live_members(group: Group) -> pw.ModelSelect[Session]:
    return Session.select().where((Session.group == group) & Session.live())


def display_name(group: Group) -> str:
    if group.name:
        return group.name
    head = Session.get_or_none(Session.id == group.head_session_id) if group.head_session_id else None
    return head.title if head is not None else "(unnamed group)"


def role_of(session: Session, group: Group) -> str:
    return "head" if group.head_session_id == session.id else "member"


def field_for(session: Session) -> dict[str, Any] | None:
    """`group: {id, name, role}` of a session, or None."""
    return fields_for([session]).get(session.id)


def fields_for(rows: list[Session]) -> dict[str, dict[str, Any]]:
    """`group` fields of many sessions with two queries (list pages show 20–100 at once)."""
    group_ids = {row.group_id for row in rows if row.group_id}
    if not group_ids:
        return {}
    found = {g.id: g for g in Group.select().where(Group.id.in_(group_ids) & (Group.dissolved == False))}  # noqa: E712
    heads = {g.head_session_id for g in found.values() if not g.name and g.head_session_id}
    head_titles = {head.id: head.title for head in Session.select(Session.id, Session.title).where(Session.id.in_(heads))} if heads else {}
    fields = {}
    for row in rows:
        group = found.get(row.group_id) if row.group_id else None
        if group is not None:
            name = group.name or head_titles.get(group.head_session_id or "") or "(unnamed group)"
            fields[row.id] = {"id": group.id, "name": name, "role": role_of(row, group)}
    return fields


def with_members(
    session: Session, limit: int = defaults.GROUP_MEMBERS_IN_READ, visible: Any = None
) -> dict[str, Any] | None:
    """`group` of read_session: its field plus up to `limit` other members (those `visible`, a
    condition on `Session`, keeps: the reader's view, docs/rules.md#visibility)."""
    field = field_for(session)
    if field is None:
        return None
    group = Group.get_by_id(field["id"])
    members_query = live_members(group).where(Session.id != session.id)
    if visible is not None:
        members_query = members_query.where(visible)
    others = list(members_query.order_by(Session.created_at).limit(limit))
    busy = busy_session_ids([member.id for member in others])
    members = []
    for member in others:
        entry: dict[str, Any] = {"id": member.id, "title": member.title, "role": role_of(member, group),
                 "state": state_of(member, member.id in busy)}
        if member.archived:
            entry["archived"] = True
        members.append(entry)
    return {**field, "members": members}


def active_groups(visible: Any = None) -> pw.ModelSelect[Group]:
    """Groups with at least one non-deleted session (that `visible`, a condition on `Session`,
    keeps), most recently active first."""
    last_activity = pw.fn.MAX(Session.last_activity_at).alias("last_activity")
    condition = (Group.dissolved == False) & Session.live()  # noqa: E712
    return (
        Group.select(Group, pw.fn.COUNT(Session.id).alias("member_count"), last_activity)
        .join(Session, on=(Session.group == Group.id))
        .where(condition if visible is None else condition & visible)
        .group_by(Group.id)
        .order_by(last_activity.desc(), Group.id)
    )


def listing(limit: int, visible: Any = None) -> tuple[list[dict[str, Any]], int]:
    """Up to `limit` groups `{id, name, memberCount}` and how many there are in all; with
    `visible`, only the groups and members a caller's view keeps (docs/rules.md#visibility)."""
    total = active_groups(visible).count()
    groups = [
        {"id": group.id, "name": display_name(group), "memberCount": group.member_count}
        for group in active_groups(visible).limit(limit)
    ]
    return groups, total


def resolve(reference: str, relay_name: str) -> Group:
    """The group named by id or (case-insensitive) name, or UNKNOWN_GROUP listing them (without
    what was not done: the dispatcher adds the action's sentence, the owner API its own)."""
    reference = reference.strip()
    if reference.startswith("grp_"):
        group = Group.get_or_none((Group.id == reference) & (Group.dissolved == False))  # noqa: E712
        if group is not None:
            return group
        raise unknown_group(f'Relay "{relay_name}" has no session group "{reference}".')
    matches = find_by_name(reference)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise unknown_group(f'Relay "{relay_name}" has no session group "{reference}".')
    listed = ", ".join(f"{display_name(g)} ({g.id})" for g in matches[: defaults.GROUPS_IN_ERROR])
    raise ActionError(
        "REMOTE_RELAY_UNKNOWN_GROUP",
        f'Several session groups on relay "{relay_name}" are named "{reference}": {listed}. Pass the id.',
        groups=[{"id": g.id, "name": display_name(g)} for g in matches[: defaults.GROUPS_IN_ERROR]],
        groupsTotal=len(matches),
    )


def find_by_name(name: str) -> list[Group]:
    wanted = name.strip().casefold()
    candidates = Group.select().where(Group.dissolved == False)  # noqa: E712
    return [group for group in candidates if display_name(group).casefold() == wanted]


def unknown_group(sentence: str) -> ActionError:
    groups, total = listing(defaults.GROUPS_IN_ERROR)
    there = ", ".join(f"{g['name']} ({g['id']})" for g in groups) or "none"
    return ActionError(
        "REMOTE_RELAY_UNKNOWN_GROUP",
        f"{sentence} Groups there: {there}.",
        groups=groups,
        groupsTotal=total,
    )


def still_open(group: Group) -> bool:
    return Group.select().where((Group.id == group.id) & (Group.dissolved == False)).exists()  # noqa: E712


def create(head: Session, name: str | None = None, owner_created: bool = False) -> Group:
    return Group.create(
        id=ids.prefixed_id("grp"), name=name, owner_created=owner_created, head_session_id=head.id if head else None
    )


def join(session: Session, group: Group) -> None:
    previous = session.group_id
    session.group = group
    Session.update(group=group).where(Session.id == session.id).execute()
    if group.head_session_id is None:
        Group.update(head_session_id=session.id).where(Group.id == group.id).execute()
    if previous and previous != group.id:
        _after_leaving(previous, session.id)


def leave(session: Session) -> None:
    previous = session.group_id
    if previous is None:
        return
    session.group = None
    Session.update(group=None).where(Session.id == session.id).execute()
    _after_leaving(previous, session.id)


def _after_leaving(group_id: str, session_id: str) -> None:
    """Agent groups vanish when empty; a departing head hands over to the oldest member."""
    group = Group.get_or_none(Group.id == group_id)
    if group is None:
        return
    remaining = live_members(group).order_by(Session.created_at).first()
    if remaining is None:
        if group.owner_created:
            Group.update(head_session_id=None).where(Group.id == group.id).execute()
        else:
            Group.delete().where(Group.id == group.id).execute()
    elif group.head_session_id == session_id:
        Group.update(head_session_id=remaining.id).where(Group.id == group.id).execute()


def empty_owner_groups() -> list[Group]:
    """The owner's groups that are not dissolved but have no live member left."""
    rows = Group.select().where((Group.owner_created == True) & (Group.dissolved == False))  # noqa: E712
    return [group for group in rows if not live_members(group).exists()]
