"""Table projections (ClickHouse's RFC): what a projection keeps, and which queries it
can answer. Pure: no storage, no Spark.

A projection is a SELECT over one table. An *aggregate* projection (GROUP BY or
aggregates) keeps, per data file of the table (a Delta "part"), each group's
mergeable partials: SUM, COUNT, MIN and MAX as themselves, AVG as a sum and a count.
A *sorted* projection keeps chosen columns per part, sorted by its ORDER BY.

A query is routed to an aggregate projection when, read over the partials instead of
the table, it gives the same rows: every column it reads outside its aggregates is
a projection key (or an expression of keys), each of its aggregates merges from a
kept partial, and its WHERE implies the projection's (the projection's conjuncts
are among the query's; the query's other conjuncts filter keys only, so they hold
for a whole partial row or for none of its input rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mzflow import caches
from mzflow.catalog.bind import pin_key, pinned
from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.exprtypes import OPERANDS, sqlglot_scale
from mzflow.catalog.model import ROWID, Item, Projection, Snapshot
from mzflow.errors import InvalidDefinition, Unsupported
from mzflow.plan.query import plan
from mzflow.sql.parse import parse

PART = "_mz_part"  # the source data file a projection row was computed from
AGGREGATE, SORTED = "aggregate", "sorted"

_AGGS = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max)


@dataclass(frozen=True)
class Partial:
    """One kept column of an aggregate projection."""

    column: str  # its name in the projection's shard
    func: str  # sum, count, min or max: how it is computed per part
    arg: exp.Expr | None  # the bound argument (None: count(*))
    merge: str  # how parts combine: sum or min or max


@dataclass(frozen=True)
class Shape:
    projection: Projection
    table: Item
    version: int  # the table version the projection binds to
    kind: str  # AGGREGATE or SORTED
    alias: str  # the table's name in ``bound``
    bound: exp.Select  # the projection's SELECT, bound (qualified, typed)
    where: tuple[exp.Expr, ...]  # its conjuncts, bound
    keys: tuple[exp.Expr, ...]  # GROUP BY expressions, bound (aggregate)
    partials: tuple[Partial, ...]  # (aggregate)
    avgs: tuple[tuple[exp.Expr, str, str], ...]  # (bare arg, sum column, count column)
    columns: tuple[str, ...]  # kept table columns (sorted)
    order: tuple[str, ...]  # sort key (sorted)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(f"_k{i}" for i in range(len(self.keys)))

    def stored_columns(self) -> tuple[str, ...]:
        if self.kind == SORTED:
            return self.columns
        return self.key_columns + tuple(p.column for p in self.partials)


def bare(node: exp.Expr) -> exp.Expr:
    """``node`` without relation qualifiers: one table, so names alone are unique."""
    copy = node.copy()
    for col in copy.find_all(exp.Column):
        col.set("table", None)
    return copy


def conjuncts(where: exp.Expr | None) -> list[exp.Expr]:
    if where is None:
        return []
    node = where.this if isinstance(where, exp.Where) else where
    if isinstance(node, exp.And):
        return conjuncts(node.left) + conjuncts(node.right)
    if isinstance(node, exp.Paren):
        return conjuncts(node.this) if isinstance(node.this, exp.And) else [node]
    return [node]


def _select_of(table: Item, sql: str) -> exp.Select:
    parsed = parse(sql)
    query = parsed[0] if len(parsed) == 1 else None
    if not isinstance(query, exp.Select):
        raise InvalidDefinition("a projection is one SELECT over its table")
    source = query.args.get("from_") or query.args.get("from")
    if source is not None:
        tables = list(query.find_all(exp.Table))
        if (len(tables) != 1 or tables[0].name != table.name or query.args.get("joins")):
            raise InvalidDefinition(f'a projection of "{table.name}" reads "{table.name}" '
                                    "alone")
        return query
    return query.from_(exp.table_(table.name, quoted=True))


def shape(snap: Snapshot, table: Item, projection: Projection) -> Shape:
    """Bind ``projection`` over ``table`` and decide what it keeps; raises the
    definition's error (unknown column, non-deterministic expression, …)."""
    query = _select_of(table, projection.query)
    what = f'projection "{projection.name}"'
    check_deterministic(query, what)
    for kind, name in ((exp.Window, "window functions"), (exp.Subquery, "subqueries"),
                       (exp.Join, "joins"), (exp.Filter, "FILTER clauses")):
        if query.find(kind) is not None:
            raise InvalidDefinition(f"{what} cannot use {name}")
    for clause, name in (("having", "HAVING"), ("limit", "LIMIT"), ("offset", "OFFSET"),
                         ("distinct", "DISTINCT"), ("with_", "WITH")):
        if query.args.get(clause):
            raise InvalidDefinition(f"{what} cannot use {name}")
    p = plan(snap, query)
    bound = p.query
    if not isinstance(bound, exp.Select) or len(p.tables) != 1:
        raise InvalidDefinition(f"{what} must read its table alone")
    _, item, version = p.tables[0]
    alias = _alias(bound)
    where = tuple(conjuncts(bound.args.get("where")))
    group = bound.args.get("group")
    aggs = [a for a in bound.find_all(*_AGGS)]
    if group is None and not aggs:
        return _sorted(projection, item, version, alias, bound, where)
    keys = tuple(group.expressions) if group is not None else ()
    for key in keys:
        if not key.find(exp.Column):
            raise InvalidDefinition(f"{what} groups by a constant")
        if isinstance(key, exp.Column) and key.name == ROWID:
            raise InvalidDefinition(f"{what} groups by a unique key",
                                    hint="each group would be one row: the projection would "
                                         "only copy the table")
    bare_keys = [bare(k) for k in keys]
    partials: list[Partial] = []
    avgs: list[tuple[exp.Expr, str, str]] = []

    def partial(func: str, arg: exp.Expr | None, merge: str) -> str:
        for p_ in partials:
            if p_.func == func and _same(p_.arg, arg):
                return p_.column
        column = f"_a{len(partials)}"
        partials.append(Partial(column, func, arg, merge))
        return column

    for select in bound.expressions:
        node = select.this if isinstance(select, exp.Alias) else select
        for agg in _aggregates_of(node, what):
            func, arg = _agg_parts(agg, what)
            if func == "avg":
                assert arg is not None
                total = partial("avg_sum", arg, "sum")
                count = partial("count", arg, "sum")
                avgs.append((bare(arg), total, count))
            else:
                partial(func, arg, "sum" if func == "count" else func)
        if not node.find(*_AGGS):
            if not any(bare(node) == k for k in bare_keys) and node.find(exp.Column):
                raise InvalidDefinition(
                    f'column "{node.sql()}" must appear in the GROUP BY clause or be used '
                    f"in an aggregate function of {what}")
    if not partials:
        partial("count", None, "sum")  # a GROUP BY alone: DISTINCT-like, kept as counts
    return Shape(projection, item, version, AGGREGATE, alias, bound, where, keys,
                 tuple(partials), tuple(avgs), (), ())


