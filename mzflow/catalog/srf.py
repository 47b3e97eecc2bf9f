"""Set-returning functions (``generate_series``): where they may stand, and their types.

PostgreSQL calls a function in FROM once per row to its left (an implicit LATERAL)
and, in a SELECT list, once per row of the FROM clause, several such calls running
side by side and zipped to the longest (PostgreSQL 10+). The binder reduces both to
one form, a LATERAL FROM item over :class:`~mzflow.sql.ast.RowsFrom`, so later stages
know one construct:

- :func:`prepare` (before name resolution) refuses what PostgreSQL refuses, with its
  words (``set-returning functions are not allowed in WHERE``), refuses by name what
  mzflow does not support yet, and rewrites every FROM form (``generate_series(…) AS
  g(n)``, ``LATERAL generate_series(…)``, ``ROWS FROM (…)``) into the bound form with
  PostgreSQL's column names;
- :func:`unnest_projections` (after name resolution, so the arguments' columns are
  qualified) moves a SELECT list's calls into one such item, appended after the FROM
  clause (``SELECT x, generate_series(1, x) FROM t`` reads ``SELECT x, s.c0 FROM t,
  LATERAL ROWS FROM (generate_series(1, x)) AS s(c0)``): exact, since WHERE is
  evaluated before the SELECT list and DISTINCT, ORDER BY and LIMIT after it;
- :func:`resolve` (while typing) resolves each call as PostgreSQL's function lookup
  does, casts its arguments to the chosen variant's types and records the result type
  on the call (``SERIES_TYPE``), which the renderers read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeGuard

from sqlglot import exp

from mzflow.catalog import exprtypes
from mzflow.catalog.exprtypes import INTEGERS, UNKNOWN, base, display_name, scale
from mzflow.catalog.intervals import parse_interval
from mzflow.catalog.pg_catalog import KEYWORDS
from mzflow.errors import (
    Error,
    UnknownFunction,
    UnknownRelation,
    Unsupported,
)
from mzflow.sql import ast

# Meta keys on a bound ast.GenerateSeries: its result type (a catalog type name), and
# for timestamps its step as (months, days, microseconds), or None for a NULL step.
SERIES_TYPE = "mzflow_series_type"
SERIES_STEP = "mzflow_series_step"
SERIES_SCALE = "mzflow_series_scale"  # numeric: the scale that start, stop and values meet in
NAME = "generate_series"
# The renderer computes numeric elements exactly within 38 digits (engine/spark/series.py);
# a step keeps 26 - scale integer digits.
MAX_NUMERIC_SCALE = 20
STAMPS = ("timestamp without time zone", "timestamp with time zone")
_LATERAL_HINT = "You might be able to move the set-returning function into a LATERAL FROM item."
_NO_MATCH = ("No function matches the given name and argument types. You might need to "
             "add explicit type casts.")
_NOT_UNIQUE = ("Could not choose a best candidate function. You might need to add explicit "
               "type casts.")


class AmbiguousFunction(UnknownFunction):
    code = "42725"  # ambiguous_function


class InvalidColumnReference(Error):
    code = "42P10"  # invalid_column_reference


def is_series(item: exp.Expr | None) -> TypeGuard[exp.Lateral]:
    """A bound set-returning FROM item (``LATERAL ROWS FROM (…) AS alias(columns)``)."""
    return isinstance(item, exp.Lateral) and isinstance(item.this, ast.RowsFrom)


def calls_of(item: exp.Lateral) -> list[exp.Expr]:
    return list(item.this.expressions)


def column_names(item: exp.Lateral) -> list[str]:
    return [c.name for c in item.args["alias"].columns]


# -- before name resolution -------------------------------------------------------------

def prepare(query: exp.Expr) -> None:
    """Check where each call stands and bring every FROM form to the bound one (in place)."""
    for call in list(query.find_all(ast.GenerateSeries)):
        _check_placement(call)
    for item in list(query.find_all(exp.Table, exp.Lateral)):
        assert isinstance(item, exp.Table | exp.Lateral)
        _bind_from_item(item)
    for unnest in query.find_all(exp.Unnest):
        if isinstance(unnest.parent, exp.From | exp.Join):  # sqlglot's own node for it
            raise Unsupported("table function unnest in FROM is not supported yet")


def check_not_in(exprs: list[exp.Expr], clause: str) -> None:
    """Refuse a call in ``exprs`` (outside their subqueries), as PostgreSQL does in a
    clause whose expressions the binder sees only inside a query built from them
    (``UPDATE … SET``)."""
    if any(_own(e, ast.GenerateSeries) for e in exprs):
        raise _refused(clause)


def _refused(what: str) -> Unsupported:
    return Unsupported(f"set-returning functions are not allowed in {what}", hint=_LATERAL_HINT)


_CLAUSES = {"where": "WHERE", "having": "HAVING", "limit": "LIMIT", "offset": "OFFSET"}
_NOT_YET = {"group": "GROUP BY", "order": "ORDER BY", "distinct": "DISTINCT ON",
            "qualify": "QUALIFY", "windows": "WINDOW", "partition_by": "PARTITION BY"}


def _check_placement(call: exp.Expr) -> None:
    child, node = call, call.parent
    while node is not None:
        if isinstance(node, ast.GenerateSeries):
            if _in_from(node):
                raise Unsupported("set-returning functions must appear at top level of FROM")
            raise Unsupported("generate_series with a set-returning argument is not "
                              "supported yet", hint=_LATERAL_HINT)
        if isinstance(node, exp.Table | exp.Lateral):
            return  # a FROM item; its own checks are in _bind_from_item
        if isinstance(node, exp.AggFunc):
            raise Unsupported("aggregate function calls cannot contain set-returning "
                              "function calls", hint=_LATERAL_HINT)
        key = child.arg_key or ""
        if isinstance(node, exp.Window):
            if key == "this":
                raise Unsupported("window function calls cannot contain set-returning "
                                  "function calls", hint=_LATERAL_HINT)
            raise Unsupported(f"{NAME} in a window's {_NOT_YET.get(key, 'clause')}"
                              " is not supported yet", hint=_LATERAL_HINT)
        if isinstance(node, exp.Case | exp.If):
            raise _refused("CASE")
        if isinstance(node, exp.Coalesce):
            raise _refused("COALESCE")
        if isinstance(node, exp.Values):
            raise _refused("VALUES")
        if isinstance(node, exp.Join) and key in ("on", "using"):
            raise _refused("JOIN conditions")
        if isinstance(node, exp.Select | exp.SetOperation):
            if key == "expressions" and isinstance(node, exp.Select):
                return  # the SELECT list: unnest_projections moves it into FROM
            if key in _CLAUSES:
                raise _refused(_CLAUSES[key])
            raise Unsupported(f"{NAME} in {_NOT_YET.get(key, key.upper())} is not "
                              "supported yet", hint=_LATERAL_HINT)
        if isinstance(node, exp.Subquery):
            return  # reached only through a clause the loop above handles
        child, node = node, node.parent


def _in_from(node: exp.Expr) -> bool:
    parent = node.parent
    if isinstance(parent, exp.Table) and parent.parent is not None and isinstance(
            parent.parent, exp.Table) and parent.arg_key == "rows_from":
        return True
    return isinstance(parent, exp.Table | exp.Lateral) and node.arg_key == "this"


def _bind_from_item(item: exp.Table | exp.Lateral) -> None:
    if isinstance(item, exp.Table) and item.args.get("rows_from"):
        funcs = [t.this for t in item.args["rows_from"]]
    elif isinstance(item.this, exp.Func) and not isinstance(item.this, ast.RowsFrom):
        funcs = [item.this]
    else:
        return  # a relation, a LATERAL subquery, or bound already
    if _catalog_function(item, funcs):
        return
    for f in funcs:
        if not isinstance(f, ast.GenerateSeries):
            name = f.sql(dialect="postgres").split("(")[0].lower()
            raise Unsupported(f"table function {name} in FROM is not supported yet")
    if item.args.get("ordinality"):
        raise Unsupported(f"{NAME} WITH ORDINALITY is not supported yet")
    parent = item.parent
    if isinstance(parent, exp.Join) and (parent.args.get("side") or "").upper() in (
            "RIGHT", "FULL"):
        raise Unsupported(f"{NAME} on the right of a {parent.args['side'].upper()} JOIN "
                          "is not supported yet")
    given = item.args.get("alias")
    alias = given.name if given is not None and given.name else None
    named = [c.name for c in given.columns] if given is not None else []
    if len(named) > len(funcs):
        raise InvalidColumnReference(f'table "{alias or NAME}" has {len(funcs)} columns available '
                                f"but {len(named)} columns specified")
    # PostgreSQL names a scalar function's column after the table alias when there is
    # one and the function is alone; else after the function.
    default = alias if alias and len(funcs) == 1 else NAME
    columns = named + [default] * (len(funcs) - len(named))
    if len(set(columns)) < len(columns):
        raise Unsupported(f"ROWS FROM with two columns named {_first_duplicate(columns)} "
                          "is not supported yet", hint="name them: AS alias(a, b, …)")
    item.replace(exp.Lateral(this=ast.RowsFrom(expressions=[f.copy() for f in funcs]),
                             alias=exp.TableAlias(
                                 this=exp.to_identifier(alias or NAME),
                                 columns=[exp.to_identifier(c) for c in columns])))


def bind_catalog_functions(query: exp.Expr) -> None:
    """Every ``pg_get_keywords()`` in ``query``'s FROM clauses made its catalog relation,
    in place (the catalog-query path reads relations before the binder runs)."""
    for item in list(query.find_all(exp.Table)):
        if isinstance(item.this, exp.Anonymous):
            _catalog_function(item, [item.this])


def _catalog_function(item: exp.Table | exp.Lateral, funcs: list[exp.Expr]) -> bool:
    """``pg_get_keywords()`` in FROM: a catalog relation of its own (pg_catalog.KEYWORDS),
    read as any system relation is. The call takes no arguments."""
    f = funcs[0]
    if not (len(funcs) == 1 and isinstance(item, exp.Table) and isinstance(f, exp.Anonymous)
            and f.name.lower() == "pg_get_keywords"
            and (item.db or "pg_catalog").lower() == "pg_catalog"):
        return False
    if f.expressions:
        raise UnknownFunction("function pg_get_keywords(" + ", ".join(
            "unknown" for _ in f.expressions) + ") does not exist")
    item.set("this", exp.to_identifier(KEYWORDS, quoted=True))
    item.set("db", exp.to_identifier("pg_catalog"))
    return True


def _first_duplicate(names: list[str]) -> str:
    return next(n for i, n in enumerate(names) if n in names[:i])


# -- after name resolution --------------------------------------------------------------

def unnest_projections(query: exp.Expr) -> None:
    """Move each SELECT list's calls into a LATERAL FROM item after its FROM clause."""
    counter = itertools.count()
    for select in list(query.find_all(exp.Select)):
        calls = [c for p in select.expressions for c in _own(p, ast.GenerateSeries)]
        if not calls:
            continue
        own_clauses = list(select.expressions) + [select.args.get("having")]
        if select.args.get("group") is not None or any(
                _own(p, exp.AggFunc) or _own(p, exp.Window) for p in own_clauses if p):
            raise Unsupported(f"{NAME} in a SELECT list with GROUP BY, aggregates or window "
                              "functions is not supported yet",
                              hint="compute them in a subquery and call it in the outer query"
                                   "'s FROM clause")
        name = f"_mz_srf{next(counter)}"
        columns = [f"c{i}" for i in range(len(calls))]
        for call, column in zip(calls, columns, strict=True):
            call.replace(exp.column(column, table=name))
        item = exp.Lateral(this=ast.RowsFrom(expressions=calls), alias=exp.TableAlias(
            this=exp.to_identifier(name), columns=[exp.to_identifier(c) for c in columns]))
        if select.args.get("from_") is None:
            select.set("from_", exp.From(this=item))
        else:
            # A comma join binds loosest: the calls run once per row of the whole FROM.
            select.append("joins", exp.Join(this=item))


