"""The owner API (SPEC §16): everything a person can do on the page, as JSON."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request

from oar import lifecycle, providers
from oar.approvals import cards, questions
from oar.core import defaults, ids, settings
from oar.core.db import write_transaction
from oar.core.errors import invalid, not_found
from oar.core.fields import Param, check_fields, unstorable_text
from oar.core.models import Group, Message, Question, Schedule, Session, Subscription
from oar.core.runtime import Runtime
from oar.core.settings import default_cwd
from oar.core.shapes import CWD, EFFORT, MODE, MODEL, PROVIDER, TEXT, TITLE
from oar.core.timeutil import iso, utcnow
from oar.providers import settings as provider_settings
from oar.providers.choice import check_effort, provider_unavailable
from oar.providers.modelcheck import check_model
from oar.schedules import schedules
from oar.sessions import groups, sessions
from oar.sessions import state as session_state
from oar.sessions.folders import check_folder
from oar.turns import automated, turns
from oar.watching import lifetime, views
from oar.web import runtime
from oar.web.auth import require_owner

blueprint = Blueprint("owner", __name__, url_prefix="/api/v1/owner")


@blueprint.before_request
def owner_only() -> None:
    require_owner(runtime().config)


def body() -> dict[str, Any]:
    try:
        payload = request.get_json(force=True, silent=True)
    except RecursionError:  # nested deeper than the JSON parser goes
        payload = None
    if payload is None and not request.get_data():
        return {}
    if not isinstance(payload, dict):
        raise invalid("The body must be a JSON object. Nothing was changed.")
    if unstorable_text(payload):
        raise invalid(
            "The body holds text the relay cannot store (a NUL character or a lone surrogate such as \\ud800). "
            "Nothing was changed."
        )
    return payload


def ok(**fields: Any):  # type: ignore[no-untyped-def]
    return jsonify({"ok": True, **fields})


def owner_session(session_id: str) -> Session:
    return sessions.resolve(session_id, runtime().relay_name(), "Nothing was changed.")


# Settings -------------------------------------------------------------------------------


@blueprint.get("/settings")
def get_settings():  # type: ignore[no-untyped-def]
    return ok(settings=settings.load(runtime().config))


@blueprint.patch("/settings")
def patch_settings():  # type: ignore[no-untyped-def]
    return ok(settings=settings.update(runtime().config, body()))


# Sessions -------------------------------------------------------------------------------

NEW_SESSION = {
    "title": TITLE,
    "provider": PROVIDER,
    "model": MODEL,
    "effort": EFFORT,
    "mode": MODE,
    "cwd": CWD,
    "text": Param("str", max_length=defaults.MAX_PROMPT_CHARS),
}


@blueprint.post("/sessions")
def create_session():  # type: ignore[no-untyped-def]
    """A conversation of the user's, and the agent token its agent uses."""
    session, token, message = start_conversation(body())
    return ok(session=_session_view(session), token=token, message_id=message.id if message else None), 201


def start_conversation(payload: dict[str, Any]) -> tuple[Session, str, Message | None]:
    """The owner starts a conversation (owner API and page): the session, its agent token
    (shown once) and the first prompt when `text` was given."""
    nothing = "Nothing was created."
    relay = runtime()
    name = relay.relay_name()
    args, _ = check_fields("create session", NEW_SESSION, payload, strict=True, nothing=nothing)
    configured = providers.configured()
    provider = providers.get(args["provider"]) if args.get("provider") else (configured[0] if configured else None)
    if provider is None:
        raise provider_unavailable(args.get("provider", "(default)"), name, nothing)
    model = provider.default_model
    if args.get("model"):
        model = check_model(args["model"], provider, relay_name=name, nothing=nothing, others=configured).model
    effort = check_effort(args["effort"], provider, name, nothing) if args.get("effort") else None
    if args.get("cwd"):
        cwd = check_folder(args["cwd"], relay.settings()["allowed_roots"], nothing)
    else:
        folder = default_cwd(relay.config)
        folder.mkdir(parents=True, exist_ok=True)
        cwd = str(folder.resolve())
    title = args.get("title") or (sessions.title_from(args["text"]) if args.get("text") else "New session")
    with write_transaction():
        session = sessions.create(
            title=title, provider=provider.name, model=model, effort=effort,
            mode=args.get("mode", "agent"), cwd=cwd,
        )
        token = sessions.issue_token(session)
        message = turns.insert_prompt(session, args["text"], turns.Provenance()) if args.get("text") else None
    if message is not None:
        turns.start_turns(relay, session.id)
    return Session.get_by_id(session.id), token, message


@blueprint.get("/sessions")
def list_sessions():  # type: ignore[no-untyped-def]
    rows = list(
        Session.select()
        .where(Session.deleted == False)  # noqa: E712
        .order_by(Session.last_activity_at.desc())
        .limit(500)
    )
    return ok(sessions=sessions.listed_many(rows))


