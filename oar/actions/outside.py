"""take and reply: the conversation's own agent, outside the relay, takes what waits for it and
answers its prompts (docs/sessions.md#agents-outside-the-relay)."""

from __future__ import annotations

from typing import Any

from oar.actions.context import CallContext
from oar.actions.prompts import wait_seconds
from oar.actions.registry import action
from oar.core.errors import ActionError
from oar.core.fields import Param
from oar.core.models import Message
from oar.core.timeutil import iso
from oar.turns import outside, turns

# The most items one take returns.
MAX_TAKEN = 100
NOT_OUTSIDE = (
    "This conversation's agent is not outside the relay: what arrives for it runs on its provider ({provider}). "
    "The owner can mark it as outside on its page or with the owner API (agent_outside)."
)


@action("take",
    params={
        "wait_seconds": Param(
            "int", minimum=0, maximum=86_400,
            description="seconds to wait for something to arrive (default 120, capped by the owner's longest wait)",
        ),
        "max_items": Param("int", minimum=1, maximum=MAX_TAKEN, description=f"the most items to take (default 20, at most {MAX_TAKEN})"),
    },
    level="read",
    relay_optional=True,
    nothing="Nothing was taken.",
)
def take(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Take what waits for this conversation (prompts, events, schedule firings, answers), waiting until something arrives."""
    if not outside.recognise(ctx.caller_session):
        raise ActionError("REMOTE_RELAY_INVALID_INPUT", NOT_OUTSIDE.format(provider=ctx.caller_session.provider))
    seconds, cap_note = wait_seconds(ctx, args)
    taken = outside.take(ctx.runtime, ctx.caller_session.id, seconds, int(args.get("max_items") or 20))
    entry: dict[str, Any] = {"items": [_item(message) for message in taken.items]}
    notes = []
    if taken.awaiting is not None:
        entry["awaitingReply"] = _item(taken.awaiting)
        notes.append(f"Prompt {taken.awaiting.id} still waits for your reply; later prompts come after it.")
    if not taken.items:
        notes.append(f"Nothing arrived within {seconds} s: call take again." + (f" {cap_note}" if cap_note else ""))
    if notes:
        entry["note"] = " ".join(notes)
    entry["summary"] = f"take → {len(taken.items)} item(s)"
    return entry


@action("reply",
    params={
        "message_id": Param("str", required=True, max_length=64, description="the prompt's message_id, from take"),
        "text": Param("str", required=True, max_length=100_000, description="the reply"),
    },
    level="read",
    relay_optional=True,
    nothing="Nothing was replied.",
)
def reply(ctx: CallContext, args: dict[str, Any]) -> dict[str, Any]:
    """Answer a prompt this conversation took: the reply goes to whoever sent it."""
    if not outside.is_outside(ctx.caller_session):
        raise ActionError("REMOTE_RELAY_INVALID_INPUT", NOT_OUTSIDE.format(provider=ctx.caller_session.provider))
    turn = outside.reply(ctx.runtime, ctx.caller_session, args["message_id"], args["text"])
    entry = turns.result(ctx.runtime, turn)
    entry["summary"] = f"reply → message {turn.id}: {turns.summary_status(entry)}"
    return entry


def _item(message: Message) -> dict[str, Any]:
    """A taken item: a prompt (answer it with reply) or a notice from the relay."""
    item: dict[str, Any] = {
        "message_id": message.id, "kind": "prompt" if message.role == outside.REPLY_EXPECTED_ROLE else message.role,
        "text": message.text, "from": turns.badge(message), "createdAt": iso(message.created_at),
    }
    if message.role == outside.REPLY_EXPECTED_ROLE:
        item["reply"] = "expected: call reply with this message_id"
    return item
