"""Run a query in-process: constants and the small in-memory system tables.

Catalog queries must answer in milliseconds and never start a JVM, so their
relational work (scans, joins, grouping, sorting, set operations) runs on
sqlglot's Python executor, which is only ever handed catalog-sized inputs.

That executor evaluates expressions by Python's rules (``7.5::int8`` is 7,
``concat(true, 'x')`` is ``'Truex'``), so it gets no expression it could get
wrong:

- a SELECT without FROM (a constant, or one branch of a UNION of constants) is
  evaluated by ``engine/arrow_expr.py``, PostgreSQL's semantics, over one row, and
  becomes a one-row table the executor only reads;
- what remains must be in the small set :func:`verify` knows Python evaluates as
  PostgreSQL does over catalog values (columns, integer and string literals,
  comparisons of like types, AND/OR/NOT, IS NULL, IN lists, LIKE, count/min/max,
  sums of integers). Anything else raises :class:`NotEvaluable`, naming it: a query
  of system tables is refused with it, and a constant query runs on Spark instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import count
from typing import Any

from sqlglot import exp
from sqlglot.errors import ExecuteError, OptimizeError
from sqlglot.executor import execute

from mzflow.catalog import exprtypes
from mzflow.catalog.bind import bind_error, output_name
from mzflow.errors import Error, Unsupported
from mzflow.sql.parse import DIALECT
from mzflow.storage.types import python_values

Rows = list[tuple[object, ...]]
Tables = Mapping[str, tuple[Sequence[str], Rows]]


class NotEvaluable(Unsupported):
    """The in-process path cannot evaluate this exactly as PostgreSQL does: a query
    that reads no catalog table then runs on Spark instead."""


def run(query: exp.Query, tables: Tables, types: Sequence[str] | None = None) -> Rows:
    """``query``'s rows; ``types``: its bound output types, which constants are cast to
    (as every Spark read casts its result)."""
    from mzflow.engine import arrow_constants

    tables = dict(tables)
    names = (f"_mz_const_{i}" for i in count())
    query = arrow_constants.fold(query.copy(), tables, names, types)
    verify(query)
    data = {name: [dict(zip(cols, row, strict=True)) for row in rows]
            for name, (cols, rows) in tables.items()}
    # The executor infers columns from the first row; an empty table needs a schema.
    schema = {name: dict.fromkeys(cols, "text") for name, (cols, _) in tables.items()}
    for agg in query.find_all(exp.AggFunc):
        if isinstance(agg.this, exp.Order):  # the executor cannot parse it, let alone sort
            raise NotEvaluable(f"{output_name(agg)} with ORDER BY over catalog tables is "
                               "not supported yet")
    try:
        result = execute(query, tables=data, schema=schema, dialect=DIALECT)
    except ExecuteError as e:
        raise _execute_error(e) from None
    except OptimizeError as e:
        # A name the caller did not bind, such as a column in SHOW … WHERE.
        raise bind_error(e) from None
    except (NotImplementedError, KeyError) as e:
        raise NotEvaluable(f"this catalog query is not supported: {e}") from None
    rows = [tuple(r) for r in result.rows]
    if types is None or not rows or len(types) != len(rows[0]):
        return rows
    columns = [python_values(list(c), t) for c, t in zip(zip(*rows, strict=True), types,
                                                          strict=True)]
    return list(zip(*columns, strict=True))


# -- what the executor may evaluate -----------------------------------------------------

# Python agrees with PostgreSQL on these over NULLs, integers, text and booleans (the
# executor's AND/OR/NOT and IN are three-valued, its comparisons NULL on a NULL).
_PLAIN = (exp.Column, exp.Identifier, exp.Star, exp.Null, exp.Boolean, exp.Paren,
          exp.Alias, exp.Tuple, exp.Table, exp.TableAlias, exp.From, exp.Join, exp.Where,
          exp.Order, exp.Ordered, exp.Limit, exp.Offset, exp.Group, exp.Having,
          exp.Distinct, exp.Subquery, exp.Exists, exp.Select, exp.Union, exp.Except,
          exp.Intersect, exp.And, exp.Or, exp.Not, exp.Count, exp.CTE, exp.With)
_COMPARE = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In, exp.Between)
_TEXT = ("text", "character varying", "character", exprtypes.UNKNOWN)


def verify(query: exp.Expr) -> None:
    """Raise :class:`NotEvaluable` naming the first construct whose Python evaluation
    could differ from PostgreSQL's."""
    for node in query.walk():
        if isinstance(node, _PLAIN):
            continue
        if isinstance(node, exp.Literal):
            # Python reads 1.5 as a float; integers and strings are exact.
            if node.is_string or re.fullmatch(r"\d+", node.this):
                continue
            raise NotEvaluable(f"the constant {node.this} in a query of system tables "
                               "is not supported yet")
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
            continue
        if isinstance(node, _COMPARE):
            _same_kind(node)
            continue
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null | exp.Boolean):
            continue
        if isinstance(node, exp.Like | exp.ILike) and _plain_pattern(node.expression,
                                                                     isinstance(node, exp.ILike)):
            continue
        if isinstance(node, exp.Min | exp.Max) or (
                isinstance(node, exp.Sum) and _kind(node.this) in ("int", "?")):
            continue
        if isinstance(node, exp.Length) and not node.args.get("binary"):
            continue  # len() counts code points, as char_length
        raise NotEvaluable(f"{_what(node)} in a query of system tables is not supported yet")