_SHAPES = caches.lru("projections.shapes", 256)


def shape_of(snap: Snapshot, table: Item, projection: Projection) -> Shape:
    """``shape``, kept per projection and table shape (every write and read asks)."""
    key = (projection.id, projection.query, table.columns)
    hit = _SHAPES.get(key)
    if hit is None:
        hit = _SHAPES[key] = shape(snap, table, projection)
    return hit


def check(snap: Snapshot, table: Item, projection: Projection) -> None:
    """A projection's definition is valid (raises its error otherwise)."""
    shape(snap, table, projection)


def _sorted(projection: Projection, item: Item, version: int, alias: str,
            bound: exp.Select, where: tuple[exp.Expr, ...]) -> Shape:
    what = f'projection "{projection.name}"'
    columns: list[str] = []
    for select in bound.expressions:
        node = select.this if isinstance(select, exp.Alias) else select
        if not isinstance(node, exp.Column):
            raise Unsupported(f"{what}: a projection without GROUP BY keeps plain columns, "
                              f"not {node.sql()}")
        if node.name not in columns:
            columns.append(node.name)
    order: list[str] = []
    order_by = bound.args.get("order")
    for ordered in (order_by.expressions if order_by is not None else []):
        node = ordered.this
        if not isinstance(node, exp.Column) or node.name not in columns:
            raise InvalidDefinition(f"{what} sorts by kept columns only")
        order.append(node.name)
    if not order:
        raise InvalidDefinition(f"{what} needs GROUP BY (an aggregate projection) or ORDER "
                                "BY (a sorted projection)")
    return Shape(projection, item, version, SORTED, alias, bound, where, (), (), (),
                 tuple(columns), tuple(order))


