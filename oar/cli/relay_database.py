"""The database of the relay a command belongs to (docs/operations.md#the-command-line).

`oar token`, `oar pair`, `oar backup`, `oar worker` and `oar clock` act on what a running relay
holds. Run from another folder, or without the relay's environment, they must not make a new
empty database of their own and then fail on its missing tables: they open the relay's
database only when it is there and holds a relay, and otherwise stop with a sentence that says
where they looked and how to point them at the relay. Only the relay itself (`python app.py`,
`oar serve`) and `oar migrate` create a database.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import peewee
from playhouse.migrations import MigrationError, Runner
from playhouse.pool import PooledDatabase

from oar.core.config import Config
from oar.core.db import database, open_database
from oar.owner.bootstrap import MIGRATIONS

# How to point a command at the relay it belongs to, said after every "no relay here".
HOW_TO_POINT = (
    "Give the relay's data dir with --data-dir (python -m oar --data-dir /path/to/var …) or "
    "OAR_DATA_DIR, or its DATABASE_URL, as the relay was started with."
)


class NoRelayDatabase(Exception):
    """There is no relay's database where the command looked; the message says where and what to do."""


def where(config: Config) -> str:
    """The database a command looks at, as a person reads it: the SQLite file, or the
    PostgreSQL URL without its password."""
    if not config.database_url:
        return str(config.sqlite_path.resolve())
    parts = urlsplit(config.database_url)
    if parts.password is not None:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:…@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def open_relay_database(config: Config) -> None:
    """Bind the database proxy to the relay's database; NoRelayDatabase when there is none,
    when it cannot be opened, or when it holds no relay. Never creates a file or a table."""
    if not config.database_url and not config.sqlite_path.is_file():
        raise NoRelayDatabase(f"there is no relay database at {where(config)}. {HOW_TO_POINT} Nothing was created.")
    try:
        open_database(config)
        with database.connection_context():
            migrations = Runner(database.obj, str(MIGRATIONS)).status()
        if isinstance(database.obj, PooledDatabase):
            # Nothing kept open: `oar worker` forks its workers next, which must not inherit a connection.
            database.obj.close_idle()
    except (peewee.PeeweeException, MigrationError, OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise NoRelayDatabase(f"cannot open the relay database at {where(config)} ({first_line}). {HOW_TO_POINT}") from None
    if not any(migration.applied for migration in migrations):
        raise NoRelayDatabase(f"the database at {where(config)} holds no relay (it has none of its tables). {HOW_TO_POINT}")
    pending = [migration for migration in migrations if migration.applied is None and migration.path is not None]
    if pending:
        raise NoRelayDatabase(
            f"the relay database at {where(config)} is older than this code ({len(pending)} migrations to apply): "
            "run `python -m oar migrate` with the same settings, or start the relay, which applies them."
        )
