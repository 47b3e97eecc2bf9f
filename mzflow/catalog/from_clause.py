"""A FROM clause's join tree, read by PostgreSQL's rules.

``sql/joins.py`` leaves a join that must stay nested (``a, (b FULL JOIN c ON …)``) as
a *group*: an unaliased ``Subquery`` whose relation carries its own ``joins``.
sqlglot's ``qualify`` resolves ON conditions and ``*`` inside groups, but not USING
or NATURAL there (it names no table), and outside groups it resolves a USING column
against every earlier FROM item, not only the join's left side, and its errors are
its own. So every USING and NATURAL join is rewritten here first, as PostgreSQL
defines them (transformFromClauseItem):

- each side must have exactly one column of each USING name ("column … specified in
  USING clause does not exist in left table", "common column name … appears more
  than once in left table");
- the join condition is ``left.k = right.k``; the joined output has the merged column
  ``k`` first (left's for INNER and LEFT, right's for RIGHT, COALESCE of both for
  FULL), then left's other columns, then right's;
- an unqualified ``k`` above the join means the merged column; ``x.k`` keeps meaning
  x's own.

Then ``*`` is expanded here (the merged columns cannot be written as ``t.*``), and
unqualified references to merged columns are replaced by their expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlglot import exp

from mzflow.errors import UnknownColumn, Unsupported


class AmbiguousColumn(UnknownColumn):
    code = "42702"  # ambiguous_column


def is_group(rel: exp.Expr | None) -> bool:
    """A parenthesized join: ``(b FULL JOIN c ON …)``."""
    # A subquery's SELECT carries ``joins`` too; a group's first relation is a table.
    return isinstance(rel, exp.Subquery) and isinstance(rel.this, exp.Expr) and not \
        isinstance(rel.this, exp.Query) and (
            bool(rel.this.args.get("joins")) or is_group(rel.this))


def parts(group: exp.Expr) -> tuple[exp.Expr, list[exp.Join]]:
    """A group → its first relation and the joins that follow it."""
    inner = group.this
    return inner, list(inner.args.get("joins") or [])


def relations(rel: exp.Expr) -> Iterator[exp.Expr]:
    """The FROM items a relation stands for: itself, or a group's, in order."""
    if not is_group(rel):
        yield rel
        return
    first, joins = parts(rel)
    if is_group(first):
        yield from relations(first)
    else:
        yield _without_joins(first)
    for join in joins:
        yield from relations(join.this)


def _without_joins(rel: exp.Expr) -> exp.Expr:
    """The group's first relation as a FROM item of its own (it carries the joins)."""
    if not rel.args.get("joins"):
        return rel
    bare = rel.copy()
    bare.set("joins", None)
    return bare


def check_groups(select: exp.Select) -> None:
    from_ = select.args.get("from_")
    items = [from_.this] if from_ is not None else []
    for rel in items + [j.this for j in select.args.get("joins") or []]:
        if isinstance(rel, exp.Subquery) and rel.alias and is_group(rel):
            raise Unsupported("an alias on a parenthesized join is not supported yet")


def null_extended(query: exp.Expr) -> set[str]:
    """Aliases of the FROM items an outer join may pad with NULLs (the right of a LEFT
    JOIN, the left of a RIGHT JOIN, both sides of a FULL JOIN): their columns are
    nullable whatever their tables declare."""
    out: set[str] = set()
    for select in query.find_all(exp.Select):
        from_ = select.args.get("from_")
        if from_ is not None:
            _pad(from_.this, list(select.args.get("joins") or []), out)
    return out


def _pad(first: exp.Expr, joins: list[exp.Join], out: set[str]) -> None:
    before = [r.alias_or_name for r in relations(first)]
    for rel in (first, *(j.this for j in joins)):
        if is_group(rel):
            _pad(*parts(rel), out)
    for join in joins:
        side = (join.args.get("side") or "").upper()
        right = [r.alias_or_name for r in relations(join.this)]
        if side in ("RIGHT", "FULL"):
            out.update(before)
        if side in ("LEFT", "FULL"):
            out.update(right)
        before += right


@dataclass(frozen=True, eq=False)
class _Column:
    name: str
    expr: exp.Expr  # a qualified column, or the merge of two USING columns
    merged: bool = False


Names = Callable[[exp.Expr], list[str]]


