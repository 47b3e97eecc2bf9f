"""A restricted SELECT over one Arrow table, in process: a routed read of a projection's
rows (a few partial rows per group and part, or a sorted projection's row groups for a
key) costs Spark's fixed price per query (0.2-0.5 s) for a millisecond's work.

The shape: ``SELECT exprs FROM rel [WHERE] [GROUP BY exprs] [HAVING] [ORDER BY]
[LIMIT] [OFFSET]`` over the one relation, or over such a SELECT of it as a derived
table (a plain view's SELECT, routed to a projection, inside the query that reads the
view), with ``sum``, ``count``, ``min``, ``max`` and ``avg`` (not DISTINCT, not
FILTER). Scalar expressions are ``engine/arrow_expr.py``'s, with PostgreSQL's
semantics as the Spark path computes them (``engine/spark/pg_sql.py: pg_semantics``):
sums are exact (Arrow's own overflow silently, so they run in decimal256), ``avg`` is
the exact quotient at the bound scale, NULLs sort last ascending and first descending
unless the query says otherwise, and each output column is cast to its bound type.
Anything else raises ``Unsupported``, and so does what would be decided by values
Arrow and PostgreSQL order or group differently (NaN, -0.0 as a key): the caller
answers the query another way (the tables' in-process path, or Spark). ``check`` runs
``run`` over an empty table of the relation's schema, so the two cannot disagree about
what is supported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.exprtypes import from_sqlglot
from mzflow.engine import arrow_arith, arrow_expr, division
from mzflow.engine.spark import evaluation_error
from mzflow.errors import Error, Unsupported
from mzflow.storage.types import parse_type, python_values

_AGGS = (exp.Sum, exp.Count, exp.Min, exp.Max, exp.Avg)
_CLAUSES = {"expressions", "from_", "where", "group", "having", "order", "limit", "offset"}


def check(query: exp.Expr, schema: pa.Schema, types: Sequence[str]) -> str | None:
    """Why :func:`run` cannot answer ``query`` over rows of ``schema`` (None: it can)."""
    try:
        run(query, schema.empty_table(), types)
    except Unsupported as e:
        return str(e)
    except Error:
        return None  # an evaluation error of no row: the rows decide
    return None


def run(query: exp.Expr, table: pa.Table, types: Sequence[str]) -> list[tuple[Any, ...]]:
    """``query``'s rows over ``table`` (the one relation it reads), as ``spark.run``
    returns them: cast to the bound ``types``, as Python values."""
    try:
        columns = _columns(query.copy(), table, types)  # the copy is rewritten in place
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:  # no kernel for a type
        raise Unsupported(f"no Arrow kernel: {e}") from None
    except pa.ArrowInvalid as e:  # a safe cast that does not fit: Spark says how
        raise evaluation_error(f"Evaluation error: {e}", "22003") from None
    values = [_python(v, t) for v, t in zip(columns, types, strict=True)]
    return list(zip(*values, strict=True)) if values and values[0] else []


def _columns(query: exp.Expr, table: pa.Table, types: Sequence[str]) -> list[pa.Array]:
    """``query``'s output columns over ``table``, each of its bound type. A SELECT over
    a derived table (an inlined view's SELECT, read from a projection) evaluates that
    one first, into the relation the outer SELECT reads."""
    source = query.args.get("from_") if isinstance(query, exp.Select) else None
    if source is not None and isinstance(source.this, exp.Subquery) and not query.args.get(
            "joins"):
        derived = source.this
        inner = derived.this
        if not isinstance(inner, exp.Select) or any(
                v for k, v in derived.args.items() if k not in ("this", "alias")):
            raise Unsupported("a SELECT over a subquery that is not a plain SELECT")
        names = [e.alias_or_name for e in inner.expressions]
        bound = [e.unalias().type for e in inner.expressions]
        if len(set(names)) != len(names) or any(
                not isinstance(t, exp.DataType) for t in bound) or not derived.alias or (
                derived.args["alias"].columns):  # AS d (a, b) renames them
            raise Unsupported("a subquery without one bound type per named column")
        inner_types = [from_sqlglot(t) for t in bound]
        for t in inner_types:
            try:
                parse_type(t)
            except Error:  # a type with no Arrow form here: the IR path may have one
                raise Unsupported(f"a subquery column of type {t}") from None
        table = pa.table(dict(zip(names, _columns(inner, table, inner_types), strict=True)))
        source.set("this", exp.table_(exp.to_identifier(derived.alias)))
    select, alias = _shape(query)
    return _run(select, alias, table, types)


def _shape(query: exp.Expr) -> tuple[exp.Select, str]:
    if not isinstance(query, exp.Select):
        raise Unsupported("not a single SELECT")
    extra = sorted(k for k, v in query.args.items() if v and k not in _CLAUSES)
    if extra:
        raise Unsupported(f"a SELECT with {extra[0]}")
    source = query.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        raise Unsupported("a SELECT over a subquery or a join")
    if query.find(exp.Window, exp.Subquery, exp.Filter, exp.Distinct) or any(
            not isinstance(star.parent, exp.Count) for star in query.find_all(exp.Star)):
        raise Unsupported("windows, subqueries, * or DISTINCT")
    if any(s is not query for s in query.find_all(exp.Select)):
        raise Unsupported("a subquery")
    alias = source.this.alias_or_name
    for col in query.find_all(exp.Column):
        if col.table and col.table != alias:
            raise Unsupported(f"column {col.sql()}")
    return query, alias


def _bare(node: exp.Expr, alias: str) -> exp.Expr:
    out = node.copy()
    for col in out.find_all(exp.Column):
        if col.table == alias:
            col.set("table", None)
    return out


def _run(select: exp.Select, alias: str, table: pa.Table, types: Sequence[str]
         ) -> list[pa.Array]:
    outputs = list(select.expressions)
    if len(outputs) != len(types):
        raise Unsupported("output columns the binder did not type")
    where = select.args.get("where")
    if where is not None:
        keep = arrow_expr.evaluate(_bare(where.this, alias), table)
        table = table.filter(pc.fill_null(keep, False))
    group = select.args.get("group")
    order = select.args.get("order")
    ordered = list(order.expressions) if order is not None else []
    having = select.args.get("having")
    grouped = group is not None or having is not None or any(
        node.find(exp.AggFunc) for node in [*outputs, *[o.this for o in ordered]])
    if grouped:
        table, rewrite = _aggregate(select, alias, table, group, ordered)
    else:
        def rewrite(node: exp.Expr) -> exp.Expr:
            return _bare(node, alias)
    if having is not None:
        keep = arrow_expr.evaluate(rewrite(having.this), table)
        table = table.filter(pc.fill_null(keep, False))
    values = [_whole(arrow_expr.evaluate(rewrite(o.unalias()), table, boolean=False),
                     table.num_rows) for o in outputs]
    if ordered:
        names = [o.alias_or_name for o in outputs]
        keys = []
        for o in ordered:
            if not isinstance(o, exp.Ordered):
                raise Unsupported("an ORDER BY key without its direction")
            node = o.this
            if isinstance(node, exp.Column) and not node.table:  # an output's name
                if names.count(node.name) != 1:
                    raise Unsupported(f"ORDER BY {node.name}: not one output's name")
                keys.append((values[names.index(node.name)], o))
            elif isinstance(node, exp.Literal):
                raise Unsupported("ORDER BY a constant")
            else:
                keys.append((_whole(arrow_expr.evaluate(rewrite(node), table, boolean=False),
                                    table.num_rows), o))
        indices = _sort_indices(keys, table.num_rows)
        values = [v.take(indices) for v in values]
    n = table.num_rows
    start = _count(select.args.get("offset"), "OFFSET")
    stop = n if select.args.get("limit") is None else start + _count(
        select.args.get("limit"), "LIMIT")
    values = [v.slice(start, max(0, min(stop, n) - start)) if start < n else v.slice(0, 0)
              for v in values]
    return [_as_bound(v, t) for v, t in zip(values, types, strict=True)]


def _count(clause: exp.Expr | None, what: str) -> int:
    if clause is None:
        return 0
    node = clause.args.get("expression")
    if not (isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()):
        raise Unsupported(f"{what} of a non-constant")
    return int(node.this)


def _whole(v: Any, n: int) -> pa.Array:
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    return v


# -- grouping --------------------------------------------------------------------------


def _aggregate(select: exp.Select, alias: str, table: pa.Table, group: exp.Group | None,
               ordered: list[exp.Expr]) -> tuple[pa.Table, Any]:
    """The groups as a table (``_g<i>``: keys, ``_x<j>``: aggregates), and the rewrite of
    an expression over the input into one over the groups."""
    keys = list(group.expressions) if group is not None else []
    if group is not None and any(group.args.get(k) for k in group.args if k != "expressions"):
        raise Unsupported("GROUPING SETS, ROLLUP or CUBE")
    key_exprs = [_bare(k, alias) for k in keys]
    frame: dict[str, Any] = {}
    for i, k in enumerate(key_exprs):
        if k.find(*_AGGS) or not k.find(exp.Column):
            raise Unsupported(f"GROUP BY {k.sql()}")
        v = _whole(arrow_expr.evaluate(k, table, boolean=False), table.num_rows)
        if pa.types.is_floating(v.type):  # -0.0 and 0.0, NaNs: one group each in SQL
            raise Unsupported("a floating-point GROUP BY key")
        if pa.types.is_dictionary(v.type):
            v = v.dictionary_decode()
        frame[f"_g{i}"] = v
    nodes = [o.unalias() for o in select.expressions] + [o.this for o in ordered]
    if select.args.get("having") is not None:
        nodes.append(select.args["having"].this)
    aggs: list[exp.Expr] = []
    for node in nodes:
        for agg in node.find_all(exp.AggFunc):
            if not isinstance(agg, _AGGS):
                raise Unsupported(f"aggregate {agg.sql()}")
            if agg.find_ancestor(exp.AggFunc) is not None:
                raise Unsupported("nested aggregates")
            if not any(agg is a for a in aggs):
                aggs.append(agg)
    specs: list[tuple[Any, str]] = []
    finish = []
    for j, agg in enumerate(aggs):
        spec, done = _agg_input(agg, _bare(agg, alias), table, j, frame)
        specs += [sp for sp in spec if sp not in specs]  # count(*) once
        finish.append(done)
    names = [f"_g{i}" for i in range(len(keys))]
    source = pa.table(frame) if frame else pa.table({"_n": pa.nulls(table.num_rows)})
    out = source.group_by(names, use_threads=False).aggregate(specs)
    groups = {n: out.column(n) for n in names}
    for j, done in enumerate(finish):
        groups[f"_x{j}"] = done(out)
    result = pa.table(groups) if groups else pa.table({"_n": pa.nulls(out.num_rows)})

    def rewrite(node: exp.Expr) -> exp.Expr:
        return _over_groups(node, alias, key_exprs, aggs)

    return result, rewrite


def _agg_input(agg: exp.Expr, bare: exp.Expr, table: pa.Table, j: int,
               frame: dict[str, Any]) -> tuple[list[tuple[Any, str]], Any]:
    """Arrow's aggregations for one aggregate and the function that makes its value
    (of its bound type) from their result."""
    arg = bare.this
    if isinstance(agg, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
        return [([], "count_all")], lambda out: out.column("count_all")
    if arg is None:
        raise Unsupported(f"aggregate {agg.sql()}")
    value = _whole(arrow_expr.evaluate(arg, table, boolean=False), table.num_rows)
    if pa.types.is_dictionary(value.type):
        value = value.dictionary_decode()
    name = f"_v{j}"
    t = value.type
    bound = _bound_arrow(agg)
    if isinstance(agg, exp.Count):
        frame[name] = value
        return [(name, "count")], lambda out: out.column(f"{name}_count")
    if isinstance(agg, exp.Min | exp.Max):
        func = "min" if isinstance(agg, exp.Min) else "max"
        if not (pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_floating(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_date(t) or pa.types.is_timestamp(t)):
            raise Unsupported(f"{func} of {t}")
        if pa.types.is_floating(t) and pc.any(pc.is_nan(value)).as_py():
            raise Unsupported(f"{func} over NaN")  # NaN is the largest value in SQL
        frame[name] = value
        return [(name, func)], lambda out: _cast(out.column(f"{name}_{func}"), bound)
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        frame[name] = value.cast(pa.decimal256(76, t.scale if pa.types.is_decimal(t) else 0))
    elif pa.types.is_floating(t):
        frame[name] = value.cast(pa.float64())
    else:
        raise Unsupported(f"{agg.key} of {t}")
    if isinstance(agg, exp.Sum):
        natural = (pa.int64() if pa.types.is_integer(t) else pa.float64()
                   if pa.types.is_floating(t) else pa.decimal128(38, t.scale))
        return [(name, "sum")], lambda out: _cast(out.column(f"{name}_sum"),
                                                  bound or natural)
    # avg: the quotient of the sum and the count, as engine/spark/pg_sql.py renders it.
    frame[f"{name}c"] = value

    def average(out: pa.Table) -> Any:
        total, count = out.column(f"{name}_sum"), out.column(f"{name}c_count")
        if pa.types.is_floating(t):
            if agg.type is not None and not agg.is_type(exp.DType.DOUBLE):
                raise Unsupported(f"avg of {t} as {agg.type.sql()}")
            return pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.float64()),
                              pc.divide(total, pc.cast(count, pa.float64())))
        if bound is None or not pa.types.is_decimal(bound):
            raise Unsupported("avg without its bound numeric type")
        q = division.exact(bound.scale)  # over a count: an integer denominator
        if q is None:
            raise Unsupported(f"avg at numeric scale {bound.scale}")
        total = pc.if_else(pc.equal(count, 0), pa.scalar(None, total.type), total)
        return arrow_arith.quotient(total, count, q.scale, q.numerator_digits, len(count))

    return [(name, "sum"), (f"{name}c", "count")], average


def _bound_arrow(node: exp.Expr) -> pa.DataType | None:
    if not isinstance(node.type, exp.DataType):
        return None
    name = from_sqlglot(node.type)
    try:
        return parse_type(name).arrow
    except Error:
        return None


def _cast(v: Any, to: pa.DataType | None) -> Any:
    """A checked cast (a sum past its type's range fails, as Spark's does)."""
    if to is None or v.type == to:
        return v
    if pa.types.is_decimal(v.type) and pa.types.is_decimal(to) and v.type.scale > to.scale:
        raise Unsupported(f"an aggregate of {v.type} as {to}")
    return pc.cast(v, to)


def _over_groups(node: exp.Expr, alias: str, keys: list[exp.Expr], aggs: list[exp.Expr]
                 ) -> exp.Expr:
    """``node`` (of the query's own copy, changed in place) over the groups table: its
    aggregates and GROUP BY expressions replaced by their columns, outermost first; a
    column left over is neither grouped nor aggregated."""
    def replace(n: exp.Expr) -> exp.Expr:
        for j, agg in enumerate(aggs):
            if n is agg:
                return exp.column(f"_x{j}")
        if not isinstance(n, exp.Literal | exp.Boolean | exp.Null | exp.DataType):
            bare = _bare(n, alias)
            for i, k in enumerate(keys):
                if bare == k:
                    return exp.column(f"_g{i}")
        for value in list(n.args.values()):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expr):
                    new = replace(child)
                    if new is not child:
                        child.replace(new)
        return n

    out = replace(node)
    for col in out.find_all(exp.Column):
        if col.table or not col.name.startswith(("_g", "_x")):
            raise Unsupported(f'column "{col.name}" is neither grouped nor aggregated')
    return out


# -- ordering and output ---------------------------------------------------------------


def _sort_indices(keys: list[tuple[Any, exp.Ordered]], n: int) -> pa.Array:
    """Row order for ORDER BY: each key's NULLs first or last as the query says (the
    Spark path's rendering: NULLS FIRST only when said so), then its values."""
    columns: dict[str, Any] = {}
    sort: list[tuple[str, str]] = []
    for i, (v, o) in enumerate(keys):
        if pa.types.is_floating(v.type) and pc.any(pc.is_nan(v)).as_py():
            raise Unsupported("ORDER BY over NaN")  # Arrow puts NaN by the NULLs
        if pa.types.is_dictionary(v.type):
            v = v.dictionary_decode()
        desc = bool(o.args.get("desc"))
        nulls_first = bool(o.args.get("nulls_first"))
        columns[f"n{i}"] = pc.is_null(v)
        columns[f"v{i}"] = v
        sort.append((f"n{i}", "descending" if nulls_first else "ascending"))
        sort.append((f"v{i}", "descending" if desc else "ascending"))
    return pc.sort_indices(pa.table(columns) if columns else pa.table({"_": pa.nulls(n)}),
                           sort_keys=sort)


def _typed(v: pa.Array, type_name: str) -> list[Any]:
    """Values of the bound type, as ``spark.run`` returns them."""
    return _python(_as_bound(v, type_name), type_name)


def _as_bound(v: pa.Array, type_name: str) -> pa.Array:
    target = parse_type(type_name).arrow
    return v if v.type == target else _to(v, target, type_name)


def _python(v: pa.Array, type_name: str) -> list[Any]:
    target = v.type
    values: list[Any] = python_values(v.to_pylist(), type_name)
    if pa.types.is_timestamp(target) and target.tz:
        return [x.astimezone(dt.UTC) if x is not None else None for x in values]
    return values


def _to(v: pa.Array, target: pa.DataType, type_name: str) -> pa.Array:
    source = v.type
    if pa.types.is_null(source):
        return pa.nulls(len(v), target)
    if pa.types.is_decimal(source) and pa.types.is_decimal(target):
        if source.scale > target.scale:  # Spark's cast rounds half up
            v = pc.round(v, target.scale, round_mode="half_towards_infinity")
        return pc.cast(v, target)
    same_kind = [pa.types.is_integer, pa.types.is_floating, pa.types.is_date,
                 pa.types.is_timestamp, lambda t: pa.types.is_string(t)
                 or pa.types.is_large_string(t) or pa.types.is_string_view(t)]
    for kind in same_kind:
        if kind(source) and kind(target):
            return pc.cast(v, target)
    if pa.types.is_integer(source) and pa.types.is_decimal(target):
        return pc.cast(v, target)
    raise Unsupported(f"a {source} value as {type_name}")
