"""``array_agg`` as PostgreSQL computes it, in Spark SQL.

sqlglot writes ``array_agg(x ORDER BY y)`` for Spark as ``COLLECT_LIST(x)``, which
drops the ORDER BY and every NULL element, and gives ``[]`` where PostgreSQL gives NULL
(no rows, or none past a FILTER). So each value is collected in a struct with its sort
keys (a struct is never NULL, so NULL values stay), the list is sorted by a comparator
that follows PostgreSQL's NULL placement (NULLS LAST ascending, FIRST descending, unless
the query says), the values are taken back out, and an empty list becomes NULL.
``DISTINCT`` keeps one of each value (NULL included) in ascending order, as PostgreSQL's
sort-based DISTINCT does, unless an ORDER BY says otherwise.

``string_agg`` needs nothing here: sqlglot writes it as Spark's ``LISTAGG … WITHIN
GROUP (ORDER BY …)``, which skips NULLs and gives NULL for no values, as PostgreSQL does.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

_WRAPPERS = (exp.Filter, exp.Window)


def array_aggs(tree: exp.Expr) -> exp.Expr:
    """``tree`` with every ``array_agg`` rewritten (innermost first); returns the new
    root, which is new when ``tree`` itself was one."""
    root = tree
    for agg in reversed(list(tree.find_all(exp.ArrayAgg))):
        outer: exp.Expr = agg
        while isinstance(outer.parent, _WRAPPERS) and outer.arg_key == "this":
            outer = outer.parent
        new = _rewritten(agg, outer)
        if outer is root:
            root = new
        else:
            outer.replace(new)
    return root


def _rewritten(agg: exp.ArrayAgg, outer: exp.Expr) -> exp.Expr:
    arg = agg.this
    order: list[exp.Ordered] = []
    if isinstance(arg, exp.Order):
        order = list(arg.expressions)
        arg = arg.this
    distinct = isinstance(arg, exp.Distinct)
    if isinstance(arg, exp.Distinct):
        arg = arg.expressions[0]
    if distinct and not order:
        order = [exp.Ordered(this=arg.copy(), desc=False, nulls_first=False)]
    fields = [exp.alias_(o.this.copy(), f"k{i}") for i, o in enumerate(order)]
    collected: exp.Expr = exp.Anonymous(this="COLLECT_LIST", expressions=[
        exp.Struct(expressions=[*fields, exp.alias_(arg.copy(), "v")])])
    if distinct:
        collected = exp.Anonymous(this="ARRAY_DISTINCT", expressions=[collected])
    # The wrappers (FILTER, OVER) stay around the aggregate call itself.
    if outer is not agg:
        wrapped = outer.copy()
        inner = wrapped
        while inner.this is not None and not isinstance(inner.this, exp.ArrayAgg):
            inner = inner.this
        inner.set("this", collected)
        collected = wrapped
    sort = f"ARRAY_SORT(__list__, (l, r) -> {_comparator(order)})" if order else "__list__"
    template = sqlglot.parse_one(f"NULLIF(TRANSFORM({sort}, e -> e.v), ARRAY())",
                                 read="spark")
    placeholder = template.find(exp.Column)
    assert placeholder is not None and placeholder.name == "__list__"
    placeholder.replace(collected)
    return template


def _comparator(order: list[exp.Ordered]) -> str:
    """Spark's ARRAY_SORT comparator for PostgreSQL's ORDER BY over fields k0, k1, …"""
    text = "0"
    for i, o in reversed(list(enumerate(order))):
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = desc
        null_side = -1 if nulls_first else 1  # l NULL, r not: where l goes
        less = 1 if desc else -1  # l < r: where l goes
        left, right = f"l.k{i}", f"r.k{i}"
        text = (f"CASE WHEN {left} IS NULL AND {right} IS NOT NULL THEN {null_side} "
                f"WHEN {right} IS NULL AND {left} IS NOT NULL THEN {-null_side} "
                f"WHEN {left} < {right} THEN {less} WHEN {left} > {right} THEN {-less} "
                f"ELSE {text} END")
    return text
