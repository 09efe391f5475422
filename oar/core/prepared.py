"""Hot-path queries whose SQL text is built once per process (docs/benchmarks.md#reading-them).

Building SQL text is most of what a peewee query costs on the read path: the query tree is
walked column by column on every call, for a statement that is the same every time but for
its parameters. A `Prepared` query is written with peewee as usual, once, with a placeholder
for every value that changes; its SQL text (for the database in use, SQLite or PostgreSQL) and
the positions of those placeholders among its parameters are kept, and each call only binds
new values and turns the rows into model instances the way peewee does.

Only plain comparisons and `IN` lists may take placeholders: an operator that rewrites its
value (`startswith`, `contains`) would hide the placeholder, and building refuses then.

On SQLite a query's rows come back as one row holding them all as JSON (`_as_one_row`):
Python's sqlite3 module lets go of the GIL at every row it steps to, and with a few requests
in one web process each time is a hand-over to another thread and back, which cost a
multi-row read more than its own work (docs/benchmarks.md#reads-the-gil-at-every-row).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import peewee

from oar.core import peewee_internals
from oar.core.db import database

# Longer `IN` lists (the owner's page, many sessions at once) are rare: their SQL is not kept.
KEPT_LIST_LENGTH = 128
# A placeholder's text; no real value contains NUL characters (the relay refuses to store them).
_SLOT = "\x00oar-prepared-{}\x00"


@dataclass(frozen=True)
class _Compiled:
    query: Any  # the peewee query the SQL came from: it turns rows into model instances
    sql: str
    params: tuple[Any, ...]  # the fixed parameters, placeholders among them
    slots: tuple[int, ...]  # for each value given to `rows`, in order, its index in `params`
    # Turns a row into a model instance (or a tuple); None: peewee's own cursor wrapper does.
    make: Callable[[Sequence[Any]], Any] | None = None
    # SQLite: the same query giving all its rows as one JSON text (`_as_one_row`), same parameters.
    one_row_sql: str | None = None


class Prepared:
    """A query built by `build(*placeholders)`; `rows(*values)` runs it with those values.

    A value given as a list or tuple stands for an `IN` list (never empty: callers answer an
    empty list themselves): the SQL is kept for each length seen up to `KEPT_LIST_LENGTH`, and
    built for each call beyond. Values are bound as given, not through the fields' `db_value`:
    give them as the column's Python type (str, int, bool, datetime), as peewee would bind them.
    """

    def __init__(self, build: Callable[..., Any]) -> None:
        self._build = build
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}
        self._lock = threading.Lock()

    def rows(self, *values: Any) -> list[Any]:
        compiled = self._compiled_for(values)
        sql, params = _bound(compiled, values)
        if compiled.one_row_sql is not None and compiled.make is not None:
            (text,) = database.execute_sql(compiled.one_row_sql, params).fetchone()
            return [compiled.make(row) for row in orjson.loads(text)] if text else []
        cursor = database.execute_sql(sql, params)
        if compiled.make is None:
            return list(peewee_internals.rows_from_cursor(compiled.query, cursor))
        return [compiled.make(row) for row in cursor.fetchall()]

    def first(self, *values: Any) -> Any:
        found = self.rows(*values)
        return found[0] if found else None

    def execute(self, *values: Any) -> int:
        """Run a prepared `UPDATE` or `DELETE`; the number of rows it changed. A value that
        a field would convert (a JSON field's) is given converted and its placeholder wrapped
        in `peewee.Value(placeholder, converter=False)`, so that peewee keeps it as it is."""
        cursor = database.execute_sql(*_bound(self._compiled_for(values), values))
        return int(cursor.rowcount)

    def insert(self, *values: Any) -> Any:
        """Run a prepared `INSERT` of one row; its primary key. Give every column (callable
        defaults would be called once, when the SQL is built), and JSON fields' values converted
        as for `execute`."""
        cursor = database.execute_sql(*_bound(self._compiled_for(values), values))
        if database.obj.returning_clause:  # the INSERT ends in RETURNING its key (PostgreSQL)
            return cursor.fetchone()[0]
        return cursor.lastrowid

    def _compiled_for(self, values: Sequence[Any]) -> _Compiled:
        shape = (type(database.obj), *(len(v) if isinstance(v, (list, tuple)) else None for v in values))
        return self._compiled.get(shape) or self._compile(shape)

    def _compile(self, shape: tuple[Any, ...]) -> _Compiled:
        counter = iter(range(1_000_000))
        placeholders: list[Any] = []
        for length in shape[1:]:
            if length is None:
                placeholders.append(_SLOT.format(next(counter)))
            else:
                placeholders.append([_SLOT.format(next(counter)) for _ in range(length)])
        query = self._build(*placeholders)
        sql, params = query.sql()
        where = {value: index for index, value in enumerate(params) if isinstance(value, str) and value.startswith("\x00")}
        wanted = [_SLOT.format(number) for number in range(next(counter))]
        if sorted(where) != sorted(wanted):
            raise ValueError(f"prepared query: placeholders changed by the query ({sql})")
        make = _maker(query) if isinstance(query, peewee.SelectBase) else None
        compiled = _Compiled(
            query=query, sql=sql, params=tuple(params), slots=tuple(where[slot] for slot in wanted), make=make,
            one_row_sql=_as_one_row(query, params) if make is not None and issubclass(shape[0], peewee.SqliteDatabase) else None,
        )
        if all(length is None or length <= KEPT_LIST_LENGTH for length in shape[1:]):
            with self._lock:
                self._compiled[shape] = compiled
        return compiled


def _bound(compiled: _Compiled, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The compiled SQL and its parameters with `values` in the placeholders' places."""
    params = list(compiled.params)
    flat = [item for value in values for item in (value if isinstance(value, (list, tuple)) else (value,))]
    for index, value in zip(compiled.slots, flat, strict=True):
        params[index] = value
    return compiled.sql, params


# Columns whose JSON text (SQLite's json_array) is not their value: a REAL keeps 15 digits
# there, and a BLOB is refused.
_NOT_AS_JSON = (peewee.FloatField, peewee.DecimalField, peewee.BlobField)


def _as_one_row(query: Any, params: Sequence[Any]) -> str | None:
    """SQLite: `query` as a query of one row and one column, its rows as a JSON array of arrays
    in its order; None when one of its columns would not come back as it is stored.

    Each row becomes `json_array(...)` of its columns, and the rows are joined in an outer
    query. They are joined in the query's order: SQLite keeps the ORDER BY of a subquery in
    FROM when its outer query aggregates with anything but count(), min() or max(), and reads
    the subquery's rows in that order. JSON keeps what the columns hold as stored: text,
    integers (booleans are integers in SQLite), NULL; a column of another kind (above), or an
    extra column that is not a flag (`EXISTS`) or a one-column subquery of such a field, keeps
    the query as it is."""
    columns = [node.node if isinstance(node, peewee.Alias) else node for node in peewee_internals.selected(query)]
    for column in columns:
        if isinstance(column, peewee.Field):
            if isinstance(column, _NOT_AS_JSON):
                return None
        elif isinstance(column, peewee.Select):
            inner = peewee_internals.selected(column)
            if len(inner) != 1 or not isinstance(inner[0], peewee.Field) or isinstance(inner[0], _NOT_AS_JSON):
                return None
        elif not (isinstance(column, peewee.Function) and (column.name or "").upper() == "EXISTS"):
            return None
    one = peewee_internals.selecting(query, [peewee.fn.json_array(*columns).alias("oar_row")])
    sql, one_params = one.sql()
    if list(one_params) != list(params):  # the columns held no parameters of their own: kept as they were
        return None
    return f"SELECT '[' || group_concat(oar_row, ',') || ']' FROM ({sql})"


# Fields whose values come from both databases as Python wants them (str, int): no conversion.
_AS_STORED = (peewee.CharField, peewee.TextField, peewee.IntegerField, peewee.AutoField)


def _converter(field: peewee.Field) -> Callable[[Any], Any]:
    """`field.python_value`; for a flag, `bool` itself (what peewee calls for a value that is not
    NULL, and the rows only convert those), without a method's frame per value; for a datetime
    stored as text (SQLite), `datetime.fromisoformat` first, which is what peewee ends up calling
    after a few steps of its own (and falls back to when that fails)."""
    if type(field) is peewee.BooleanField:
        return bool
    if type(field) is not peewee.DateTimeField:
        return field.python_value
    slow = field.python_value

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            try:  # not contextlib.suppress: building it cost more than the parse (a read makes ~15)
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        return slow(value)

    return convert


def _maker(query: Any) -> Callable[[Sequence[Any]], Any] | None:
    """A faster row-to-instance step than peewee's cursor wrapper (a third of a read's time), for
    a query that selects fields of its model: the instance gets its values as peewee's wrapper
    would leave them (converted by each field's `python_value`, nothing marked dirty). A model
    query may also select aliased expressions after its fields (an `EXISTS` flag): each becomes
    a plain attribute of the instance, as stored. `.namedtuples()` gives each row as a named
    tuple with the columns' names (no model instance: the cheapest rows that read like one),
    extras included."""
    model = query.model
    returning = peewee_internals.selected(query)
    row_type = peewee_internals.row_type(query)
    fields = [node for node in returning if isinstance(node, peewee.Field)]
    extras = returning[len(fields):]
    if not all(field.model is model for field in fields) or fields != returning[: len(fields)]:
        return None
    if extras and (
        row_type not in (None, peewee.ROW.NAMED_TUPLE) or not all(isinstance(node, peewee.Alias) for node in extras)
    ):
        return None
    names = [field.name for field in fields]
    converters = [None if type(field) in _AS_STORED else _converter(field) for field in fields]
    # Only the columns that need it are converted (most come as stored).
    converting = [(index, convert) for index, convert in enumerate(converters) if convert is not None]

    def converted(row: Sequence[Any]) -> list[Any]:
        values = list(row)
        for index, convert in converting:
            if values[index] is not None:
                values[index] = convert(values[index])
        return values

    if row_type == peewee.ROW.TUPLE:
        if not converting:
            return tuple
        return lambda row: tuple(converted(row))
    if row_type == peewee.ROW.NAMED_TUPLE:
        # Named by column: a foreign key's value reads `group_id`, as on a model instance.
        columns = [field.column_name for field in fields] + [peewee_internals.alias_name(node) for node in extras]
        shape = collections.namedtuple(f"{model.__name__}Row", columns)  # type: ignore[misc]
        return lambda row: shape._make(converted(row) if converting else row)
    if row_type is not None:
        return None
    extra_names = [peewee_internals.alias_name(node) for node in extras]
    width = len(names)

    def make(row: Sequence[Any]) -> Any:
        instance = peewee_internals.instance_of(
            model, dict(zip(names, converted(row[:width]) if converting else row[:width], strict=True))
        )
        for name, value in zip(extra_names, row[width:], strict=True):
            setattr(instance, name, value)
        return instance

    return make


def as_stored(field: peewee.Field) -> Any:
    """`field` under its own name, its values as the database gives them instead of converted
    by the field: on SQLite a datetime's text, which `timeutil.iso` shows without parsing it
    (a parse and a format of each time of a listing were a tenth of its instructions,
    docs/benchmarks.md#reads-what-is-left-of-a-call-2026-12-06). For rows that only show the column;
    it goes after the model's fields, as the other extra columns."""
    return field.alias(field.column_name)


def scalars(rows: Sequence[Any]) -> list[Any]:
    """The first column of rows selected with `.tuples()`."""
    return [row[0] for row in rows]