def _own(node: exp.Expr, kind: type[exp.Expr]) -> list[exp.Expr]:
    """The ``kind`` nodes in ``node`` outside its subqueries."""
    return [n for n in node.walk(bfs=False, prune=lambda n: n is not node and isinstance(
        n, exp.Subquery | exp.Select)) if isinstance(n, kind)]


# -- typing -----------------------------------------------------------------------------

def resolve(select: exp.Select, infer: Callable[[exp.Expr], str],
            column_types: dict[tuple[str, str], str]) -> None:
    """Type the set-returning FROM items of ``select``: each call's variant, its
    arguments cast to it, and the types of the item's columns."""
    from_ = select.args.get("from_")
    items = [from_.this] if from_ is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    for i, item in enumerate(items):
        if not is_series(item):
            continue
        # Arguments see the FROM items to their left (and outer queries), not those after.
        later = {x.alias_or_name for x in items[i:]} - {x.alias_or_name for x in items[:i]}
        for column in item.this.find_all(exp.Column):
            if column.table in later:
                raise UnknownRelation(
                    f'invalid reference to FROM-clause entry for table "{column.table}"',
                    hint=f'There is an entry for table "{column.table}", but it cannot be '
                         "referenced from this part of the query.")
        for call, column in zip(calls_of(item), column_names(item), strict=True):
            column_types[(item.alias, column)] = resolve_call(call, infer)


