"""The parts of peewee (and its `playhouse.pool`) that are not its public API but that the relay
relies on, each behind one function here: no other module touches them.

Who needs them: `oar/core/prepared.py` builds a hot query's SQL once and turns rows into model
instances itself (the selected columns, the row type, aliases, the cursor wrapper, an instance's
stored values); `oar/core/db.py` caps the idle SQLite connections a pool keeps and drops the ones
a forked child inherited (the pool's heap, its in-use map, its lock, the thread's connection
state); `oar/watching/matching.py` compares subscriptions by their stored values.
`Model._meta` (fields, table name, sorted fields, primary key) is peewee's documented metadata
and is used directly where needed.

Upgrading peewee (pinned in requirements.txt):
1. Run `tests/test_library_adapters.py`: each function here is checked against the installed
   peewee, and a failure names the internal that moved.
2. Read peewee's changes for `Query._returning`, `Query._row_type`, `Query._get_cursor_wrapper`,
   `Alias._alias`, `Model.__data__`, `Model(__no_default__=1)`, `Database._state.ctx`, and for
   `playhouse.pool.PooledDatabase`: `_connections` (a heap of (timestamp, counter, connection)),
   `_in_use`, `_pool_lock`, and the `_close(conn, close_conn)` / `_close_raw(conn)` hooks that
   `oar.core.db.SqlitePool` overrides and calls.
3. Run `tests/test_prepared.py` and the database tests on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable
from typing import Any

import peewee
from playhouse.pool import PooledDatabase

# Queries -------------------------------------------------------------------------------------


def selected(query: Any) -> list[Any]:
    """The columns and expressions a SELECT returns, in order (fields, aliases, subqueries)."""
    return list(query._returning)


def selecting(query: Any, columns: list[Any]) -> Any:
    """A copy of `query` that returns exactly `columns`, its clauses (joins, where, order, limit)
    kept as they are. Unlike `.select()`, it neither expands models into fields nor marks the
    query's columns as chosen by hand: only the SQL's column list changes."""
    copy = query.clone()
    copy._returning = list(columns)
    return copy


def row_type(query: Any) -> Any:
    """How a query's rows come back: None for model instances, else a `peewee.ROW` member
    (`.tuples()`, `.namedtuples()`, `.dicts()`, `.objects()`)."""
    return query._row_type


def alias_name(node: peewee.Alias) -> str:
    """The name an aliased expression is selected as (`expression.alias(name)`)."""
    return str(node._alias)  # type: ignore[attr-defined]


def rows_from_cursor(query: Any, cursor: Any) -> Iterable[Any]:
    """The rows of `cursor`, which ran `query`'s SQL, made as peewee makes that query's rows."""
    return query._get_cursor_wrapper(cursor)


# Model instances -----------------------------------------------------------------------------


def stored_values(instance: peewee.Model) -> dict[str, Any]:
    """A model instance's field values by field name, as read or last set (not a copy)."""
    return instance.__data__


def instance_of(model: type[peewee.Model], values: dict[str, Any]) -> peewee.Model:
    """An instance of `model` holding `values` (by field name) as if read from the database:
    no defaults filled in, nothing marked dirty."""
    instance = model(__no_default__=1)
    instance.__data__ = values
    return instance


# Connections ---------------------------------------------------------------------------------


def in_connection_context(database: Any) -> bool:
    """Whether this thread's connection is held open by a `connection_context()` (or a
    transaction's context): closing it then would pull it from under that block."""
    return bool(database._state.ctx)


def pool_lock(pool: PooledDatabase) -> threading.RLock:
    """The lock a pool holds while it hands out or takes back connections."""
    return pool._pool_lock


def trim_idle(pool: PooledDatabase, keep: int, close: Callable[[Any], Any]) -> None:
    """Close the oldest idle connections of `pool` until `keep` are left. Hold `pool_lock(pool)`."""
    idle = pool._connections
    while len(idle) > keep:
        _, _, oldest = heapq.heappop(idle)
        close(oldest)


def take_all_connections(pool: PooledDatabase) -> list[Any]:
    """Empty `pool` without closing anything: its idle connections and the records of those in use
    (each a `PoolConnection`, which holds the connection), and this thread's connection state.
    For a forked child, whose inherited connections belong to its parent."""
    taken = [conn for _, _, conn in pool._connections] + list(pool._in_use.values())
    pool._connections = []
    pool._in_use = {}
    pool._state.reset()
    return taken
