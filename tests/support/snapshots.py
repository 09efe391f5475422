"""A relay's whole state, to prove that a refused call changed nothing; and emptying it between tests."""

from __future__ import annotations

import time
from typing import Any

import peewee

from oar.core.db import database
from oar.providers import ensure_builtin
from tests.support.all_models import ALL_MODELS as MODELS
from tests.support.relays import Relay


def snapshot(relay: Relay, *, heartbeats: bool = True) -> dict[str, Any]:
    """Every row of every table, plus what the owner API shows: equal before and after = nothing changed.

    `heartbeats=False` leaves out the heartbeat times, which a waiting turn's worker moves on.
    """
    owner = relay.owner
    with database.connection_context():
        rows = {
            model.__name__: sorted(
                repr(sorted((k, v) for k, v in row.items() if heartbeats or k != "heartbeat_at"))
                for row in model.select().dicts()
            )
            for model in MODELS
        }
    listed = owner.get("/api/v1/owner/sessions")["sessions"]
    return {
        "counts": {name: len(entries) for name, entries in rows.items()},
        "settings": owner.get("/api/v1/owner/settings")["settings"],
        "groups": owner.get("/api/v1/owner/groups")["groups"],
        "sessions": listed,
        "details": {entry["id"]: owner.get(f"/api/v1/owner/sessions/{entry['id']}") for entry in listed},
        "rows": rows,
    }


def reset_database(attempts: int = 5) -> None:
    """Empty every table between tests (the schema stays).

    A worker may still be finishing the previous test's turn; on PostgreSQL emptying the
    tables can then meet it in a deadlock, which the server resolves by failing one side:
    empty again.
    """
    for attempt in range(attempts):
        try:
            with database.connection_context(), database.atomic():
                for model in reversed(MODELS):
                    model.delete().execute()
                ensure_builtin()
            return
        except peewee.OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)
