"""PostgreSQL's semantics as Spark SQL: a bound query becomes the Spark SQL that gives
PostgreSQL's answer. sqlglot transpiles; the rewrites here (and in ``pg_functions.py``,
``aggregates.py``, ``series.py``) change what Spark would compute its own way:
division and average, rounding, varchar casts, array_agg, generate_series, DISTINCT ON.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS, sqlglot_scale
from mzflow.engine import division
from mzflow.engine.spark import pg_functions, series
from mzflow.engine.spark.aggregates import array_aggs


def to_spark_sql(query: exp.Query, views: Mapping[str, str]) -> str:
    query = query.copy()
    for table in query.find_all(exp.Table):
        if table.name in views and not table.db:
            alias = table.alias_or_name
            table.set("this", exp.to_identifier(views[table.name]))
            if not table.args.get("alias"):
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    rewritten = pg_semantics(query)
    assert isinstance(rewritten, exp.Query)
    query = rewritten
    series.to_spark(query, lambda e: e.sql(dialect="spark"))  # generate_series
    _all_of_arrays(query)
    # Innermost first, so an outer rewrite copies already rewritten subqueries.
    for select in reversed(list(query.find_all(exp.Select))):
        on = select.args.get("distinct") and select.args["distinct"].args.get("on")
        if isinstance(on, exp.Tuple):
            rewritten = _without_distinct_on(select, on)
            if select is query:
                query = rewritten
            else:
                select.replace(rewritten)
    return query.sql(dialect="spark")


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _all_of_arrays(query: exp.Expr) -> None:
    """``x <op> ALL (array)`` as Spark's ``forall(array, e -> x <op> e)``, which is
    three-valued as PostgreSQL's ALL is (NULL when no element is false and one compares
    NULL). sqlglot writes ``= ANY (array)`` as ``exists`` already, but leaves ALL, which
    Spark reads as a call of a function named ``all``. ALL of a subquery is planned
    elsewhere (plan/subqueries.py)."""
    for quantified in list(query.find_all(exp.All)):
        comparison = quantified.parent
        array = quantified.this.this if isinstance(quantified.this, exp.Paren) else (
            quantified.this)
        if not isinstance(comparison, _COMPARISONS) or comparison.expression is not (
                quantified) or isinstance(array, exp.Query | exp.Subquery):
            continue
        element = exp.to_identifier("_mz_element")
        test = type(comparison)(this=comparison.this.copy(), expression=exp.column(element))
        comparison.replace(exp.Anonymous(this="FORALL", expressions=[
            array.copy(), exp.Lambda(this=test, expressions=[element])]))


def pg_semantics(tree: exp.Expr) -> exp.Expr:
    """Rewrite what Spark computes differently from PostgreSQL, reading the result types
    the binder set (``catalog/exprtypes.py``); deepest nodes first, so an outer rewrite
    sees rewritten operands.

    - ``/`` on integers truncates to the operands' type (int4 / int4 is int4). sqlglot
      writes that for Spark as a double division cast back to BIGINT, which is wrong
      past 2**53; Spark's ``DIV`` divides integers exactly.
    - ``/`` on numerics and ``avg`` of integers or numerics are numeric with the scale
      the binder chose; Spark would give 6 decimal places (or a double for ``avg(int)``).
    - ``round`` of a double is C's rint, as Spark's ``rint`` (Java's Math.rint): half to
      even, and a negative fraction rounds to -0 (``bround`` goes through a decimal and
      loses the sign).
    - An explicit cast to ``varchar(n)`` cuts the text to ``n`` characters.
    - ``array_agg`` keeps NULLs and its ORDER BY (``aggregates.py``).
    - Casts, concatenation, substr, to_char and exp/ln/sqrt/power: ``pg_functions.py``.
    """
    root = tree
    for node in reversed(list(tree.find_all(exp.Div, exp.Avg, exp.Round, *pg_functions.NODES))):
        if isinstance(node, exp.Div):
            new = _division(node)
            new = pg_functions.rewrite(node) if new is node else new
        elif type(node) is exp.Cast:
            new = _to_varchar(node)
            new = pg_functions.rewrite(node) if new is node else new
        elif not isinstance(node, exp.Avg | exp.Round):
            new = pg_functions.rewrite(node)
        elif isinstance(node, exp.Round):
            new = node
            if node.args.get("decimals") is None and node.is_type(exp.DType.DOUBLE):
                new = exp.Anonymous(this="RINT", expressions=[node.this])
        else:
            assert isinstance(node, exp.Avg)
            new = _average(node)
        if new is node:
            continue
        new.type = node.type
        if node is root:
            root = new
        else:
            window = node.parent
            target: exp.Expr = node
            if isinstance(window, exp.Window):  # avg(x) OVER w → sum(x) OVER w / count…
                new = _windowed(window, new)
                target = window
                if target is root:
                    root = new
            target.replace(new)
    return array_aggs(root)


def _to_varchar(node: exp.Cast) -> exp.Expr:
    to = node.to
    if not to.is_type(exp.DType.VARCHAR, exp.DType.CHAR) or not to.expressions:
        return node
    length = to.expressions[0]
    n = (length.this if isinstance(length, exp.DataTypeParam) else length).name
    text = exp.cast(node.this, exp.DType.TEXT)
    return exp.Substring(this=text, start=exp.Literal.number(1),
                         length=exp.Literal.number(int(n)))


def _operand(node: exp.Expr, i: int) -> exp.DataType | None:
    """The type of a division's or an average's ``i``-th operand. The binder records
    them on the node (``exprtypes.OPERANDS``): lowering to the IR renames columns, and
    the new column nodes carry no type."""
    recorded = node.meta.get(OPERANDS)
    if recorded is not None and i < len(recorded):
        return recorded[i]
    operand = node.args.get("this" if i == 0 else "expression")
    return operand.type if isinstance(operand, exp.Expr) and isinstance(
        operand.type, exp.DataType) else None


def _cast(e: exp.Expr, to: exp.DataType | exp.DType) -> exp.Cast:
    """Always a new cast: ``exp.cast`` drops it when ``e`` is already a cast to another
    decimal (it compares the base types only)."""
    dtype = to if isinstance(to, exp.DataType) else exp.DataType.build(to)
    cast = exp.Cast(this=e, to=dtype)
    cast.type = dtype
    return cast


def _is(dtype: exp.DataType | None, *kinds: exp.DType) -> bool:
    return dtype is not None and dtype.is_type(*kinds)


def _division(node: exp.Div) -> exp.Expr:
    left, right, result = node.left, node.right, node.type
    left_t, right_t = _operand(node, 0), _operand(node, 1)
    ints = exp.DataType.INTEGER_TYPES
    if _is(left_t, *ints) and _is(right_t, *ints) and (
            node.args.get("typed") or _is(result, *ints)):
        quotient = exp.IntDiv(this=_cast(left, exp.DType.BIGINT),
                              expression=_cast(right, exp.DType.BIGINT))
        if result is not None and _is(result, *ints) and not result.is_type(
                exp.DType.BIGINT):
            return _cast(quotient, result.copy())
        return quotient
    if result is None or not result.is_type(exp.DType.DECIMAL):
        return node
    return _decimal_quotient(left, right, result, left_t, right_t) or node


def _decimal_quotient(num: exp.Expr, den: exp.Expr, result: exp.DataType,
                      num_t: exp.DataType | None, den_t: exp.DataType | None
                      ) -> exp.Expr | None:
    """``num / den`` at the result's scale. Spark types a decimal quotient by its
    operands, so they are cast to the types whose quotient Spark types at exactly that
    scale (``engine/division.py``, which the in-process engine follows too)."""
    exact = (exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES)
    if not (_is(num_t, *exact) and _is(den_t, *exact)):
        return None
    q = division.exact(sqlglot_scale(result), sqlglot_scale(den_t))
    if q is None:
        return None
    num_t = exp.DataType.build(f"DECIMAL({q.numerator_digits}, {q.scale})")
    den_t = exp.DataType.build(f"DECIMAL({division.DIGITS}, {q.denominator_scale})")
    quotient = exp.Div(this=_cast(num, num_t), expression=_cast(den, den_t))
    return _cast(quotient, result.copy())


def _numeric_average(agg: exp.Avg) -> tuple[exp.DataType, exp.DataType] | None:
    """An ``avg`` that is a numeric quotient (of integers or numerics): its result type,
    and the type its sum is kept in (every digit, at the values' scale). None: Spark's
    own avg is PostgreSQL's (a double's)."""
    result, value_t = agg.type, _operand(agg, 0)
    if result is None or not result.is_type(exp.DType.DECIMAL) or not _is(
            value_t, exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES):
        return None
    return result, exp.DataType.build(f"DECIMAL({division.DIGITS}, {sqlglot_scale(value_t)})")


def _average(node: exp.Avg) -> exp.Expr:
    """``avg(x)`` of integers or numerics → ``sum(x) / count(x)`` at the result's scale
    (PostgreSQL's avg is exactly that numeric division)."""
    numeric = _numeric_average(node)
    if numeric is None:
        return node
    result, wide_t = numeric
    arg = node.this
    distinct = isinstance(arg, exp.Distinct)
    value = arg.expressions[0] if distinct else arg
    wide = _cast(value.copy(), wide_t)
    total = exp.Sum(this=exp.Distinct(expressions=[wide]) if distinct else wide)
    count = exp.Count(this=exp.Distinct(expressions=[value.copy()]) if distinct
                      else value.copy())
    return _decimal_quotient(total, count, result, wide_t,
                             exp.DataType.build("BIGINT")) or node


def average_sql(total: str, count: str, agg: exp.Avg) -> str:
    """Spark SQL for an ``avg`` from its kept partials, the columns ``total`` (the sum)
    and ``count``: the same numeric quotient as :func:`pg_semantics` renders."""
    plain = f"`{total}` / `{count}`"
    numeric = _numeric_average(agg)
    if numeric is None:
        return plain
    result, wide = numeric
    quotient = _decimal_quotient(_cast(exp.column(total, quoted=True), wide),
                                 exp.column(count, quoted=True), result, wide,
                                 exp.DataType.build("BIGINT"))
    return quotient.sql(dialect="spark") if quotient is not None else plain


def _windowed(window: exp.Window, quotient: exp.Expr) -> exp.Expr:
    """Put each aggregate of ``quotient`` under its own copy of ``window``."""
    for agg in list(quotient.find_all(exp.Sum, exp.Count)):
        over = window.copy()
        over.set("this", agg.copy())
        agg.replace(over)
    return quotient


def _without_distinct_on(select: exp.Select, on: exp.Tuple) -> exp.Select:
    """``SELECT DISTINCT ON (keys) … ORDER BY … LIMIT …`` → the first row per key by a
    ``ROW_NUMBER`` window, with the ORDER BY, LIMIT and OFFSET applied to the result.

    sqlglot's own rewrite for Spark moves the ORDER BY into the window (the result loses
    its order) and leaves LIMIT/OFFSET inside, where they cut rows before the first of
    each group is picked.
    """
    inner = select.copy()
    inner.set("distinct", None)
    order, limit, offset = (inner.args.get(k) for k in ("order", "limit", "offset"))
    for k in ("order", "limit", "offset"):
        inner.set(k, None)
    projections: list[exp.Expr] = []
    names: list[str] = []
    by_name: dict[str, exp.Expr] = {}
    for i, p in enumerate(inner.selects):
        name = p.alias_or_name if isinstance(p, exp.Alias | exp.Column) else ""
        name = name or f"_mz_c{i}"
        names.append(name)
        by_name.setdefault(name, p.unalias())
        projections.append(exp.alias_(p.unalias().copy(), name, quoted=True))
    window_keys: list[exp.Ordered] = []
    outer_keys: list[exp.Ordered] = []
    for j, ordered in enumerate(order.expressions if order else []):
        key = ordered.this
        if isinstance(key, exp.Column) and not key.table and key.name in by_name:
            expr, ref = by_name[key.name], key.name
        else:
            expr, ref = key, f"_mz_o{j}"
            projections.append(exp.alias_(key.copy(), ref, quoted=True))
        window_keys.append(ordered.__class__(**{**ordered.args, "this": expr.copy()}))
        outer_keys.append(ordered.__class__(
            **{**ordered.args, "this": exp.column(ref, table="_mz_t", quoted=True)}))
    if not window_keys:  # no ORDER BY: any row of each group will do
        window_keys = [exp.Ordered(this=e.copy()) for e in on.expressions]
    window = exp.Window(this=exp.RowNumber(),
                        partition_by=[e.copy() for e in on.expressions],
                        order=exp.Order(expressions=window_keys))
    projections.append(exp.alias_(window, "_mz_rn", quoted=True))
    inner.set("expressions", projections)
    outer = exp.select(*[exp.alias_(exp.column(n, table="_mz_t", quoted=True), n, quoted=True)
                         for n in names]).from_(inner.subquery("_mz_t"))
    outer = outer.where(exp.column("_mz_rn", table="_mz_t", quoted=True).eq(1))
    if outer_keys:
        outer.set("order", exp.Order(expressions=outer_keys))
    outer.set("limit", limit)
    outer.set("offset", offset)
    return outer
