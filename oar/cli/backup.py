"""`oar backup <file>`: a copy of a running relay's SQLite database (docs/operations.md#backing-up-and-restoring).

SQLite's online backup API copies the database page by page inside one read transaction, so the
copy is the database as it was at one moment, with what the `-wal` file holds, while the relay
goes on writing (WAL lets readers and the writer run together). Copying `oar.db` with `cp` would
miss the `-wal` file, or catch it half-written.

The copy is written beside the destination under a temporary name, checked (`PRAGMA
integrity_check`) and then renamed, so a file under the destination's name is always a whole
backup. An existing file is not overwritten. A PostgreSQL relay is backed up with its own tools
(`pg_dump`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from oar.cli.relay_database import open_relay_database
from oar.core.config import Config


class BackupRefused(Exception):
    """Why no backup was made; the message says what to do."""


def back_up(config: Config, destination: Path) -> tuple[int, int]:
    """Copy the relay's SQLite database to `destination`; returns its pages and bytes."""
    if config.database_url:
        raise BackupRefused(
            "this relay keeps its data in PostgreSQL (DATABASE_URL): back it up with PostgreSQL's own tools, "
            "e.g. pg_dump --format=custom --file=oar.dump <database> (docs/operations.md#backing-up-and-restoring). "
            "Nothing was written."
        )
    open_relay_database(config)  # a relay's database is there, with its tables; else it says how to point at one
    destination = destination.expanduser().absolute()
    if destination.exists():
        raise BackupRefused(f"{destination} exists already; give a new file name. Nothing was written.")
    if not destination.parent.is_dir():
        raise BackupRefused(f"there is no folder {destination.parent}. Nothing was written.")
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    busy_seconds = config.time("SQLITE_BUSY_SECONDS")
    try:
        with contextlib.closing(sqlite3.connect(config.sqlite_path, timeout=busy_seconds)) as source, \
                contextlib.closing(sqlite3.connect(partial)) as copy:
            source.backup(copy)  # every page in one step: one consistent moment
            if copy.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise BackupRefused("the copy did not pass SQLite's integrity check. Nothing was written.")
            pages, page_size = copy.execute("PRAGMA page_count").fetchone()[0], copy.execute("PRAGMA page_size").fetchone()[0]
        os.replace(partial, destination)
    except sqlite3.Error as error:
        raise BackupRefused(f"SQLite could not copy the database ({error}). Nothing was written.") from None
    finally:
        partial.unlink(missing_ok=True)
    return pages, pages * page_size
