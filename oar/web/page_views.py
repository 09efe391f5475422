"""What the owner's page shows, built from the same code as the owner API (docs/owner-api.md).

Each page is split into regions (`nav`, `sessions`, `messages`, `cards`, …). A region's
version is a short digest of what it shows; the page's JavaScript polls the versions about
once a second and re-fetches the page only when one changed, replacing just those regions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from oar import providers
from oar.approvals import cards
from oar.core.statuses import ERRED_TURN, UNANSWERED_TURN, TurnStatus
from oar.core.timeutil import utcnow
from oar.openclaw.access import overrides
from oar.openclaw.openclaw_runs import provenance_of
from oar.owner.inbox import decided_lately, pending_count, pending_questions
from oar.owner.providers import provider_view
from oar.owner.subscriptions import active_subscriptions
from oar.schedules import schedules
from oar.sessions import groups, session_state, sessions
from oar.sessions.sessions import Session
from oar.turns import outside, turns
from oar.turns.turns import Message
from oar.watching import subscription_rules, views

# Messages shown on a session page (the newest ones), and sessions on the list.
MESSAGES_SHOWN = 200
SESSIONS_SHOWN = 200
# The Allows the owner can grant a conversation's agent ahead (docs/rules.md#when-a-card-is-asked), as the page names them.
APPROVAL_LABELS = {
    "create_sessions": "start sessions on this relay",
    "watch_sessions": "watch sessions",
    "change_other_sessions": "change sessions it did not start",
    "end_other_sessions": "stop and archive sessions it did not start",
}
# Roles of messages the relay itself writes: compact lines, never the user's.
AUTOMATED_ROLES = ("event", "schedule", "system")


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, default=str, sort_keys=True).encode()).hexdigest()[:16]


def card_key(card: dict[str, Any]) -> str:
    """What of a pending card a page's version follows: the card, and whether its caller stopped waiting."""
    return f'{card["id"]}{"/stopped" if card["stoppedWaiting"] else ""}'


def pending_cards(session_id: str | None = None) -> list[dict[str, Any]]:
    """Pending approval cards: all of them (the Inbox), or one conversation's (its page)."""
    return cards.pending() if session_id is None else cards.pending_in_session(session_id)


def inbox_count() -> int:
    return pending_count()


# Tool activity ------------------------------------------------------------------------------


def tool_lines(activities: list[str] | None) -> list[str]:
    """`relay_tool send · build-box · 3f9c2a1e` → `🛰️ send · build-box · 3f9c2a1e` (docs/owner-api.md#the-page)."""
    lines = []
    for activity in activities or []:
        text = str(activity)
        if text.startswith("relay_tool "):
            lines.append("🛰️ " + text.removeprefix("relay_tool ").strip())
        else:
            lines.append("⚙ " + text)
    return lines


# The sessions list --------------------------------------------------------------------------


def session_rows(archived: bool) -> list[dict[str, Any]]:
    listed = sessions.listed_many(sessions.recently_active(archived, SESSIONS_SHOWN))
    watching = active_subscriptions()
    for entry in listed:
        entry["watched"] = any(subscription_rules.watches(sub, entry["id"]) for sub in watching)
    return listed


def watching() -> dict[str, Any]:
    """`watching N sessions` (open sessions any active subscription watches, stand-ins left out as
    the list leaves them out) and a chip per subscription. Counted without loading every session:
    the page asks every second."""
    rows = active_subscriptions()
    shown = {row.watcher_id for row in rows} | {sid for row in rows for sid in (row.sessions or [])[:3]}
    titles = sessions.titles(shown)
    chips = []
    for row in rows:
        if row.scope == "all":
            what = "all sessions" + (f" but {len(row.exclude)}" if row.exclude else "")
        else:
            what = ", ".join(titles.get(sid, sid[:8]) for sid in row.sessions[:3])
            if len(row.sessions) > 3:
                what += f" and {len(row.sessions) - 3} more"
        chips.append({"id": row.id, "watcher": titles.get(row.watcher_id, row.watcher_id[:8]),
                      "watcherId": row.watcher_id, "what": what, "events": row.events})
    return {"count": views.watched_open_count(rows), "chips": chips}


def schedule_list() -> list[dict[str, Any]]:
    """The ⏰ list: active schedules, soonest first."""
    return [schedules.view(row) for row in schedules.active_soonest_first()]


def empty_owner_groups() -> list[dict[str, Any]]:
    """Owner groups with no sessions left: shown as `group · empty`."""
    return [{"id": g.id, "name": groups.display_name(g)} for g in groups.empty_owner_groups()]


def provider_choices() -> list[dict[str, Any]]:
    return [{"name": p.name, "kind": p.kind, "models": p.models, "defaultModel": p.default_model}
            for p in providers.configured()]


def overview(archived: bool) -> dict[str, Any]:
    data = {
        "sessions": session_rows(archived),
        "watching": watching(),
        "schedules": schedule_list(),
        "emptyGroups": empty_owner_groups(),
    }
    data["versions"] = {
        "nav": digest(inbox_count()),
        "sessions": digest([data["sessions"], data["emptyGroups"]]),
        "watching": digest(data["watching"]),
        "schedules": digest(data["schedules"]),
    }
    return data


# A session page -----------------------------------------------------------------------------


def newest_messages(session: Session) -> list[Message]:
    """The messages a session page shows, oldest first."""
    return turns.newest_messages(session.id, MESSAGES_SHOWN)


