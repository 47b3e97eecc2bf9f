"""What a statement would return, without running it: PostgreSQL's Describe.

The types of its parameters (``session/params.py``) and the names and types of its
result columns, from binding alone (``catalog/bind.py``): nothing runs on Spark and no
table file is read. A statement that returns no rows (DDL, INSERT, SET …) has none.
SHOW and system-table SELECTs are answered from the catalog, as their execution is: a
client's catalog question is described by the path that answers it (``Catalog``,
DuckDB over the system relations, empty), so its RowDescription agrees with its rows.

A query's description is kept for the catalog state it was bound at: libpq's drivers
(psycopg, JDBC's extended mode…) Describe every statement they run, and binding a query
costs more Python than running a catalog one from the catalog cache. It is a function of
the catalog's version (not its read time: binding reads no data), the search path that
resolves its names, its text and the declared parameter types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from mzflow import caches
from mzflow.catalog import names
from mzflow.catalog.bind import bind
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import Snapshot
from mzflow.errors import MalformedQuery
from mzflow.session import params as params_mod
from mzflow.session import subscribe as subscribe_mod
from mzflow.session.result import Result, value_types
from mzflow.session.select import replace_functions
from mzflow.sql import ast, session_ast
from mzflow.sql.parse_cache import parse

MULTIPLE = "cannot insert multiple commands into a prepared statement"
# A query as its execution prepares it (the session's functions evaluated), and its
# result columns and types if the catalog path answers it (Selects.described).
Catalog = Callable[[exp.Query], "tuple[exp.Query, tuple[list[str], list[str]] | None]"]
_KEPT = caches.lru("session.descriptions", 1024)


@dataclass(frozen=True)
class Description:
    """``params``: the types of ``$1 … $n``; ``columns`` and ``types``: the result's (both
    empty for a statement that returns no rows). Types as ``Result.types`` prints them."""

    params: list[str]
    columns: list[str]
    types: list[str]


def one_statement(sql: str) -> exp.Expr | None:
    """The one statement of ``sql`` (None when it has none), as the extended query
    protocol takes statements."""
    statements = parse(sql)
    if len(statements) > 1:
        raise MalformedQuery(MULTIPLE)
    return statements[0] if statements else None


def describe(snap: Snapshot, sql: str, param_types: Sequence[str | None] | None,
             show: Callable[[ast.Show], Result],
             cursor: Callable[[str], tuple[list[str], list[str]]],
             allowed: Callable[[exp.Expr], None], catalog: Catalog | None = None
             ) -> Description:
    """``show`` answers a SHOW (from the catalog); ``cursor`` gives an open cursor's
    columns and types (for FETCH); ``allowed`` raises if the transaction refuses the
    statement (a failed one refuses all but COMMIT and ROLLBACK, even to describe)."""
    key = (snap.installation_id, snap.version, names.search_path(), sql,
           tuple(param_types or ()))
    if (kept := _KEPT.get(key)) is not None:
        query, found = kept
        allowed(query)  # reads the statement's kind, which a kept one shares with sql's
        return _copy(found)
    stmt = one_statement(sql)
    if stmt is None:
        return Description([], [], [])
    allowed(stmt)
    query = stmt if isinstance(stmt, ast.AsOf | exp.Query) else None
    stmt, types = params_mod.describe(snap, stmt, param_types)
    columns, column_types = result_columns(snap, stmt, show, cursor, catalog)
    found = Description(types, columns, column_types)
    if query is not None:
        _KEPT[key] = (query, _copy(found))
    return found


def _copy(d: Description) -> Description:
    return Description(list(d.params), list(d.columns), list(d.types))


def result_columns(snap: Snapshot, stmt: exp.Expr, show: Callable[[ast.Show], Result],
                   cursor: Callable[[str], tuple[list[str], list[str]]],
                   catalog: Catalog | None = None) -> tuple[list[str], list[str]]:
    if isinstance(stmt, ast.AsOf | exp.Query):
        return query_columns(snap, stmt, catalog)
    if isinstance(stmt, ast.Explain):
        return ["Optimized Plan"], ["text"]
    if isinstance(stmt, ast.Subscribe):
        opts = subscribe_mod.options_of(stmt)
        return subscribe_mod.columns(subscribe_mod.source_of(snap, stmt), opts["PROGRESS"])
    if isinstance(stmt, ast.Show):
        result = show(stmt)
        return result.columns, result.types or value_types(result.rows, len(result.columns))
    if isinstance(stmt, session_ast.Fetch):
        return cursor(stmt.this.name)
    return [], []


def query_columns(snap: Snapshot, stmt: exp.Expr, catalog: Catalog | None = None
                  ) -> tuple[list[str], list[str]]:
    """A query's result columns, from binding it (as a read binds it), or as the
    catalog path answers it."""
    query = stmt.this if isinstance(stmt, ast.AsOf) else stmt
    assert isinstance(query, exp.Query)
    if catalog is not None and not isinstance(stmt, ast.AsOf):
        query, found = catalog(query)
        if found is not None:
            return found
    bound = bind(snap, replace_functions(query, snap))
    return ([c.name for c in bound.columns], [display_name(c.type) for c in bound.columns])
