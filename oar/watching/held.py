"""The held rows (`HeldEvent`): one per watcher and event, or one bundle of a batch's events
(docs/events.md#how-events-are-held), with its due time, until delivered.

An ingestion writes them (`insert`), a delivery claims them (`claim`), and both look up a
watcher's next due time, open window and recent wake-ups. These are plain SQL: a wide
fan-out writes millions of rows and makes these look-ups for hundreds of watchers, and
building them as peewee queries costs several times the database's own work.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

import peewee as pw

from oar.core.db import database, is_sqlite
from oar.core.models import EventLine, HeldEvent, Setting
from oar.watching import delivery

CURSOR_KEY = "delivery_cursor"


class Lost(Exception):
    """Another worker claimed the same batch or rows: roll back, do nothing."""


# Held rows are written this many at a time (14 columns each: far below SQLite's limit of
# bound variables per statement).
HOLD_INSERT_ROWS = 400
# Held rows claimed by one UPDATE when a delivery carries many (bound variables per statement).
CLAIM_CHUNK = 5000

HELD_FIELDS = ("watcher", "event_seq", "subscription_id", "kind", "line", "count", "seqs", "position", "urgent",
               "reason", "turn_id", "due_at", "created_at", "dropped")
# Event lines written at a time (3 columns each).
LINE_INSERT_ROWS = 1000


def cursor() -> int:
    """The engine's cursor: the last event number ingested."""
    row = Setting.get_or_none(Setting.key == CURSOR_KEY)
    return 0 if row is None else int(row.value)


def insert(rows: list[tuple[Any, ...]]) -> None:
    """Insert held rows as multi-row INSERTs written by hand: a wide fan-out writes millions,
    and building them as peewee queries cost several times the database's own work. A
    watcher gets an event once (the unique index): a row already there stays."""
    db = database.obj
    columns = ", ".join(f'"{HeldEvent._meta.fields[name].column_name}"' for name in HELD_FIELDS)
    marks = "(" + ", ".join([db.param] * len(HELD_FIELDS)) + ")"
    verb, tail = ("INSERT OR IGNORE", "") if is_sqlite() else ("INSERT", " ON CONFLICT DO NOTHING")
    for chunk in pw.chunked(rows, HOLD_INSERT_ROWS):
        values = ", ".join([marks] * len(chunk))
        db.execute_sql(f'{verb} INTO "{HeldEvent._meta.table_name}" ({columns}) VALUES {values}{tail}',
                       [value for row in chunk for value in row])


def insert_lines(lines: list[tuple[int, str, str]]) -> None:
    """Write (seq, kind, line) once for every bundle that carries it; one already there stays."""
    db = database.obj
    verb, tail = ("INSERT OR IGNORE", "") if is_sqlite() else ("INSERT", " ON CONFLICT DO NOTHING")
    for chunk in pw.chunked(lines, LINE_INSERT_ROWS):
        values = ", ".join([f"({db.param}, {db.param}, {db.param})"] * len(chunk))
        db.execute_sql(f'{verb} INTO "{EventLine._meta.table_name}" ("seq", "kind", "line") VALUES {values}{tail}',
                       [value for row in chunk for value in row])


