"""Time helpers. Only thin edges read the clock; logic takes `now` as an argument."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now in UTC, as the naive datetime the database stores."""
    return datetime.now(UTC).replace(tzinfo=None)


def iso(moment: datetime | str | None) -> str | None:
    """`2026-11-02T02:00:00.000Z` for a naive UTC datetime, as results show times; also for
    the text SQLite keeps a naive datetime as (`2026-11-02 02:00:00[.ffffff]`), which a row
    read only to be shown may carry instead (`prepared.as_stored`)."""
    if moment is None:
        return None
    if isinstance(moment, str):
        return _iso_of_stored(moment)
    # isoformat cuts microseconds down to milliseconds as `// 1000` does, a third of strftime's cost.
    return moment.isoformat(timespec="milliseconds") + "Z"


def _iso_of_stored(text: str) -> str | None:
    """`iso` of a datetime's stored text, cut and joined: the same characters as parsing it and
    formatting the datetime, in about 2,000 instructions instead of 12,000 (isoformat's C
    formatting goes through printf). Text of any other shape is parsed."""
    if len(text) == 26 and text[10] == " " and text[19] == ".":
        return text[:10] + "T" + text[11:23] + "Z"
    if len(text) == 19 and text[10] == " ":
        return text[:10] + "T" + text[11:] + ".000Z"
    return iso(datetime.fromisoformat(text))