def resolve_call(call: exp.Expr, infer: Callable[[exp.Expr], str]) -> str:
    args = list(call.expressions)
    types = [infer(a) for a in args]
    if len(args) == 3 and args[2].find(exp.Interval) is not None:
        types[2] = "interval"  # an interval expression (n * interval '1 day'), maybe untyped
    result = series_type(types)
    call.meta[SERIES_TYPE] = result
    if base(result) in STAMPS:
        call.meta[SERIES_STEP] = _interval_step(args[2])
        casts = [result, result]
    elif base(result) == "numeric":
        # Values take the start's and the step's scale; the stop keeps its own, so that
        # comparing with it is exact (SERIES_SCALE: the scale comparisons are made in).
        if scale(result) > MAX_NUMERIC_SCALE:
            raise Unsupported(f"{NAME} over numerics with more than {MAX_NUMERIC_SCALE} "
                              "decimal places is not supported yet")
        stop = scale(types[1]) if base(types[1]) == "numeric" else 0
        call.meta[SERIES_SCALE] = max(scale(result), stop)
        casts = [result, exprtypes.numeric(stop), result]
    else:
        casts = [result] * len(args)
    for arg, t, to in zip(args, types, casts, strict=False):
        if t != to:
            arg.replace(exp.Cast(this=arg.copy(), to=exprtypes.to_sqlglot(to)))
    return result


