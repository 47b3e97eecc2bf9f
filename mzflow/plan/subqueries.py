"""``IN``/``NOT IN``/``= ANY``/``<> ALL`` over a subquery, in SQL's three-valued logic.

SQL says ``x IN (subquery)`` is TRUE when some row equals ``x``, FALSE when the
subquery is empty or no row equals ``x`` and none is NULL, and NULL otherwise.
Spark gets that right only for a WHERE (or HAVING) conjunct, where it plans a semi
join or a null-aware anti join and NULL filters like FALSE. Anywhere else (a select
list, under OR, in CASE) it plans an existence join, which is two-valued: FALSE
where SQL says NULL. So everywhere else the predicate becomes

    CASE WHEN x IN (q) THEN TRUE            -- a match (Spark is right about these)
         WHEN NOT EXISTS (q) THEN FALSE     -- an empty set, even for a NULL x
         WHEN x IS NULL THEN NULL
         WHEN EXISTS (q's rows whose value IS NULL) THEN NULL
         ELSE FALSE END

``x = ANY (q)`` is ``x IN (q)`` and ``x <> ALL (q)`` is ``NOT (x IN (q))``.
"""

from __future__ import annotations

from sqlglot import exp

_NULL_ROW = "_mz_in"
_NULL_COL = "_mz_v"


def three_valued_in(query: exp.Query) -> exp.Query:
    query = query.copy()
    for node in list(query.find_all(exp.EQ, exp.NEQ)):
        quantified = node.expression
        if isinstance(quantified, exp.Any | exp.All) and isinstance(
                quantified.this, exp.Subquery | exp.Query):
            is_in = isinstance(node, exp.EQ) and isinstance(quantified, exp.Any)
            not_in = isinstance(node, exp.NEQ) and isinstance(quantified, exp.All)
            if is_in or not_in:
                quantified_sub = quantified.this
                body = quantified_sub.this if isinstance(quantified_sub, exp.Subquery) else (
                    quantified_sub)
                pred: exp.Expr = exp.In(this=node.this.copy(), query=exp.Subquery(
                    this=body.copy()))
                node.replace(exp.Not(this=exp.Paren(this=pred)) if not_in else pred)
    for in_ in list(query.find_all(exp.In)):
        sub = in_.args.get("query")
        if sub is None or _is_filter_conjunct(in_):
            continue
        inner = sub.this if isinstance(sub, exp.Subquery) else sub
        if isinstance(inner, exp.Query) and len(inner.selects) == 1:
            in_.replace(_case(in_.this, inner))
    return query


def _is_filter_conjunct(node: exp.Expr) -> bool:
    """Is ``node`` (or NOT ``node``) a conjunct of a WHERE or HAVING clause?"""
    seen_and = seen_not = False
    parent = node.parent
    while isinstance(parent, exp.Paren | exp.Not | exp.And):
        if isinstance(parent, exp.And):
            if seen_not:
                return False  # NOT (a AND b) is a disjunction
            seen_and = True
        elif isinstance(parent, exp.Not):
            if seen_and or seen_not:
                return False
            seen_not = True
        parent = parent.parent
    return isinstance(parent, exp.Where | exp.Having)


def _case(x: exp.Expr, body: exp.Query) -> exp.Expr:
    def sub() -> exp.Subquery:
        return exp.Subquery(this=body.copy())

    return exp.Case(ifs=[
        exp.If(this=exp.In(this=x.copy(), query=sub()), true=exp.true()),
        exp.If(this=exp.Not(this=exp.Exists(this=body.copy())), true=exp.false()),
        exp.If(this=exp.Is(this=x.copy(), expression=exp.Null()), true=exp.null()),
        exp.If(this=exp.Exists(this=_null_rows(body)), true=exp.null()),
    ], default=exp.false())


def _null_rows(body: exp.Query) -> exp.Query:
    """The rows of ``body`` whose value is NULL. A plain SELECT keeps its FROM (so a
    correlated subquery stays correlated where Spark can decorrelate it); anything
    else is read as a derived table."""
    if isinstance(body, exp.Select) and not any(body.args.get(k) for k in (
            "group", "having", "limit", "offset", "distinct", "qualify")) and not any(
            p.find(exp.AggFunc, exp.Window) for p in body.selects):
        value = body.selects[0]
        value = value.this if isinstance(value, exp.Alias) else value
        select = body.copy()
        select.set("expressions", [exp.Literal.number(1)])
        select.set("order", None)
        return select.where(exp.Is(this=value.copy(), expression=exp.Null()))
    derived = exp.Subquery(this=body.copy(), alias=exp.TableAlias(
        this=exp.to_identifier(_NULL_ROW), columns=[exp.to_identifier(_NULL_COL)]))
    return exp.select("1").from_(derived).where(exp.Is(
        this=exp.column(_NULL_COL, table=_NULL_ROW), expression=exp.Null()))