def _kind(node: exp.Expr) -> str:
    """int, text, bool, other; ``?`` when the binder left no type (SHOW … WHERE)."""
    if isinstance(node, exp.Literal):
        return "text" if node.is_string else "int"
    if isinstance(node, exp.Neg):
        return _kind(node.this)
    if isinstance(node, exp.Null | exp.Tuple):
        return "?"
    if isinstance(node, exp.Boolean):
        return "bool"
    t = node.type
    if not isinstance(t, exp.DataType) or t.this in (exp.DType.UNKNOWN, exp.DType.NULL):
        return "?"
    name = exprtypes.base(exprtypes.from_sqlglot(t))
    if name in exprtypes.INTEGERS:
        return "int"
    return "text" if name in _TEXT else "bool" if name == "boolean" else name


def _same_kind(node: exp.Expr) -> None:
    """PostgreSQL reads a quoted literal as the other side's type (``id = '5'`` compares
    integers); Python compares 5 with '5' and says false."""
    operands = [node.this, *node.expressions] if isinstance(node, exp.In) else (
        [node.this, node.args["low"], node.args["high"]] if isinstance(node, exp.Between)
        else [node.this, node.expression])
    kinds = {_kind(o) for o in operands} - {"?"}
    if len(kinds) > 1:
        raise NotEvaluable(f"comparing {' and '.join(sorted(kinds))} values in a query of "
                           "system tables is not supported yet")


def _plain_pattern(pattern: exp.Expr, ilike: bool) -> bool:
    """The executor reads a LIKE pattern's % and _ but not its backslash escapes; ILIKE
    folds case by Unicode's rules, PostgreSQL's C locale only ASCII's."""
    return (isinstance(pattern, exp.Literal) and pattern.is_string and "\\" not in pattern.this
            and (not ilike or pattern.this.isascii()))


_SYMBOLS: dict[type[exp.Expr], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.DPipe: "||",
    exp.Like: "LIKE", exp.ILike: "ILIKE", exp.Neg: "-", exp.Case: "CASE",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.NullSafeNEQ: "IS DISTINCT FROM"}


def _what(node: exp.Expr) -> str:
    if type(node) in _SYMBOLS:
        return f"operator {_SYMBOLS[type(node)]}"
    if isinstance(node, exp.Anonymous):
        return f"function {node.name.lower()}"
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().lower()}"
    if isinstance(node, exp.Cast):
        return f"a cast to {node.to.sql(dialect=DIALECT).lower()}"
    return f"operator {node.key.replace('_', ' ')}"


def _execute_error(e: ExecuteError) -> Error:
    """The Python executor's failure: its expressions are verified, so what is left
    is a construct it lacks (the caller runs a constant query on Spark instead)."""
    cause: Any = e.__cause__
    return NotEvaluable(str(cause or e).split("\n")[0])
