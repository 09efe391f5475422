"""Bringing a relay's database up to date and making sure it has an owner token."""

from __future__ import annotations

from pathlib import Path

from playhouse.migrations import Runner

from oar import providers
from oar.core import ids, settings
from oar.core.config import Config
from oar.core.db import database, write_transaction

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def migrate() -> list[str]:
    """Apply pending migrations; returns their names."""
    with database.connection_context():
        applied = Runner(database.obj, str(MIGRATIONS)).up()
        with write_transaction():
            providers.ensure_builtin()
    return applied


def pending_migrations() -> list[str]:
    runner = Runner(database.obj, str(MIGRATIONS))
    return [m.name for m in runner.status() if m.applied is None and m.path is not None]


def ensure_owner_token(config: Config) -> str | None:
    """The owner token: from OAR_OWNER_TOKEN, or generated once and stored hashed.

    Returns a newly generated token (to print once), else None.
    """
    if config.owner_token:
        return None
    with database.connection_context():
        if settings.get_value(settings.OWNER_TOKEN_HASH_KEY):
            return None
        token = ids.new_token("o")
        settings.set_value(settings.OWNER_TOKEN_HASH_KEY, ids.hash_token(token))
    return token


def reset_owner_token() -> str:
    """A new owner token, replacing the stored one (`oar token --owner`)."""
    token = ids.new_token("o")
    with database.connection_context():
        settings.set_value(settings.OWNER_TOKEN_HASH_KEY, ids.hash_token(token))
    return token
