"""SELECTs without FROM, evaluated in process by ``engine/arrow_expr.py``.

A constant query (``SELECT 7.5::int8``, each branch of ``SELECT 1 UNION SELECT 2``)
costs Spark's fixed price per query for nothing; evaluating it with sqlglot's Python
executor gave Python's answers (7, not 8). Here each such SELECT is evaluated over a
one-row Arrow table with PostgreSQL's semantics, its values cast to the types the
binder chose (as a Spark read casts its result: ``spark.typed``), and replaced by a
read of a one-row table, which the executor (``engine/local.py``) only scans, sorts
or combines. What arrow_expr cannot evaluate raises ``Unsupported``: the SELECT stays,
and the executor's checks send the query to Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog import exprtypes
from mzflow.engine import arrow_expr
from mzflow.errors import Unsupported
from mzflow.storage.types import parse_type

# What a SELECT may have besides its select list to be evaluated here. ORDER BY and
# DISTINCT cannot change one row.
_CLAUSES = {"expressions", "where", "limit", "offset", "order", "distinct"}
_ONE_ROW = pa.table({"_mz_one": pa.array([True])})


def fold(query: exp.Query, tables: MutableMapping[str, tuple[Sequence[str], list[Any]]],
         names: Iterator[str], types: Sequence[str] | None = None) -> exp.Query:
    """``query`` with each SELECT arrow_expr can evaluate replaced by a read of a table
    added to ``tables``. ``types``: the query's bound output types, which its own
    SELECT (or each branch of its set operation) is cast to."""
    typed: dict[int, Sequence[str]] = {}

    def mark(q: exp.Expr) -> None:
        while isinstance(q, exp.Subquery | exp.Paren) and not q.alias:
            q = q.this
        if isinstance(q, exp.Select):
            typed[id(q)] = types or ()
        elif isinstance(q, exp.SetOperation):
            mark(q.left)
            mark(q.right)

    if types is not None:
        mark(query)
    for select in reversed(list(query.find_all(exp.Select))):  # innermost first
        if not _foldable(select):
            continue
        try:
            replacement = _fold(select, tables, next(names), typed.get(id(select)))
        except Unsupported:
            continue
        if select is query:
            query = replacement
        else:
            select.replace(replacement)
    return query


def _foldable(select: exp.Select) -> bool:
    if not select.expressions:  # SELECT with no columns: not a constant row to fold
        return False
    if any(v for k, v in select.args.items() if k not in _CLAUSES):
        return False
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return False
    return not any(node.find(exp.Query, exp.AggFunc, exp.Window, exp.Star, exp.Column)
                   for node in [*select.expressions, select.args.get("where") or exp.null()])


def _fold(select: exp.Select, tables: MutableMapping[str, tuple[Sequence[str], list[Any]]],
          name: str, types: Sequence[str] | None) -> exp.Select:
    where = select.args.get("where")
    keep = True
    if where is not None:
        keep = arrow_expr.evaluate(where.this, _ONE_ROW, clause="WHERE").to_pylist()[0] is True
    values = [value(e.unalias()) for e in select.expressions]
    if types:
        if len(types) != len(values):
            raise Unsupported("output columns the binder did not type")
        values = [cast(v, t) for v, t in zip(values, types, strict=True)]
    columns = [f"_c{i}" for i in range(len(values))]
    tables[name] = (columns, [tuple(v.to_pylist()[0] for v in values)] if keep else [])
    out = exp.select(*[exp.alias_(exp.column(c, quoted=True), e.alias_or_name or c,
                                  quoted=True)
                       for c, e in zip(columns, select.expressions, strict=True)]
                     ).from_(exp.to_table(name))
    for clause in ("limit", "offset"):
        out.set(clause, select.args.get(clause))
    return out


def value(node: exp.Expr) -> pa.Array:
    """A constant expression's value: a one-element array of its Arrow type."""
    if isinstance(node, exp.Literal) and node.is_string:
        return pa.array([node.this], pa.string())  # an unknown-typed literal alone is text
    if isinstance(node, exp.Null):
        return pa.nulls(1)
    v = arrow_expr.evaluate(node, _ONE_ROW, boolean=False)
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    if pa.types.is_interval(v.type):
        # Spark hands intervals back its own way; one representation per type.
        raise Unsupported("an interval result is not evaluated in process yet")
    return v


def cast(v: pa.Array, type_name: str) -> pa.Array:
    """``v`` as a value of the catalog type ``type_name``, as PostgreSQL converts it
    (what ``spark.typed`` does to a Spark read's columns)."""
    target = parse_type(type_name).arrow
    if v.type == target:
        return v
    if pa.types.is_null(v.type):
        return pa.nulls(len(v), target)
    return arrow_expr.cast(v, exprtypes.to_sqlglot(type_name))
