"""Parenthesized joins in FROM → one flat join list.

sqlglot parses ``FROM (a CROSS JOIN b)`` as a ``Subquery`` whose body is the table
``a`` carrying the join to ``b`` in its own ``joins``. Later stages (binding,
lowering, Spark SQL) expect joins in the SELECT's join list, and a table that
carries joins silently loses them when it is renamed. Joins associate to the left,
so a parenthesized join that comes first in FROM is the same join unparenthesized,
whatever its kinds; on the right of an inner join, a group of inner joins is too,
once the outer join's ON condition moves onto the group's last join. Other shapes
(an alias on the group, the group on the right of an outer join) stay as they are,
and binding refuses them by name.
"""

from __future__ import annotations

from sqlglot import exp


def flatten_joins(tree: exp.Expr) -> exp.Expr:
    for select in list(tree.find_all(exp.Select)):
        from_ = select.args.get("from_")
        if from_ is None:
            continue
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
    if not _inner(join) or join.args.get("using") or not all(
            _inner(j) and not j.args.get("using") for j in rest):
        return [join]  # not the same join unparenthesized: binding refuses it
    on = join.args.get("on")
    head = exp.Join(this=first, kind="CROSS")
    if on is not None:
        last = rest[-1]
        last.set("kind", None if last.args.get("kind") == "CROSS" else last.args.get("kind"))
        last.set("on", exp.and_(last.args["on"], on) if last.args.get("on") else on)
    return [head, *rest]