@blueprint.get("/sessions/<session_id>")
def read_session(session_id: str):  # type: ignore[no-untyped-def]
    session = owner_session(session_id)
    messages = list(Message.select().where(Message.session == session.id).order_by(Message.seq.desc()).limit(200))
    return ok(
        session=_session_view(session),
        messages=[
            {"id": m.id, "role": m.role, "text": m.text, "status": m.status, "error": m.error, "from": turns.badge(m)}
            for m in reversed(messages)
        ],
    )


@blueprint.post("/sessions/<session_id>/messages")
def write_message(session_id: str):  # type: ignore[no-untyped-def]
    message = write_as_user(session_id, body())
    return ok(message_id=message.id, session=message.session_id), 201


def write_as_user(session_id: str, payload: dict[str, Any]) -> Message:
    """The user writes in the conversation (owner API and page): a turn, and the loop count
    starts over."""
    relay = runtime()
    args, _ = check_fields("write", {"text": TEXT}, payload, strict=True, nothing="Nothing was sent.")
    session = owner_session(session_id)
    if session.archived:
        raise not_found(f"Session {session.id[:8]} is archived. Nothing was sent.")
    with write_transaction():
        message = turns.insert_prompt(session, args["text"], turns.Provenance())
        Session.update(loop_prompt_count=0).where(Session.id == session.id).execute()
    turns.start_turns(relay, session.id)
    # The loop count starts over, so firings held by loop protection go out now (SPEC §9).
    schedules.release_held(relay, session.id, utcnow())
    return message


@blueprint.post("/sessions/<session_id>/tokens")
def new_token(session_id: str):  # type: ignore[no-untyped-def]
    session = owner_session(session_id)
    with write_transaction():
        token = sessions.issue_token(session)
    return ok(token=token, session=session.id), 201


SESSION_CHANGES = {
    "may_create_sessions": Param("bool"),
    "title": TITLE,
    "mode": MODE,
    "group_id": Param("str", max_length=64, description='a group id, or "none"'),
    # The Allows remembered for this conversation's agent (SPEC §6), granted ahead or revoked.
    "approvals": Param("list", description="create_sessions, watch_sessions, change_other_sessions"),
}


@blueprint.patch("/sessions/<session_id>")
def change_session(session_id: str):  # type: ignore[no-untyped-def]
    return ok(session=_session_view(change_session_settings(session_id, body())))


def change_session_settings(session_id: str, payload: dict[str, Any]) -> Session:
    """The owner changes a session (owner API and page), e.g. the may_create_sessions switch."""
    args, _ = check_fields("change session", SESSION_CHANGES, payload, strict=True, nothing="Nothing was changed.")
    session = owner_session(session_id)
    group = None
    if args.get("group_id") and args["group_id"].lower() != "none":
        group = groups.resolve(args["group_id"], runtime().relay_name(), "Nothing was changed.")
    # An empty list is "not given" for agents' arguments; here it revokes every remembered Allow.
    approvals = args.get("approvals", [] if payload.get("approvals") == [] else None)
    if approvals is not None and not all(kind in cards.REMEMBERED for kind in approvals):
        raise invalid(f"approvals must be a list of {', '.join(cards.REMEMBERED)}. Nothing was changed.")
    with write_transaction():
        if approvals is not None:
            cards.set_approvals(session.id, "this", set(approvals))
        values = {key: args[key] for key in ("may_create_sessions", "title", "mode") if key in args}
        if values:
            Session.update(**values).where(Session.id == session.id).execute()
        if "group_id" in args:
            if group is None:
                groups.leave(session)
            else:
                groups.join(session, group)
    return Session.get_by_id(session.id)


@blueprint.post("/sessions/<session_id>/archive")
def archive_session(session_id: str):  # type: ignore[no-untyped-def]
    session = owner_session(session_id)
    lifecycle.archive(runtime(), session)
    return ok(archived=True, session=session.id)


@blueprint.delete("/sessions/<session_id>")
def delete_session(session_id: str):  # type: ignore[no-untyped-def]
    session = owner_session(session_id)
    lifecycle.delete(runtime(), session)
    return ok(deleted=True, session=session.id)


def _session_view(session: Session) -> dict[str, Any]:
    view = sessions.described(session, session_state.state_of(session, session_state.is_busy(session)))
    view["group"] = groups.field_for(session)
    view["approvals"] = sorted(cards.approved(session.id, "this"))
    return view


# Inbox ----------------------------------------------------------------------------------


@blueprint.get("/inbox")
def inbox():  # type: ignore[no-untyped-def]
    """Every pending approval card and question, across sessions."""
    return ok(cards=cards.pending(), questions=pending_questions())