def _alias(select: exp.Select) -> str:
    table = select.find(exp.Table)
    assert table is not None
    return table.alias_or_name


def _aggregates_of(node: exp.Expr, what: str) -> list[exp.Expr]:
    found: list[exp.Expr] = [a for a in node.find_all(*_AGGS)]
    for agg in found:
        if agg.find_ancestor(*_AGGS) is not None and agg.find_ancestor(*_AGGS) in found:
            raise InvalidDefinition(f"aggregate function calls cannot be nested in {what}")
    return found


def _agg_parts(agg: exp.Expr, what: str) -> tuple[str, exp.Expr | None]:
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        raise Unsupported(f"{what}: {agg.sql()} cannot merge across parts (DISTINCT)")
    if isinstance(agg, exp.Count):
        return "count", None if isinstance(arg, exp.Star) or arg is None else arg
    return type(agg).__name__.lower(), arg


def _same(a: exp.Expr | None, b: exp.Expr | None) -> bool:
    if a is None or b is None:
        return a is b
    return bare(a) == bare(b)


# -- computing partials -------------------------------------------------------------


def partial_query(s: Shape, source: str) -> exp.Select:
    """The projection's rows per part, over ``source`` (a relation with the table's
    columns and ``PART``): GROUP BY part and keys for an aggregate projection, the kept
    columns with their part for a sorted one."""
    bound = s.bound.copy()
    for table in bound.find_all(exp.Table):
        table.set("this", exp.to_identifier(source))
    part = exp.column(PART, table=s.alias)
    if s.kind == SORTED:
        cols = [exp.alias_(exp.column(c, table=s.alias), c) for c in s.columns]
        out = exp.select(exp.alias_(part, PART), *cols).from_(bound.args["from_"].copy())
    else:
        items = [exp.alias_(part, PART)]
        items += [exp.alias_(k.copy(), f"_k{i}") for i, k in enumerate(s.keys)]
        items += [exp.alias_(_partial_expr(p), p.column) for p in s.partials]
        out = exp.select(*items).from_(bound.args["from_"].copy()).group_by(
            part.copy(), *[k.copy() for k in s.keys])
    if bound.args.get("where") is not None:
        out.set("where", bound.args["where"].copy())
    return out


def _partial_expr(p: Partial) -> exp.Expr:
    arg = p.arg.copy() if p.arg is not None else None
    if p.func == "count":
        return exp.Count(this=arg if arg is not None else exp.Star())
    if p.func == "avg_sum":
        # As pg_semantics renders avg: the sum of the values widened to decimal(38, s),
        # so the quotient of the merged sum and count is the table's avg, digit for digit.
        assert arg is not None
        if _exact(arg.type):
            wide = exp.DataType.build(f"DECIMAL(38, {sqlglot_scale(arg.type)})")
            cast = exp.Cast(this=arg, to=wide)
            cast.type = wide
            return exp.Sum(this=cast)
        return exp.Sum(this=arg)
    cls = {"sum": exp.Sum, "min": exp.Min, "max": exp.Max}[p.func]
    return cls(this=arg)


def _exact(dtype: exp.DataType | None) -> bool:
    return dtype is not None and dtype.is_type(exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES)


# -- routing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Routed:
    shape: Shape
    query: exp.Query  # the query over the projection's relation (named ``relation``)
    relation: str
    key_values: tuple[Any, ...] | None = None  # sorted: the sort key values it reads