def series_type(types: list[str]) -> str:
    """The result type of ``generate_series(types…)`` as PostgreSQL resolves the call
    among its variants (int4, int8, numeric, timestamp and timestamptz with an
    interval step), or its error."""
    bases = [base(t) for t in types]
    signature = f"{NAME}({', '.join(display_name(t) for t in types)})"
    numeric_ok = len(types) in (2, 3) and all(b in INTEGERS + ("numeric", UNKNOWN)
                                               for b in bases)
    stamps_ok = len(types) == 3 and all(b in STAMPS + ("date", UNKNOWN) for b in bases[:2]
                                        ) and bases[2] in ("interval", UNKNOWN)
    if numeric_ok and stamps_ok:
        raise AmbiguousFunction(f"function {signature} is not unique", hint=_NOT_UNIQUE)
    if numeric_ok:
        if "numeric" in bases:
            values = [t for i, t in enumerate(types) if i != 1 and base(t) == "numeric"]
            return exprtypes.numeric(max((scale(t) for t in values), default=0))
        if "bigint" in bases:
            return "bigint"
        if "integer" in bases:
            return "integer"
        raise AmbiguousFunction(f"function {signature} is not unique", hint=_NOT_UNIQUE)
    if stamps_ok:
        if "timestamp with time zone" in bases:
            return "timestamp with time zone"
        if "timestamp without time zone" in bases:
            return "timestamp without time zone"
        return "timestamp with time zone"  # dates and strings: PostgreSQL's preferred type
    raise UnknownFunction(f"function {signature} does not exist", hint=_NO_MATCH)


def _interval_step(step: exp.Expr) -> tuple[int, int, int] | None:
    """A constant interval step → (months, days, microseconds); None for NULL."""
    node = step
    sign = 1
    while isinstance(node, exp.Paren | exp.Neg | exp.Cast):
        if isinstance(node, exp.Neg):
            sign = -sign
        if isinstance(node, exp.Cast) and base(exprtypes.from_sqlglot(node.to)) != "interval":
            break
        node = node.this
    if isinstance(node, exp.Null):
        return None
    text, unit = None, None
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal):
        text, unit = node.this.name, node.args.get("unit")
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.name
    if text is None:
        raise Unsupported(f"{NAME} over timestamps needs a constant interval step, not "
                          f"{step.sql(dialect='postgres')}")
    try:
        months, days, micros = parse_interval(text, unit.name if unit is not None else None)
    except ValueError:
        raise Unsupported(f'interval "{text}" is not supported as a {NAME} step yet',
                          hint="write it like '1 day', '2 hours 30 minutes' or "
                               "'1 month'") from None
    months, days, micros = sign * months, sign * days, sign * micros
    signs = {(v > 0) - (v < 0) for v in (months, days, micros)} - {0}
    zero = months * 30 * 86_400_000_000 + days * 86_400_000_000 + micros == 0  # as PG orders
    if months and len(signs) > 1 and not zero:
        raise Unsupported(f'interval step "{text}" mixes positive and negative parts with '
                          "months: not supported yet")
    return months, days, micros

