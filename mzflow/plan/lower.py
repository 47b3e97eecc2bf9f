"""Lower a bound, view-inlined query into the relational IR.

CTEs are inlined and subqueries decorrelated (sqlglot's ``unnest_subqueries``)
first, so most ``IN``/``EXISTS``/scalar subqueries arrive as joins with grouped
derived tables. A ``LEFT JOIN`` whose right side a ``WHERE`` conjunct rejects
when NULL is an inner join, which is what decorrelation produces for ``IN`` and
``EXISTS``. Whatever the IR does not model becomes an :class:`Opaque` node with
a reason code, never an error: it is recomputed, and EXPLAIN says so.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries

from mzflow.catalog import from_clause
from mzflow.catalog.bind import pinned
from mzflow.catalog.model import ROWID, Snapshot
from mzflow.plan import ir, series
from mzflow.plan.ir import Node, col
from mzflow.reasons import R_CONSTRUCT, R_SUBQUERY
from mzflow.sql.joins import replace_relation


class _Names:
    """Unique output names within one scope, readable in EXPLAIN."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def fresh(self, base: str) -> str:
        base = base or "c"
        name = base
        for i in itertools.count(2):
            if name not in self.used:
                break
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def lower(snap: Snapshot, query: exp.Query) -> Node:
    query = _inline_ctes(query.copy())
    try:
        unnested = unnest_subqueries(query.copy())
        assert isinstance(unnested, exp.Query)
        query = unnested
    except Exception:  # sqlglot cannot decorrelate this shape; the Opaque path keeps it
        pass
    return _Lowerer(snap).query(query)