def relation_name(s: Shape) -> str:
    return f"mz_proj_{s.projection.id}"


def route(query: exp.Query, s: Shape) -> Routed | str:
    """``query`` answered from ``s``'s projection, or why not (a sentence)."""
    if not isinstance(query, exp.Select):
        return "the query is not a single SELECT"
    if query.args.get("joins") or query.args.get("with_") or query.find(exp.Subquery):
        return "the query reads more than the table"
    tables = list(query.find_all(exp.Table))
    if len(tables) != 1 or (pinned(tables[0].name) or ("",))[0] != s.table.id:
        return f'the query does not read "{s.table.name}" alone'
    if query.find(exp.Window):
        return "the query uses window functions"
    alias = tables[0].alias_or_name
    if pinned(tables[0].name) != pinned(pin_key(s.table, s.version)):
        # A newer version of the table: its added columns are not in the projection.
        pass
    return (_route_aggregate if s.kind == AGGREGATE else _route_sorted)(query, s, alias)


def _route_aggregate(query: exp.Select, s: Shape, alias: str) -> Routed | str:
    aggs = list(query.find_all(*_AGGS))
    if not aggs and query.args.get("group") is None:
        return "the query does not aggregate"
    if query.args.get("distinct"):
        return "the query uses DISTINCT"
    rel = relation_name(s)
    keys = [bare(k) for k in s.keys]

    def substitute(node: exp.Expr) -> exp.Expr | str:
        if isinstance(node, _AGGS):
            return _merge(node, s, alias)
        b = bare(node)
        for i, k in enumerate(keys):
            if b == k:
                col = exp.column(f"_k{i}", table=alias)
                col.type = node.type
                return col
        if isinstance(node, exp.Column) and node.table == alias:
            return f'column "{node.name}" is not a key of the projection'
        return node

    wanted = [bare(w) for w in s.where]
    remaining: list[exp.Expr] = []
    got = [bare(c) for c in conjuncts(query.args.get("where"))]
    for conj, b in zip(conjuncts(query.args.get("where")), got, strict=True):
        if b in wanted:
            continue
        if conj.find(*_AGGS):
            return "an aggregate in WHERE"
        remaining.append(conj)
    missing = [w for w in wanted if w not in got]
    if missing:
        return f"the query's WHERE does not imply the projection's ({missing[0].sql()})"
    out = query.copy()
    out.set("where", None)
    if remaining:
        out.set("where", exp.Where(this=exp.and_(*[r.copy() for r in remaining])))
    result = _rewrite(out, substitute)
    if isinstance(result, str):
        return result
    assert isinstance(result, exp.Query)
    for table in result.find_all(exp.Table):
        table.set("this", exp.to_identifier(rel))
    return Routed(s, result, rel)


def _merge(agg: exp.Expr, s: Shape, alias: str) -> exp.Expr | str:
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        return f"{agg.sql()} cannot merge across parts"
    count_star = isinstance(agg, exp.Count) and (arg is None or isinstance(arg, exp.Star))
    target = None if count_star else bare(arg)

    def find(func: str) -> str | None:
        for p in s.partials:
            if p.func == func and ((p.arg is None and target is None) or (
                    p.arg is not None and target is not None and bare(p.arg) == target)):
                return p.column
        return None

    def col(name: str) -> exp.Column:
        return exp.column(name, table=alias)

    if isinstance(agg, exp.Avg):
        total, count = find("avg_sum"), find("count")
        if total is None or count is None:
            return f"{agg.sql()} is not kept by the projection"
        merged_total = exp.Sum(this=col(total))
        merged_count = exp.Sum(this=col(count))
        quotient = exp.Div(this=merged_total, expression=merged_count)
        # pg_semantics renders this division as it renders avg: the numeric quotient
        # at avg's scale (or a double division for a double avg).
        recorded = agg.meta.get(OPERANDS)
        value_t = recorded[0] if recorded else (arg.type if arg is not None else None)
        wide = (exp.DataType.build(f"DECIMAL(38, {sqlglot_scale(value_t)})") if _exact(value_t)
                else value_t)
        quotient.meta[OPERANDS] = (wide, exp.DataType.build("BIGINT"))
        quotient.type = agg.type
        return quotient
    names: dict[type, str] = {exp.Sum: "sum", exp.Count: "count", exp.Min: "min",
                              exp.Max: "max"}
    func = names[type(agg)]
    column = find(func)
    if column is None:
        return f"{agg.sql()} is not kept by the projection"
    merged: exp.Expr
    if func == "count":
        merged = exp.Coalesce(this=exp.Sum(this=col(column)),
                              expressions=[exp.Literal.number(0)])
    else:
        merged = {"sum": exp.Sum, "min": exp.Min, "max": exp.Max}[func](this=col(column))
    merged.type = agg.type
    return merged