@blueprint.post("/cards/<card_id>")
def decide_card(card_id: str):  # type: ignore[no-untyped-def]
    """The owner's Allow or Deny on an approval card."""
    decision = {"decision": Param("str", required=True, choices=("allow", "deny"))}
    args, _ = check_fields("decide", decision, body(), strict=True, nothing="Nothing was changed.")
    return ok(card=decide_as_owner(runtime(), card_id, args["decision"]))


def decide_as_owner(relay: Runtime, card_id: str, decision: str) -> dict[str, Any]:
    """Allow or Deny; an Allow on the loop card starts the count over, so the schedule
    firings held by loop protection go out now (SPEC §9)."""
    card = cards.decide(relay, card_id, decision)
    if card["status"] == "allowed" and "loop" in card["reasons"]:
        schedules.release_held(relay, card["session"]["id"], utcnow())
    return card


def pending_questions() -> list[dict[str, Any]]:
    """Every pending question card and ask across sessions, oldest first (Inbox: API and page)."""
    pending = (
        Question.select(Question, Session.id, Session.title)
        .join(Session)
        .where((Question.status == "pending") & (Session.deleted == False))  # noqa: E712
        .order_by(Question.created_at)
    )
    listed = []
    for question in pending:
        entry = questions.shape(question)
        entry.update(
            session=question.session_id, sessionTitle=question.session.title, askedBy=question.asker_session_id,
            recommendation=question.recommendation, detail=question.detail, createdAt=iso(question.created_at),
        )
        listed.append(entry)
    return listed


ANSWER = {"answer": Param("str", max_length=100_000), "choices": Param("list"), "dismiss": Param("bool")}


@blueprint.post("/questions/<question_id>")
def answer_question(question_id: str):  # type: ignore[no-untyped-def]
    """The owner answers or dismisses a question card (ask_user or ask)."""
    return ok(question=answer_as_owner(question_id, body()))