def _inline_ctes(query: exp.Query) -> exp.Query:
    for with_ in list(query.find_all(exp.With)):
        if with_.args.get("recursive"):
            continue
        bodies = {cte.alias_or_name: cte.this for cte in with_.expressions}
        owner = with_.parent
        assert owner is not None
        owner.set("with_" if "with_" in owner.args else "with", None)
        for table in list(owner.find_all(exp.Table)):
            if table.name in bodies and not table.db:
                replace_relation(table, exp.Subquery(
                    this=bodies[table.name].copy(),
                    alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
    return query


def _conjuncts(e: exp.Expr | None) -> list[exp.Expr]:
    if e is None:
        return []
    if isinstance(e, exp.Where):
        return _conjuncts(e.this)
    if isinstance(e, exp.And):
        return _conjuncts(e.left) + _conjuncts(e.right)
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    if isinstance(e, exp.Boolean) and e.this is True:
        return []
    return [e]


_STRICT = (exp.Column, exp.Literal, exp.Cast, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Paren,
           exp.Neg, exp.Identifier, exp.DataType, exp.DataTypeParam)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)


def _null_rejected(conjunct: exp.Expr) -> set[str]:
    """Relations (aliases) whose all-NULL row makes ``conjunct`` not true."""
    if isinstance(conjunct, exp.Not) and isinstance(conjunct.this, exp.Is) and isinstance(
            conjunct.this.expression, exp.Null) and isinstance(conjunct.this.this, exp.Column):
        return {conjunct.this.this.table}
    if isinstance(conjunct, _COMPARISONS + (exp.Between, exp.In)):
        operands = [conjunct.this] if not isinstance(conjunct, _COMPARISONS) else list(
            conjunct.iter_expressions())
        strict = [o for o in operands if all(isinstance(n, _STRICT) for n in o.walk())]
        return {c.table for o in strict for c in o.find_all(exp.Column)}
    return set()


class _Lowerer:
    def __init__(self, snap: Snapshot):
        self.snap = snap

    def opaque(self, query: exp.Query, reason: str, columns: tuple[str, ...] | None = None
               ) -> Node:
        reads = []
        for table in query.find_all(exp.Table):
            if pinned(table.name):
                reads.append(self.get(table.name, table.name))
        names = columns or tuple(_dedupe(query.named_selects))
        return ir.Opaque(columns=names, query=query, reason=reason, reads=tuple(reads))

    def get(self, ref: str, alias: str, names: _Names | None = None) -> ir.Get:
        pin = pinned(ref)
        assert pin is not None
        item = self.snap.item(pin[0])
        stored = tuple(c.name for c in item.columns_at(pin[1])) + (ROWID,)
        names = names or _Names()
        return ir.Get(columns=tuple(names.fresh(f"{alias}_{c}") for c in stored), ref=ref,
                      item_id=item.id, name=item.qualified_name, stored=stored)

    # -- queries ---------------------------------------------------------------------

    def query(self, q: exp.Query) -> Node:
        if isinstance(q, exp.Subquery):
            return self.query(q.this)
        if isinstance(q, exp.Union | exp.Except | exp.Intersect):
            return self.setop(q)
        if isinstance(q, exp.Select):
            try:
                return self.select(q)
            except _Unmodeled as e:
                return self.opaque(q, e.code)
        return self.opaque(q, R_CONSTRUCT)

    def setop(self, q: exp.SetOperation) -> Node:
        left, right = self.query(q.left), self.query(q.right)
        if len(left.columns) != len(right.columns):
            return self.opaque(q, R_CONSTRUCT)
        distinct = bool(q.args.get("distinct"))
        node: Node
        if isinstance(q, exp.Union):
            parts = tuple(p for side in (left, right)
                          for p in (side.parts if isinstance(side, ir.Union) else (side,)))
            node = ir.Union(columns=left.columns, parts=parts)
            if distinct:
                node = ir.Reduce(columns=node.columns, input=node,
                                 keys=tuple(col(c) for c in node.columns), aggs=())
        else:
            node = ir.SetOp(columns=left.columns,
                            kind="except" if isinstance(q, exp.Except) else "intersect",
                            all=not distinct, left=left, right=right)
        return self._order_limit(q, node, {}, lambda e: e) or node

    def select(self, s: exp.Select) -> Node:
        for sub in s.find_all(exp.Subquery, exp.Exists):
            if sub.parent is not None and not isinstance(sub.parent, exp.From | exp.Join):
                raise _Unmodeled(R_SUBQUERY)
        if any(isinstance(i.args.get("query"), exp.Query) for i in s.find_all(exp.In)):
            raise _Unmodeled(R_SUBQUERY)
        distinct = s.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise _Unmodeled(R_CONSTRUCT)
        names = _Names()
        scope: dict[tuple[str, str], str] = {}
        node = self.sources(s, names, scope)

        def scoped(e: exp.Expr) -> exp.Expr:
            def fix(n: exp.Expr) -> exp.Expr:
                if isinstance(n, exp.Column) and (n.table, n.name) in scope:
                    return col(scope[(n.table, n.name)])
                if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                    raise _Unmodeled(R_CONSTRUCT)
                return n
            return e.copy().transform(fix)

        rewrite: Callable[[exp.Expr], exp.Expr] = scoped
        where = _conjuncts(s.args.get("where"))
        if where:
            node = _push_filter(node, [rewrite(p) for p in where])

        projections = list(s.selects)
        having = s.args.get("having")
        group = s.args.get("group")
        # ORDER BY max(v) … LIMIT: an aggregate only the order uses is computed too.
        order = s.args.get("order")
        ordered = [o.this for o in order.expressions] if order else []
        aggs = [a for p in projections + ([having] if having else []) + ordered
                for a in p.find_all(exp.AggFunc) if not a.find_ancestor(exp.Window)]
        if group is not None or aggs:
            node, rewrite = self.reduce(node, group, aggs, rewrite)
            if having is not None:
                node = ir.Filter(columns=node.columns, input=node,
                                 predicates=tuple(rewrite(p) for p in _conjuncts(having.this)))
        windows = [w for p in projections for w in p.find_all(exp.Window)]
        if windows:
            node, rewrite = self.window(node, windows, rewrite)

        out = _Names()
        outputs = tuple(out.fresh(p.alias_or_name) for p in projections)
        exprs = [rewrite(p.unalias() if isinstance(p, exp.Alias) else p) for p in projections]
        by_output = {name: e for name, e in zip(outputs, exprs, strict=True)}
        node = ir.Map(columns=outputs, input=node, exprs=tuple(exprs))
        if distinct is not None:
            node = ir.Reduce(columns=node.columns, input=node,
                             keys=tuple(col(c) for c in node.columns), aggs=())
        return self._order_limit(s, node, by_output, rewrite) or node

    def _order_limit(self, q: exp.Query, node: Node, by_output: dict[str, exp.Expr],
                     rewrite: Callable[[exp.Expr], exp.Expr]) -> Node | None:
        limit, offset = q.args.get("limit"), q.args.get("offset")
        if limit is None and offset is None:
            return None  # ORDER BY alone does not change a view's contents
        order = q.args.get("order")
        keys: list[exp.Ordered] = []
        hidden: list[exp.Expr] = []
        visible = node.columns
        for ordered in (order.expressions if order else []):
            key = ordered.this
            if isinstance(key, exp.Column) and not key.table and key.name in visible:
                ref = key.name
            elif isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(
                    visible):
                ref = visible[int(key.this) - 1]
            else:
                if not isinstance(node, ir.Map):
                    raise _Unmodeled(R_CONSTRUCT)
                ref = f"_order{len(hidden)}"
                hidden.append(rewrite(key))
            keys.append(ordered.__class__(**{**ordered.args, "this": col(ref)}))
        if hidden:
            assert isinstance(node, ir.Map)
            node = ir.Map(columns=node.columns + tuple(f"_order{i}" for i in range(len(hidden))),
                          input=node.input, exprs=node.exprs + tuple(hidden))
        n = _int(limit.expression if isinstance(limit, exp.Limit) else limit)
        o = _int(offset.expression if isinstance(offset, exp.Offset) else offset) or 0
        if limit is not None and n is None:
            raise _Unmodeled(R_CONSTRUCT)
        top: Node = ir.TopK(columns=node.columns, input=node, order=tuple(keys), limit=n,
                            offset=o)
        if hidden:
            top = ir.Map(columns=visible, input=top, exprs=tuple(col(c) for c in visible))
        return top

    def sources(self, s: exp.Select, names: _Names, scope: dict[tuple[str, str], str]) -> Node:
        from_ = s.args.get("from_") or s.args.get("from")
        if from_ is None:
            raise _Unmodeled(R_CONSTRUCT)
        rejected = set().union(*(_null_rejected(c) for c in _conjuncts(s.args.get("where"))))
        return self._chain(from_.this, list(s.args.get("joins") or []), names, scope, rejected)

    def _chain(self, first: exp.Expr, joins: list[exp.Join], names: _Names,
               scope: dict[tuple[str, str], str], rejected: set[str]) -> Node:
        """A left-deep chain of joins; a parenthesized join in it is a chain of its own
        (``a, (b FULL JOIN c ON …)``: ``catalog/from_clause.py``)."""
        parts: list[Node] = [self.source(first, names, scope, rejected)]
        preds: list[exp.Expr] = []
        current: Node | None = None
        for join in joins:
            kind = (join.args.get("kind") or "").upper()
            side = (join.args.get("side") or "").upper()
            if kind in ("SEMI", "ANTI") or join.args.get("using"):
                raise _Unmodeled(R_CONSTRUCT)
            if series.is_series(join.this) and series.correlated(join.this):
                # LATERAL generate_series(…, t.n): once per row of everything to its left.
                if side:
                    raise _Unmodeled(R_CONSTRUCT)
                left = _join(tuple(parts), tuple(self._fix(p, scope) for p in preds))
                parts = [series.flat_map(left, join.this, names.fresh, scope,
                                         lambda e: self._fix(e, scope))]
                preds = _conjuncts(join.args.get("on"))
                continue
            right = self.source(join.this, names, scope, rejected)
            alias = join.this.alias_or_name
            on = _conjuncts(join.args.get("on"))
            if side == "LEFT" and alias and alias in rejected:
                side = ""
            if not side:
                parts.append(right)
                preds += on
                continue
            left = _join(tuple(parts), tuple(self._fix(p, scope) for p in preds))
            if side == "RIGHT":
                left, right = right, left
            on_expr = self._fix(exp.and_(*on) if on else exp.true(), scope)
            current = ir.OuterJoin(columns=left.columns + right.columns,
                                   kind="full" if side == "FULL" else "left", left=left,
                                   right=right, on=on_expr,
                                   keys=_keys(on_expr, left.columns, right.columns))
            parts, preds = [current], []
        return _join(tuple(parts), tuple(self._fix(p, scope) for p in preds))

    def _fix(self, e: exp.Expr, scope: dict[tuple[str, str], str]) -> exp.Expr:
        def fix(n: exp.Expr) -> exp.Expr:
            if isinstance(n, exp.Column):
                if (n.table, n.name) not in scope:
                    raise _Unmodeled(R_CONSTRUCT)
                return col(scope[(n.table, n.name)])
            return n
        return e.copy().transform(fix)

    def source(self, rel: exp.Expr, names: _Names, scope: dict[tuple[str, str], str],
               rejected: set[str] | None = None) -> Node:
        if from_clause.is_group(rel):
            first, joins = from_clause.parts(rel)
            return self._chain(first, joins, names, scope, rejected or set())
        alias = rel.alias_or_name
        if isinstance(rel, exp.Table) and pinned(rel.name):
            get = self.get(rel.name, alias, names)
            for stored, name in zip(get.stored, get.columns, strict=True):
                scope[(alias, stored)] = name
            return get
        if series.is_series(rel):  # a generate_series of constants: a constant relation
            return series.flat_map(None, rel, names.fresh, scope, lambda e: self._fix(e, scope))
        if isinstance(rel, exp.Subquery) and isinstance(rel.this, exp.Query):
            inner = self.query(rel.this)
            outer = tuple(names.fresh(f"{alias}_{c}") for c in inner.columns)
            for c, name in zip(inner.columns, outer, strict=True):
                scope[(alias, c)] = name
            return ir.Map(columns=outer, input=inner, exprs=tuple(col(c) for c in inner.columns))
        raise _Unmodeled(R_CONSTRUCT)

    def reduce(self, node: Node, group: exp.Group | None, aggs: list[exp.Expr],
               rewrite: Callable[[exp.Expr], exp.Expr]
               ) -> tuple[Node, Callable[[exp.Expr], exp.Expr]]:
        keys = list(group.expressions) if group is not None else []
        if group is not None and any(group.args.get(k) for k in ("rollup", "cube",
                                                                   "grouping_sets")):
            raise _Unmodeled(R_CONSTRUCT)
        out = _Names()
        key_names = [out.fresh(k.name if isinstance(k, exp.Column) else f"key{i}")
                     for i, k in enumerate(keys)]
        unique_aggs: list[exp.Expr] = []
        for a in aggs:
            if a not in unique_aggs:
                unique_aggs.append(a)
        agg_names = [out.fresh(f"agg{i}") for i in range(len(unique_aggs))]
        reduce = ir.Reduce(columns=tuple(key_names + agg_names), input=node,
                           keys=tuple(rewrite(k) for k in keys),
                           aggs=tuple(rewrite(a) for a in unique_aggs))

        def after(e: exp.Expr) -> exp.Expr:
            def fix(n: exp.Expr) -> exp.Expr:
                for k, name in zip(keys, key_names, strict=True):
                    if n == k:
                        return col(name)
                if isinstance(n, exp.AggFunc):
                    return col(agg_names[unique_aggs.index(n)])
                if isinstance(n, exp.Column):
                    raise _Unmodeled(R_CONSTRUCT)  # an ungrouped column: let Spark say so
                return n
            return _transform_outer_first(e.copy(), fix)
        return reduce, after

    def window(self, node: Node, windows: list[exp.Window],
               rewrite: Callable[[exp.Expr], exp.Expr]
               ) -> tuple[Node, Callable[[exp.Expr], exp.Expr]]:
        exprs = [rewrite(w) for w in windows]
        partitions = [tuple(p.name for p in (w.args.get("partition_by") or [])
                            if isinstance(p, exp.Column)) for w in exprs]
        common = [c for c in partitions[0] if all(c in p for p in partitions)]
        names = tuple(f"window{i}" for i in range(len(windows)))
        win = ir.Window(columns=node.columns + names, input=node, exprs=tuple(exprs),
                        partition=tuple(common))

        def after(e: exp.Expr) -> exp.Expr:
            def fix(n: exp.Expr) -> exp.Expr:
                if isinstance(n, exp.Window):
                    return col(names[windows.index(n)])
                return n
            replaced = _transform_outer_first(e.copy(), fix)
            return rewrite(replaced) if any(
                c.table for c in replaced.find_all(exp.Column)) else replaced
        return win, after


class _Unmodeled(Exception):
    def __init__(self, code: str):
        self.code = code


def _transform_outer_first(e: exp.Expr, fix: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """Replace the outermost matching subtrees (a whole group key before its columns)."""
    new = fix(e)
    if new is not e:
        return new
    for key, value in list(e.args.items()):
        if isinstance(value, exp.Expr):
            e.set(key, _transform_outer_first(value, fix))
        elif isinstance(value, list):
            e.set(key, [_transform_outer_first(v, fix) if isinstance(v, exp.Expr) else v
                        for v in value])
    return e


def _push_filter(node: Node, preds: list[exp.Expr]) -> Node:
    """WHERE conjuncts go into the joins below them: an n-ary join takes them as join
    predicates (equalities become join keys), and a LEFT JOIN passes those over its
    left side only down to that side (exact: they filter left rows either way). A
    comma join under an outer join would otherwise be a cross product."""
    if not preds:
        return node
    if isinstance(node, ir.FlatMap):
        node, preds = series.push_below(node, preds)
        if not preds:
            return node
    if isinstance(node, ir.Join):
        return _join(node.parts, node.predicates + tuple(preds))
    if isinstance(node, ir.OuterJoin) and node.kind == "left":
        left_cols = set(node.left.columns)
        lefts = [p for p in preds if {c.name for c in p.find_all(exp.Column)} <= left_cols]
        if lefts:
            node = dataclasses.replace(node, left=_push_filter(node.left, lefts))
            preds = [p for p in preds if not any(p is q for q in lefts)]
        if not preds:
            return node
    return ir.Filter(columns=node.columns, input=node, predicates=tuple(preds))


def _join(parts: tuple[Node, ...], preds: tuple[exp.Expr, ...]) -> Node:
    if len(parts) == 1:
        return ir.Filter(columns=parts[0].columns, input=parts[0], predicates=preds
                         ) if preds else parts[0]
    owner = {c: i for i, p in enumerate(parts) for c in p.columns}
    eqs = []
    for p in preds:
        if isinstance(p, exp.EQ) and isinstance(p.left, exp.Column) and isinstance(
                p.right, exp.Column):
            a, b = owner.get(p.left.name), owner.get(p.right.name)
            if a is not None and b is not None and a != b:
                eqs.append(((a, p.left.name), (b, p.right.name)))
    return ir.Join(columns=tuple(c for p in parts for c in p.columns), parts=parts,
                   predicates=preds, equalities=tuple(eqs))


def _keys(on: exp.Expr, left: tuple[str, ...], right: tuple[str, ...]
          ) -> tuple[tuple[str, str], ...]:
    keys = []
    for c in _conjuncts(on):
        if isinstance(c, exp.EQ) and isinstance(c.left, exp.Column) and isinstance(
                c.right, exp.Column):
            a, b = c.left.name, c.right.name
            if a in left and b in right:
                keys.append((a, b))
            elif b in left and a in right:
                keys.append((b, a))
    return tuple(keys)


def _int(e: exp.Expr | None) -> int | None:
    if isinstance(e, exp.Literal) and e.is_int:
        return int(e.this)
    return None


def _dedupe(names: list[str]) -> list[str]:
    out = _Names()
    return [out.fresh(n) for n in names]
