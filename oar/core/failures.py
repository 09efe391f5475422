"""The one answer to an exception no code expected (docs/errors.md), for every surface that
catches them: the dispatcher, the web app's handler, OpenClaw's tools and the team tools. Each
surface writes the answer in its own shape; what the answer says is decided here, once."""

from __future__ import annotations

import logging
import secrets

from oar.core.db import is_busy
from oar.core.errors import ActionError, database_busy


def unexpected(error: Exception, where: str, log: logging.Logger, *, running: str | None = None) -> ActionError:
    """The refusal for `error`, logged under `where` (e.g. `relay_tool send`) in the caller's
    `log`: `REMOTE_RELAY_DATABASE_BUSY` when the database could not be had in time (not a bug:
    try again), else `REMOTE_RELAY_INTERNAL` naming a log reference under which the traceback
    is logged, never shown. `running`: the action or tool the message names."""
    if is_busy(error):
        log.warning("%s: the database is busy (%s)", where, error)
        return database_busy()
    reference = secrets.token_hex(4)
    log.exception("%s failed (log reference %s)", where, reference)
    doing = f" while running {running}" if running else ""
    return ActionError(
        "REMOTE_RELAY_INTERNAL", f"The relay failed{doing} (log reference {reference}). Its changes were rolled back."
    )
