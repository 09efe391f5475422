"""Logging: human-readable lines by default, one JSON object per line with OAR_LOG_FORMAT=json."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime


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
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


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
