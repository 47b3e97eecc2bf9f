"""Parenthesized joins in FROM → one flat join list.

sqlglot parses ``FROM (a CROSS JOIN b)`` as a ``Subquery`` whose body is the table
``a`` carrying the join to ``b`` in its own ``joins``. Later stages (binding,
lowering, Spark SQL) expect joins in the SELECT's join list, and a table that
carries joins silently loses them when it is renamed. Joins associate to the left,
so a parenthesized join that comes first in FROM is the same join unparenthesized,
whatever its kinds; on the right of an inner join, a group of inner joins is too,
once the outer join's ON condition moves onto the group's last join. Other shapes
(the group on the right of an outer join) stay nested, and binding reads them as
groups (``catalog/from_clause.py``); an alias on a group is refused by name.

A comma binds more loosely than JOIN: ``a, b FULL JOIN c ON …`` is ``a CROSS JOIN (b
FULL JOIN c ON …)``, but sqlglot hands back one flat, left-associated list, which means
``(a CROSS JOIN b) FULL JOIN c`` (a wrong answer: c's unmatched rows lose a's). So a
comma-separated item whose chain holds a RIGHT or FULL join, or a USING or NATURAL
join (whose columns resolve within the item only), becomes a parenthesized group
first. Chains of inner and LEFT joins after a comma stay flat: associating them either
way gives the same rows.
"""

from __future__ import annotations

from sqlglot import exp


def flatten_joins(tree: exp.Expr) -> exp.Expr:
    for select in list(tree.find_all(exp.Select)):
        from_ = select.args.get("from_")
        if from_ is None:
            continue
        _nest_comma_items(select)
        first, joins = _unwrap(from_.this)
        if joins or first is not from_.this:
            from_.set("this", first)
        flat = joins
        for join in select.args.get("joins") or []:
            flat.extend(_flatten_join(join))
        if flat:
            select.set("joins", flat)
    return tree


def _is_parenthesized_join(rel: exp.Expr) -> bool:
    # `((a JOIN b) JOIN c)` nests: the outer body is a Subquery carrying joins.
    return isinstance(rel, exp.Subquery) and (
        not isinstance(rel.this, exp.Query) or bool(rel.this.args.get("joins"))
        or _is_parenthesized_join(rel.this))


def _unwrap(rel: exp.Expr) -> tuple[exp.Expr, list[exp.Join]]:
    """A relation → its first relation and the joins that follow it, flattened."""
    if not _is_parenthesized_join(rel):
        return rel, []
    if rel.args.get("alias") is not None:
        return rel, []  # left as it is: binding refuses it
    inner = rel.this
    joins = list(inner.args.get("joins") or [])
    inner.set("joins", None)
    first, before = _unwrap(inner)
    flat = before
    for join in joins:
        flat.extend(_flatten_join(join))
    return first, flat


def _inner(join: exp.Join) -> bool:
    return not join.args.get("side") and (join.args.get("kind") or "").upper() in (
        "", "INNER", "CROSS")


def _flatten_join(join: exp.Join) -> list[exp.Join]:
    if not _is_parenthesized_join(join.this):
        return [join]
    first, rest = _unwrap(join.this.copy())
    if not rest:  # just a parenthesized relation
        join.set("this", first)
        return [join]
    if not _inner(join) or _binds_within(join) or not all(
            _inner(j) and not _binds_within(j) for j in rest):
        return [join]  # not the same join unparenthesized: it stays a group
    on = join.args.get("on")
    head = exp.Join(this=first, kind="CROSS")
    if on is not None:
        last = rest[-1]
        last.set("kind", None if last.args.get("kind") == "CROSS" else last.args.get("kind"))
        last.set("on", exp.and_(last.args["on"], on) if last.args.get("on") else on)
    return [head, *rest]


def replace_relation(old: exp.Expr, new: exp.Expr) -> exp.Expr:
    """``old.replace(new)`` for a FROM item. The first relation of a parenthesized
    join carries the group's joins (sqlglot's shape for ``(b FULL JOIN c ON …)``), so
    whatever replaces it (a version pin, an inlined view, an inlined CTE) must carry
    them on, or the join silently disappears."""
    joins = old.args.get("joins")
    if joins:
        new.set("joins", joins)
    old.replace(new)
    return new


def _is_comma(join: exp.Join) -> bool:
    return not any(join.args.get(k) for k in ("kind", "side", "on", "using", "method"))


def _binds_within(join: exp.Join) -> bool:
    """A join whose result differs when a comma item before it joins first."""
    return (join.args.get("side") or "").upper() in ("RIGHT", "FULL") or bool(
        join.args.get("using")) or (join.args.get("method") or "").upper() == "NATURAL"


def _nest_comma_items(select: exp.Select) -> None:
    """``FROM a, b J1 c J2 d`` → ``FROM a, (b J1 c J2 d)`` where the item's chain needs it."""
    joins = list(select.args.get("joins") or [])
    out: list[exp.Join] = []
    i = 0
    while i < len(joins):
        j = i + 1
        while j < len(joins) and not _is_comma(joins[j]):
            j += 1
        head, chain = joins[i], joins[i + 1:j]
        first = head.this
        if _is_comma(head) and any(_binds_within(c) for c in chain) and isinstance(
                first, exp.Table | exp.Subquery) and not first.args.get("joins"):
            first.set("joins", chain)
            out.append(exp.Join(this=exp.Subquery(this=first)))
        else:
            out.extend([head, *chain])
        i = j
    if len(out) != len(joins):
        select.set("joins", out)