def resolve_using(select: exp.Select, names: Names) -> None:
    """Rewrite ``select``'s USING and NATURAL joins as described above, in place.
    ``names``: the columns a FROM item offers ``*``, in order."""
    from_ = select.args.get("from_")
    if from_ is None or not any(_joined_by_name(j) for j in _all_joins(select)):
        return
    columns = _chain(from_.this, list(select.args.get("joins") or []), names)
    merged = {c.name: c for c in columns if c.merged}
    counts: dict[str, int] = {}
    for c in columns:
        counts[c.name] = counts.get(c.name, 0) + 1
    stars: list[exp.Expr] = []
    for proj in select.expressions:
        if isinstance(proj, exp.Star):
            stars += [exp.alias_(c.expr.copy(), c.name) for c in columns]
        else:
            stars.append(proj)
    select.set("expressions", stars)
    for column in list(_own_columns(select)):
        if column.table or column.name not in merged:
            continue
        if counts[column.name] > 1:
            raise AmbiguousColumn(f'column reference "{column.name}" is ambiguous')
        expr = merged[column.name].expr.copy()
        if column.parent is select:  # a projection keeps its name
            expr = exp.alias_(expr, column.name)
        column.replace(expr)


def _joined_by_name(join: exp.Join) -> bool:
    return bool(join.args.get("using")) or (join.args.get("method") or "").upper() == "NATURAL"


def _all_joins(select: exp.Select) -> Iterator[exp.Join]:
    stack = list(select.args.get("joins") or [])
    from_ = select.args.get("from_")
    if from_ is not None and is_group(from_.this):
        stack += parts(from_.this)[1]
    while stack:
        join = stack.pop()
        yield join
        rel = join.this
        while is_group(rel):
            first, joins = parts(rel)
            stack += joins
            rel = first


def _own_columns(select: exp.Select) -> Iterator[exp.Column]:
    """Column references of ``select`` itself, not of the queries nested in it."""
    for column in select.find_all(exp.Column):
        if column.find_ancestor(exp.Select) is select:
            yield column


def _columns_of(rel: exp.Expr, names: Names) -> list[_Column]:
    if is_group(rel):
        first, joins = parts(rel)
        return _chain(_without_joins_in_place(first), joins, names)
    alias = rel.alias_or_name
    return [_Column(n, exp.column(n, table=alias)) for n in names(rel)]


def _without_joins_in_place(rel: exp.Expr) -> exp.Expr:
    # The joins stay on the tree (Spark renders the group from them); only the column
    # listing must not see them as part of the first relation.
    return rel if is_group(rel) else _without_joins(rel)


def _chain(first: exp.Expr, joins: list[exp.Join], names: Names) -> list[_Column]:
    left = _columns_of(first, names)
    for join in joins:
        right = _columns_of(join.this, names)
        using = [i.name for i in join.args.get("using") or []]
        natural = (join.args.get("method") or "").upper() == "NATURAL"
        if natural:
            right_names = {c.name for c in right}
            using = [c.name for c in left if c.name in right_names]
        on = join.args.get("on")
        if on is not None:
            _resolve_unqualified(on, left + right)
        if not using and not natural:
            left = left + right
            continue
        side = (join.args.get("side") or "").upper()
        merged, conditions, used = [], [], set()
        for name in using:
            lcol, rcol = _one(left, name, "left"), _one(right, name, "right")
            used |= {id(lcol), id(rcol)}
            conditions.append(exp.EQ(this=lcol.expr.copy(), expression=rcol.expr.copy()))
            expr = (lcol.expr if side in ("", "LEFT") else rcol.expr if side == "RIGHT"
                    else exp.Coalesce(this=lcol.expr.copy(), expressions=[rcol.expr.copy()]))
            merged.append(_Column(name, expr, merged=True))
        join.set("using", None)
        join.set("method", None)
        if conditions:
            join.set("on", exp.and_(*conditions))
        elif not side:
            join.set("kind", "CROSS")  # NATURAL JOIN with no common column
        else:
            join.set("on", exp.true())
        left = merged + [c for c in left + right if id(c) not in used]
    return left


def _one(columns: list[_Column], name: str, side: str) -> _Column:
    found = [c for c in columns if c.name == name]
    if not found:
        raise UnknownColumn(
            f'column "{name}" specified in USING clause does not exist in {side} table')
    if len(found) > 1:
        raise AmbiguousColumn(
            f'common column name "{name}" appears more than once in {side} table')
    return found[0]


def _resolve_unqualified(on: exp.Expr, visible: list[_Column]) -> None:
    """An ON condition's unqualified reference to a merged column, made explicit."""
    merged = {c.name: c for c in visible if c.merged}
    for column in list(on.find_all(exp.Column)):
        if not column.table and column.name in merged and not _in_subquery(column, on):
            column.replace(merged[column.name].expr.copy())


def _in_subquery(node: exp.Expr, top: exp.Expr) -> bool:
    parent = node.parent
    while parent is not None and parent is not top:
        if isinstance(parent, exp.Select):
            return True
        parent = parent.parent
    return False
