"""What a relay logged during a test: its processes' log files (from where they stood) and the
records of an in-thread web (this process's logging), for suites that assert no traceback."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.levelname} {record.name}: {text}")


class Logged:
    """The text logged since `watching()` began: `text()` reads the files' new parts."""

    def __init__(self, folder: Path, records: _Records) -> None:
        self.folder = folder
        self.records = records
        self.offsets = {path: path.stat().st_size for path in folder.glob("*.log")}

    def text(self) -> str:
        parts = list(self.records.lines)
        for path in sorted(self.folder.glob("*.log")):
            with path.open("rb") as log:
                log.seek(self.offsets.get(path, 0))
                parts.append(f"--- {path.name}\n{log.read().decode(errors='replace')}")
        return "\n".join(parts)

    def assert_no_traceback(self) -> None:
        text = self.text()
        for mark in ("Traceback", "REMOTE_RELAY_INTERNAL", "database is locked"):
            assert mark not in text, text[max(0, text.index(mark) - 1500):][:4000]


@contextlib.contextmanager
def watching(folder: Path) -> Iterator[Logged]:
    """Collect what the relay logs (its log files under `folder`, and this process's records) meanwhile."""
    records = _Records()
    root = logging.getLogger()
    root.addHandler(records)
    try:
        yield Logged(folder, records)
    finally:
        root.removeHandler(records)