class Lines:
    """The event lines of bundles, read by runs of event numbers and kept while one delivery
    pass runs: the watchers of a wide fan-out carry the same runs (lines never change)."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, str], str] = {}
        self.read: set[tuple[int, int, str]] = set()
        self.done: dict[tuple[tuple[Any, ...], ...], list[tuple[int, str, str]]] = {}
        self.spans: dict[tuple[tuple[Any, ...], ...], Span | None] = {}

    def of(self, runs: list[list[Any]]) -> list[tuple[int, str, str]]:
        """(seq, kind, line) of every event in `runs` ([first, last, kind] each), in order; the
        same list again for the same runs (the watchers of a wide fan-out carry the same)."""
        key = tuple(tuple(run) for run in runs)
        if (done := self.done.get(key)) is not None:
            return done
        found: list[tuple[int, str, str]] = []
        for first, last, kind in runs:
            if (first, last, kind) not in self.read:
                rows = database.execute_sql(
                    'SELECT "seq", "line" FROM "event_line" WHERE "kind" = ? AND "seq" BETWEEN ? AND ?'.replace(
                        "?", database.obj.param), [kind, first, last]).fetchall()
                self.known.update(((int(seq), kind), str(line)) for seq, line in rows)
                self.read.add((first, last, kind))
            found.extend((seq, kind, self.known[(seq, kind)]) for seq in range(first, last + 1) if (seq, kind) in self.known)
        self.done[key] = found
        return found

    def span(self, runs: list[list[Any]]) -> Span | None:
        """`of(runs)` as a Span when its numbers only rise, else None; the same for the same runs."""
        key = tuple(tuple(run) for run in runs)
        if key not in self.spans:
            found = self.of(runs)
            rising = all(a[0] < b[0] for a, b in zip(found, found[1:], strict=False))
            kinds: dict[str, int] = {}
            for _seq, kind, _line in found:
                kinds[kind] = kinds.get(kind, 0) + 1
            self.spans[key] = Span(found[0][0] if found else 0, found[-1][0] if found else 0,
                                   [(kind, line) for _seq, kind, line in found], kinds) if rising else None
        return self.spans[key]


class Span(NamedTuple):
    """A bundle's lines in event order: the first and last event numbers, (kind, line) of
    each event, and how many of each kind."""

    first: int
    last: int
    lines: list[tuple[str, str]]
    kinds: dict[str, int]


def claim(row_ids: list[int], now: datetime, message_id: str) -> int:
    """Mark held rows delivered by `message_id` unless delivered or dropped already; returns
    how many (plain SQL for the same reason as `insert`)."""
    db = database.obj
    claimed = 0
    # Sliced, not `peewee.chunked`: that pads every chunk to its full size first (5,000
    # items for the few rows of a delivery).
    for chunk in (row_ids[start:start + CLAIM_CHUNK] for start in range(0, len(row_ids), CLAIM_CHUNK)):
        marks = ", ".join([db.param] * len(chunk))
        sql = (f'UPDATE "held_event" SET "delivered_at" = {db.param}, "message_id" = {db.param} '
               f'WHERE "id" IN ({marks}) AND "delivered_at" IS NULL AND "dropped" = {db.param}')
        claimed += db.execute_sql(sql, [now, message_id, *chunk, False]).rowcount
    return claimed


def undelivered(watcher_id: str) -> pw.Expression:
    return (HeldEvent.watcher == watcher_id) & HeldEvent.delivered_at.is_null() & (HeldEvent.dropped == False)  # noqa: E712


# The per-watcher look-ups an ingestion makes for every watcher it touches, as plain SQL:
# with hundreds of watchers, building them as peewee queries costs more than running them.
# `?` stands for the driver's parameter mark. Each is an index seek (see HeldEvent's indexes).
_FIRST_DUE_SQL = (
    'SELECT "due_at" FROM "held_event" WHERE "watcher_id" = ? AND "delivered_at" IS NULL AND "dropped" = ? '
    'ORDER BY "due_at" LIMIT 1'
)
_SLOT_SQL = (
    'SELECT "due_at" FROM "held_event" WHERE "watcher_id" = ? AND "reason" = ? AND "due_at" > ? '
    'AND "delivered_at" IS NULL AND "dropped" = ? ORDER BY "due_at" LIMIT 1'
)
_EARLIEST_AFTER_SQL = (
    'SELECT "due_at" FROM "held_event" WHERE "delivered_at" IS NULL AND "due_at" > ? AND "dropped" = ? '
    'ORDER BY "due_at" LIMIT 1'
)
_WAKEUPS_SQL = 'SELECT COUNT(*) FROM "wakeup" WHERE "watcher_id" = ? AND "delivered_at" > ?'


def _scalar(sql: str, params: list[Any]) -> Any:
    row = database.execute_sql(sql.replace("?", database.obj.param), params).fetchone()
    return None if row is None else row[0]


def next_due(watcher_id: str) -> datetime | None:
    due = _scalar(_FIRST_DUE_SQL, [watcher_id, False])
    return None if due is None else HeldEvent.due_at.python_value(due)


def earliest_due_after(after: datetime) -> datetime | None:
    """The earliest due time of any undelivered row after `after` (the clock's timer)."""
    due = _scalar(_EARLIEST_AFTER_SQL, [after, False])
    return None if due is None else HeldEvent.due_at.python_value(due)


def open_slots(watcher_id: str, now: datetime) -> list[delivery.Held]:
    """The watcher's open window and cap digest (the earliest of each after `now`)."""
    slots = []
    for reason in (delivery.WINDOW, delivery.CAP):
        due = _scalar(_SLOT_SQL, [watcher_id, reason, now, False])
        if due is not None:
            slots.append(delivery.Held(0, HeldEvent.due_at.python_value(due), reason))
    return slots


def wakeups(watcher_id: str, now: datetime, engine: delivery.Timing) -> int:
    return int(_scalar(_WAKEUPS_SQL, [watcher_id, now - timedelta(seconds=engine.hour_seconds)]) or 0)
