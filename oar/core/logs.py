"""Logging: human-readable lines by default, one JSON object per line with OAR_LOG_FORMAT=json."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any


class HiddenSQLParameters(logging.Filter):
    """Keeps the SQL of peewee's DEBUG lines and drops their parameters.

    peewee logs every query as `(sql, params)`; the parameters carry what is written: the
    page's signing key, sign-in ids, provider keys, prompts. The SQL alone is what a person
    debugging needs (docs/operations.md#logs).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, tuple) and len(record.msg) == 2:
            sql, params = record.msg
            record.msg = f"{sql} [{len(params)} parameters hidden]" if params else str(sql)
            record.args = None
        return True


_HIDDEN_SQL_PARAMETERS = HiddenSQLParameters()


def hide_sql_parameters() -> None:
    """Install the filter on peewee's logger (once; every process that opens the database)."""
    peewee_log = logging.getLogger("peewee")
    if _HIDDEN_SQL_PARAMETERS not in peewee_log.filters:
        peewee_log.addFilter(_HIDDEN_SQL_PARAMETERS)


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):  # a call's line (`call_line`): its fields as the entry's own
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


# The logger of the one line per call (agents' relay_tool calls, the owner's writes), and the
# variable that turns those lines off while the rest of the log stays (docs/operations.md#logs).
CALL_LOGGER = "oar.calls"
CALL_LOG_VARIABLE = "OAR_CALL_LOG"
CALL_LOG_CHOICES = ("on", "off")
_call_log = logging.getLogger(CALL_LOGGER)


def call_line(kind: str, fields: dict[str, Any]) -> None:
    """One call's line at INFO: `<kind> key=value …` as text, the fields as they are in JSON.

    A value with a space, a quote or a line break is written as a JSON string, so that a
    conversation's title cannot start a line of its own or read as another field."""
    if not _call_log.isEnabledFor(logging.INFO):
        return
    shown = " ".join(f"{key}={_plain_or_quoted(value)}" for key, value in fields.items())
    _call_log.info("%s %s", kind, shown, extra={"fields": fields})


def _plain_or_quoted(value: Any) -> str:
    text = str(value)
    if text and not any(c.isspace() or c in "\"'=\\" for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


# HTTP client libraries that log every request they send at INFO ("HTTP Request: POST …"): the
# stdio MCP bridge forwards each call over HTTP, so its stderr would hold a line per call. Their
# warnings and errors still show, and at OAR_LOG_LEVEL=DEBUG all of it.
CHATTY_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore")


def configure() -> None:
    handler = logging.StreamHandler()
    if os.environ.get("OAR_LOG_FORMAT", "").lower() == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("OAR_LOG_LEVEL", "INFO").upper())
    for name in CHATTY_HTTP_LOGGERS:  # at DEBUG, everything
        logging.getLogger(name).setLevel(logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING)
    call_log = os.environ.get(CALL_LOG_VARIABLE, "on").strip().lower()
    _call_log.setLevel(logging.WARNING if call_log == "off" else logging.NOTSET)
    if call_log not in CALL_LOG_CHOICES:
        _call_log.warning("%s must be on or off, not %r; the call log stays on", CALL_LOG_VARIABLE, call_log[:40])