def answer_as_owner(question_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The owner answers or dismisses a question card (owner API, page and Inbox)."""
    nothing = "Nothing was changed."
    relay = runtime()
    args, _ = check_fields("answer", ANSWER, payload, strict=True, nothing=nothing)
    question = questions.find(question_id, relay.relay_name(), nothing)
    if args.get("dismiss"):
        if question.status != "pending":
            raise invalid(f"Question {question.id} is {question.status}, not pending. {nothing}")
        status, answer, choices = "dismissed", None, None
    else:
        status = "answered"
        answer, choices = questions.checked_answer(question, args.get("answer"), args.get("choices"), nothing)
    if not questions.settle(relay, question, status=status, answer=answer, choices=choices, via=relay.relay_name()):
        raise invalid(f"Question {question.id} was settled meanwhile. {nothing}")
    if question.kind == "ask":
        automated.announce_answer(relay, question)
    return questions.listed(Question.get_by_id(question.id))


# Groups ---------------------------------------------------------------------------------


def _group_view(group: Group) -> dict[str, Any]:
    members = groups.live_members(group).count()
    return {
        "id": group.id,
        "name": groups.display_name(group),
        "ownerCreated": group.owner_created,
        "memberCount": members,
        "empty": members == 0,
        "position": group.position,
    }


@blueprint.get("/groups")
def list_groups():  # type: ignore[no-untyped-def]
    rows = Group.select().where(Group.dissolved == False).order_by(Group.position, Group.created_at)  # noqa: E712
    return ok(groups=[_group_view(group) for group in rows])


@blueprint.post("/groups")
def create_group():  # type: ignore[no-untyped-def]
    args, _ = check_fields(
        "create group", {"name": Param("str", required=True, max_length=200)}, body(), strict=True,
        nothing="Nothing was created.",
    )
    with write_transaction():
        group = Group.create(id=ids.prefixed_id("grp"), name=args["name"].strip(), owner_created=True)
    return ok(group=_group_view(group)), 201


@blueprint.patch("/groups/<group_id>")
def change_group(group_id: str):  # type: ignore[no-untyped-def]
    args, _ = check_fields(
        "change group",
        {"name": Param("str", max_length=200), "position": Param("int", minimum=0, maximum=1_000_000)},
        body(), strict=True, nothing="Nothing was changed.",
    )
    group = groups.resolve(group_id, runtime().relay_name(), "Nothing was changed.")
    with write_transaction():
        if args:
            Group.update(**args).where(Group.id == group.id).execute()
    return ok(group=_group_view(Group.get_by_id(group.id)))


@blueprint.delete("/groups/<group_id>")
def dissolve_group(group_id: str):  # type: ignore[no-untyped-def]
    """Dissolve: the members stay, ungrouped."""
    group = groups.resolve(group_id, runtime().relay_name(), "Nothing was changed.")
    with write_transaction():
        Session.update(group=None).where(Session.group == group.id).execute()
        Group.update(dissolved=True, head_session_id=None).where(Group.id == group.id).execute()
    return ok(dissolved=True, group=group.id)


# Providers ------------------------------------------------------------------------------


@blueprint.get("/providers")
def list_providers():  # type: ignore[no-untyped-def]
    return ok(providers=[provider_view(p) for p in providers.configured()])


@blueprint.get("/providers/<name>")
def get_provider(name: str):  # type: ignore[no-untyped-def]
    provider = providers.get(name)
    if provider is None:
        raise not_found(f'No provider "{name[:64]}" is configured.')
    return ok(provider=provider_view(provider))


@blueprint.put("/providers/<name>")
def put_provider(name: str):  # type: ignore[no-untyped-def]
    """Create or replace a provider's configuration; models are discovered when not listed."""
    row, note = provider_settings.save(name, body())
    fields: dict[str, Any] = {"provider": provider_view(providers.from_row(row))}
    if note:
        fields["modelNote"] = note
    return ok(**fields)


@blueprint.delete("/providers/<name>")
def delete_provider(name: str):  # type: ignore[no-untyped-def]
    if not provider_settings.delete(name):
        raise not_found(f'No provider "{name[:64]}" is configured. Nothing was changed.')
    return ok(deleted=True, provider=name)


def provider_view(provider: providers.Provider) -> dict[str, Any]:
    """Never the API key: only whether one is set."""
    options = provider.options
    return {
        "name": provider.name,
        "kind": provider.kind,
        "baseUrl": options.get("base_url"),
        "models": provider.models,
        "defaultModel": provider.default_model,
        "efforts": provider.efforts,
        "workspace": provider.workspace,
        "monthlyTokenCap": options.get("monthly_token_cap"),
        "family": options.get("family"),
        "billing": options.get("billing"),
        "dottedModelIds": provider.dotted_model_ids,
        "apiKeySet": provider.has_api_key,
    }


# Schedules (the page's ⏰ list) ------------------------------------------------------------


@blueprint.get("/schedules")
def list_schedules():  # type: ignore[no-untyped-def]
    """Every active schedule, and those ended within the hour (SPEC §9)."""
    relay = runtime()
    rows = schedules.listed_for(None, utcnow(), relay.time("SCHEDULE_ENDED_LISTED_SECONDS"))
    return ok(schedules=[schedules.view(row) for row in rows])


@blueprint.delete("/schedules/<schedule_id>")
def cancel_schedule(schedule_id: str):  # type: ignore[no-untyped-def]
    """The ⏰ list's Cancel: the schedule ends with endReason `unscheduled`."""
    ended, row = end_schedule(schedule_id)
    return ok(ended=ended, schedule=schedules.view(row))


def end_schedule(schedule_id: str) -> tuple[bool, Schedule]:
    """The ⏰ list's Cancel (owner API and page); False when it had already ended."""
    row = Schedule.get_or_none(Schedule.id == schedule_id.strip())
    if row is None:
        raise not_found(f'Relay "{runtime().relay_name()}" has no schedule "{schedule_id[:64]}". Nothing was changed.')
    ended = schedules.unschedule(row.id, utcnow())
    return ended, Schedule.get_by_id(row.id)


# Subscriptions (the page's "watching N sessions" chips) ------------------------------------


@blueprint.get("/subscriptions")
def list_subscriptions():  # type: ignore[no-untyped-def]
    """Every active subscription on this relay, with its watcher."""
    return ok(subscriptions=[_subscription_view(row) for row in active_subscriptions()])


@blueprint.delete("/subscriptions/<subscription_id>")
def unsubscribe(subscription_id: str):  # type: ignore[no-untyped-def]
    """The page's Unsubscribe: the subscription ends with endReason `unsubscribed` (SPEC §8.4)."""
    ended, row = end_subscription(subscription_id)
    return ok(ended=ended, subscription=_subscription_view(row))


def active_subscriptions() -> list[Subscription]:
    return list(
        Subscription.select().join(Session)
        .where(Subscription.ended_at.is_null() & (Session.deleted == False))  # noqa: E712
        .order_by(Subscription.created_at)
    )


def end_subscription(subscription_id: str) -> tuple[bool, Subscription]:
    """Unsubscribe (owner API and page); False when it had already ended."""
    row = Subscription.get_or_none(Subscription.id == subscription_id.strip())
    if row is None:
        raise not_found(
            f'Relay "{runtime().relay_name()}" has no subscription "{subscription_id[:64]}". Nothing was changed.'
        )
    with write_transaction():
        ended = lifetime.end(row, "unsubscribed", utcnow())
    return ended, Subscription.get_by_id(row.id)


def _subscription_view(row: Subscription) -> dict[str, Any]:
    watcher = Session.get_by_id(row.watcher_id)
    return {**views.view(row), "watcher": {"id": watcher.id, "title": watcher.title}}