def messages_version(rows: list[Message]) -> str:
    """Changes when a message is added or a turn's status moves (the reply being written aside)."""
    return digest([[m.seq, m.status, m.reply_id] for m in rows])


def conversation(rows: list[Message]) -> list[dict[str, Any]]:
    """The messages as the page shows them."""
    prompt_of_reply = {m.reply_id: m for m in rows if m.reply_id}
    # Prompts OpenClaw's session tools wrote carry their inter-session provenance (docs/openclaw.md#sessions_send).
    inter_session = provenance_of([m.id for m in rows if m.from_kind == "agent"])
    items = []
    for message in rows:
        item: dict[str, Any] = {"id": message.id, "text": message.text, "createdAt": message.created_at,
                                "role": message.role, "tools": []}
        if message.role in AUTOMATED_ROLES or message.from_kind in ("event", "schedule"):
            item["kind"] = "automated"
            item["label"] = message.role if message.role in AUTOMATED_ROLES else message.from_kind
        elif message.role == "assistant":
            item["kind"] = "reply"
            item["model"] = message.model
            prompt = prompt_of_reply.get(message.id)
            item["tools"] = tool_lines(prompt.activities) if prompt is not None else []
        elif message.from_kind == "agent":
            item["kind"] = "agent"
            item["badge"] = (turns.badge(message) or {}).get("badge")
            if message.id in inter_session:
                came = inter_session[message.id]
                item["badge"] = f"{item['badge'] or '↗ from an agent'} · inter-session from {came['sourceSessionKey']} via {came['sourceTool']}"
        else:
            item["kind"] = "user"
        if message.status and message.status != TurnStatus.DONE and message.role != "assistant":
            item["status"] = message.status
            item["error"] = message.error if message.status in ERRED_TURN else None
            if message.status in UNANSWERED_TURN and not message.reply_id:
                item["tools"] = tool_lines(message.activities)
        items.append(item)
    return items


def in_flight(session: Session) -> dict[str, Any] | None:
    """The reply being written: the running turn's partial text and tool lines."""
    turn = turns.live_turn(session)
    if turn is None:
        return None
    text, _ = turns.clip_reply(turn.partial_text or "")
    return {"messageId": turn.id, "status": turn.status, "text": text, "model": turn.model,
            "tools": tool_lines(turn.activities)}


def session_questions(session_id: str) -> list[dict[str, Any]]:
    return [entry for entry in pending_questions() if entry["session"] == session_id]


def with_asker_titles(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Questions with the title of the conversation that asked (asks about another session)."""
    asker_ids = {e["askedBy"] for e in entries if e.get("askedBy") and e["askedBy"] != e["session"]}
    titles = sessions.titles(asker_ids)
    for entry in entries:
        entry["askedByTitle"] = titles.get(entry.get("askedBy") or "")
    return entries


def session_page(session: Session) -> dict[str, Any]:
    state = session_state.state_of(session, session_state.is_busy(session))
    rows = newest_messages(session)
    data: dict[str, Any] = {
        "session": session,
        "state": state,
        "messages": conversation(rows),
        "inFlight": in_flight(session),
        "questions": with_asker_titles(session_questions(session.id)),
        "cards": pending_cards(session.id),
        "group": groups.field_for(session),
        "approvals": cards.approved(session.id, "this"),
        "approvalKinds": APPROVAL_LABELS,
        "sendPolicy": overrides([session.id]).get(session.id, "inherit"),
        "outside": outside.waiting_view(session) if session.agent_outside else None,
    }
    # Versions of exactly what is shown: a turn ending while the page renders must not make an
    # old picture look current.
    data["versions"] = session_versions(session, state, data, rows)
    return data


def session_versions(
    session: Session, state: str, data: dict[str, Any] | None = None, rows: list[Message] | None = None
) -> dict[str, str]:
    if rows is None:  # the live poll: the columns the version needs, not the texts
        rows = turns.newest_message_states(session.id, MESSAGES_SHOWN)
    if data is None:
        flight = in_flight(session)
        question_ids = [q["id"] for q in session_questions(session.id)]
        card_ids = [card_key(c) for c in pending_cards(session.id)]
    else:
        flight = data["inFlight"]
        question_ids = [q["id"] for q in data["questions"]]
        card_ids = [card_key(c) for c in data["cards"]]
    return {
        "nav": digest(inbox_count()),
        "header": digest([session.title, session.archived, session.may_create_sessions, state, session.provider,
                          session.model, session.mode, session.agent_session_id, session.agent_outside,
                          session.outside_taken_at,
                          sorted(cards.approved(session.id, "this"))]),
        "messages": messages_version(rows),
        "inflight": digest([flight["messageId"], flight["status"]] if flight else None),
        "cards": digest([question_ids, card_ids]),
    }


# The Inbox -----------------------------------------------------------------------------------


def inbox() -> dict[str, Any]:
    data: dict[str, Any] = {"questions": with_asker_titles(pending_questions()), "cards": pending_cards(),
                            "decided": decided_lately(utcnow())}
    data["versions"] = {
        "nav": digest(inbox_count()),
        "inbox": digest([[q["id"] for q in data["questions"]], [card_key(c) for c in data["cards"]],
                         [d["id"] for d in data["decided"]]]),
    }
    return data


# Settings ------------------------------------------------------------------------------------


def token_count(session_id: str) -> int:
    """How many agent tokens of a conversation work (its token page says it)."""
    return sessions.token_count(session_id)


def provider_list() -> list[dict[str, Any]]:
    """Configured providers as the owner API shows them: never the API key."""
    return [provider_view(p) for p in providers.configured()]