def _rewrite(node: exp.Expr, fn: Callable[[exp.Expr], exp.Expr | str]) -> exp.Expr | str:
    """Replace, outermost first, every node ``fn`` replaces; a string stops it."""
    new = fn(node)
    if isinstance(new, str):
        return new
    if new is not node:
        return new
    for value in list(node.args.values()):
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, exp.Expr):
                replaced = _rewrite(child, fn)
                if isinstance(replaced, str):
                    return replaced
                if replaced is not child:
                    child.replace(replaced)
    return node


def _route_sorted(query: exp.Select, s: Shape, alias: str) -> Routed | str:
    used = {c.name for c in query.find_all(exp.Column) if c.table == alias}
    missing = sorted(used - set(s.columns))
    if missing:
        return f'column "{missing[0]}" is not kept by the projection'
    if query.find(exp.Star):
        stars = [st for st in query.find_all(exp.Star) if not isinstance(st.parent, exp.Count)]
        if stars:
            return "the query selects *"
    wanted = [bare(w) for w in s.where]
    got = [bare(c) for c in conjuncts(query.args.get("where"))]
    if any(w not in got for w in wanted):
        return "the query's WHERE does not imply the projection's"
    lead = s.order[0]
    values = None
    for c in conjuncts(query.args.get("where")):
        found = _key_values(c, lead, alias)
        if found is not None:
            values = found if values is None else [v for v in values if v in found]
    if values is None:
        return (f'the query does not restrict the sort key "{lead}" to values (= or IN '
                "constants)")
    out = query.copy()
    rel = relation_name(s)
    for table in out.find_all(exp.Table):
        table.set("this", exp.to_identifier(rel))
    return Routed(s, out, rel, tuple(values))


def _key_values(conj: exp.Expr, key: str, alias: str) -> list[Any] | None:
    """The constants ``conj`` restricts ``key`` to (``key = c``, ``key IN (c, …)``)."""
    def is_key(node: exp.Expr) -> bool:
        return isinstance(node, exp.Column) and node.name == key and node.table == alias

    options: list[exp.Expr] = []
    if isinstance(conj, exp.EQ):
        if is_key(conj.left):
            options = [conj.right]
        elif is_key(conj.right):
            options = [conj.left]
    elif isinstance(conj, exp.In) and is_key(conj.this) and not conj.args.get("query"):
        options = list(conj.expressions)
    if not options:
        return None
    values = []
    for node in options:
        value = _constant(node)
        if value is _NOT_CONSTANT:
            return None
        values.append(value)
    return values


_NOT_CONSTANT = object()


def _constant(node: exp.Expr) -> Any:
    import datetime as dt
    from decimal import Decimal

    if isinstance(node, exp.Paren):
        return _constant(node.this)
    if isinstance(node, exp.Neg):
        inner = _constant(node.this)
        return _NOT_CONSTANT if inner is _NOT_CONSTANT else -inner
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return Decimal(text) if "." in text or "e" in text.lower() else int(text)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and (
            node.to.is_type(exp.DType.DATE)):
        try:
            return dt.date.fromisoformat(node.this.this)
        except ValueError:
            return _NOT_CONSTANT
    return _NOT_CONSTANT
