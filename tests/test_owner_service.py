"""The owner's service (`oar.owner`) called directly with a Runtime: no Flask app, no HTTP."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from oar.approvals import cards
from oar.core.db import database
from oar.core.errors import ActionError
from oar.core.models import AgentToken, Card, Message, Session
from oar.owner import conversations, inbox
from tests.support.clients import poll
from tests.support.relays import Relay

OAR = Path(__file__).resolve().parent.parent / "oar"
WEB_FRAMEWORKS = ("flask", "werkzeug")


def imported_modules(path: Path) -> set[str]:
    """The absolute module names a file imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(OAR.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_file(name: str) -> Path | None:
    """The file of an `oar` module (None for a name that is not one, e.g. a function imported by name)."""
    if name != "oar" and not name.startswith("oar."):
        return None
    relative = Path(*name.split("."))
    for candidate in (OAR.parent / relative / "__init__.py", OAR.parent / relative.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def test_the_owner_service_imports_no_web_framework_even_indirectly() -> None:
    start = sorted((OAR / "owner").glob("*.py"))
    assert {path.stem for path in start} >= {"conversations", "inbox", "groups", "settings", "providers"}
    seen: set[Path] = set()
    queue = list(start)
    reached_by: dict[Path, Path] = {}
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_modules(path):
            if name.split(".")[0] in WEB_FRAMEWORKS:
                chain = [path]
                while chain[-1] in reached_by:
                    chain.append(reached_by[chain[-1]])
                pytest.fail(f"{name} is imported by {' <- '.join(str(p.relative_to(OAR.parent)) for p in chain)}")
            found = module_file(name)
            if found is not None and found not in seen:
                reached_by.setdefault(found, path)
                queue.append(found)
    assert OAR / "core" / "runtime.py" in seen  # the walk did follow the service's imports


def test_it_starts_a_conversation_writes_as_the_user_and_decides_a_card(relay: Relay) -> None:
    runtime = relay.runtime
    with database.connection_context():
        session, token, first = conversations.start_conversation(runtime, {"title": "ops"})
    assert first is None and token.startswith("oar_")
    stored = Session.get_by_id(session.id)
    assert stored.title == "ops" and stored.provider == "echo" and not stored.deleted
    assert AgentToken.select().where(AgentToken.session == session.id).count() == 1

    call = {"action": "create_session", "relay": "this", "text": "Build the docs site", "wait_seconds": 30}
    with database.connection_context():
        Session.update(loop_prompt_count=7).where(Session.id == session.id).execute()
        prompt = conversations.write_as_user(runtime, session.id, {"text": "!relay " + json.dumps(call)})
    written = Message.get(Message.id == prompt.id)
    assert written.session_id == session.id and written.role == "user" and written.text.startswith("!relay ")
    assert Session.get_by_id(session.id).loop_prompt_count == 0

    card = poll("a pending approval card", lambda: (inbox.inbox(runtime)["cards"] or [None])[0])
    assert card["session"] == {"id": session.id, "title": "ops"} and card["reason"] == "create_sessions"
    with pytest.raises(ActionError) as refused:
        inbox.decide_card(runtime, card["id"], {"decision": "maybe"})
    assert refused.value.code == "REMOTE_RELAY_INVALID_INPUT"
    assert Card.get_by_id(card["id"]).status == "pending"

    with database.connection_context():
        decided = inbox.decide_card(runtime, card["id"], {"decision": "allow"})
    assert decided["status"] == "allowed"
    assert Card.get_by_id(card["id"]).status == "allowed"
    assert cards.approved(session.id, "this") == {"create_sessions"}
    poll("the turn to end", lambda: Message.get(Message.id == prompt.id).status == "done")


def test_its_refusals_are_the_owner_apis(relay: Relay) -> None:
    runtime = relay.runtime
    with pytest.raises(ActionError) as unknown:
        conversations.write_as_user(runtime, "s_nosuchsession", {"text": "hello"})
    assert unknown.value.status == 404
    assert unknown.value.message == 'Relay "desk" has no session "s_nosuchsession". Nothing was changed.'
    with pytest.raises(ActionError) as empty:
        conversations.start_conversation(runtime, {"title": "x", "colour": "red"})
    assert empty.value.status == 400 and "Nothing was created." in empty.value.message
    assert Session.select().count() == 0
