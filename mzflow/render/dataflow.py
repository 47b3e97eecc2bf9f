"""Render IR trees on Spark: full contents at a time, and differential changes.

``full(node, mode, restriction)`` is the node's contents at the tick's old or
new time, optionally only the rows whose restriction expressions take one of
a set of key values. Restrictions are pushed towards the base tables where
that is exact, and at a base table they prune Delta files by their min/max
statistics: this is what keeps a join or an affected-group recompute reading
in proportion to the batch.

``delta(node)`` is the node's changes between the two times, as rows with a
``_mz_diff`` column. Linear operators (filter, map, union) transform changes
row by row; inner joins use the delta-join rule; operators whose output for a
key depends only on the input rows with that key (GROUP BY, outer equi-joins,
windows and top-k per partition, EXCEPT/INTERSECT) recompute the affected keys
at both times; anything else recomputes whole and diffs (the reason is in
EXPLAIN).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.plan import ir
from mzflow.plan.ir import Node
from mzflow.render.spark import from_arrow, pg_semantics

DIFF = "_mz_diff"
NEW, OLD = "new", "old"
COLLECT_LIMIT = 100_000  # affected keys collected to the driver to prune files
ISIN_LIMIT = 2_000  # key values also pushed into the Parquet scan as IN (row groups)


@dataclass(frozen=True)
class Input:
    """One base table as the tick sees it."""

    files: dict[str, tuple[str, ...] | None]  # mode → Parquet files (None: did not exist)
    stats: dict[str, Any]  # mode → a loader of Delta add actions (file statistics)
    schema_ddl: str
    # → (change rows with DIFF as Arrow or a DataFrame, rows read); None: unchanged
    changes: Callable[[], tuple[Any, int]] | None
    num_rows: dict[str, Callable[[Sequence[str]], int]] = field(default_factory=dict)


@dataclass
class Restriction:
    """Rows whose ``exprs`` (over the node's columns) equal one of ``keys``' rows."""

    exprs: tuple[exp.Expr, ...]
    keys: Any  # DataFrame with columns k0..kn
    values: list[tuple[Any, ...]] | None  # the same, collected (None: too many)


class Dataflow:
    def __init__(self, spark: Any, inputs: dict[str, Input]):
        self.spark = spark
        self.inputs = inputs  # by Get.ref
        self.rows_read = 0
        self.files_read = 0
        self._deltas: dict[int, Any] = {}

    # -- static facts ------------------------------------------------------------------

    def changed(self, node: Node) -> bool:
        return any(self.inputs[g.ref].changes is not None for g in node.gets())

    # -- full contents -----------------------------------------------------------------

    def full(self, node: Node, mode: str, r: Restriction | None = None) -> Any:
        method = getattr(self, f"_full_{type(node).__name__.lower()}")
        return method(node, mode, r)

    def _top(self, df: Any, r: Restriction | None) -> Any:
        """Apply a restriction at this node's output (no pushdown)."""
        if r is None:
            return df
        from pyspark.sql import functions as F

        keys = r.keys.toDF(*[f"_mz_k{i}" for i in range(len(r.exprs))])
        cond = None
        for i, e in enumerate(r.exprs):
            c = F.expr(_sql(e)).eqNullSafe(F.col(f"_mz_k{i}"))
            cond = c if cond is None else cond & c
        return df.join(keys, cond, "left_semi")

    def _full_get(self, node: ir.Get, mode: str, r: Restriction | None) -> Any:
        from pyspark.sql import functions as F

        inp = self.inputs[node.ref]
        stored_files = inp.files[mode]
        if not stored_files:
            return self._empty(node)
        files = list(stored_files)
        pruned_on = _plain(r.exprs[0]) if r is not None else None
        if r is not None and r.values is not None and pruned_on is not None:
            stored = node.stored[node.columns.index(pruned_on)]
            files = _prune(files, inp.stats[mode](), stored, [v[0] for v in r.values])
        self.files_read += len(files)
        self.rows_read += inp.num_rows[mode](files) if files else 0
        if not files:
            return self._empty(node)
        df = self.spark.read.schema(inp.schema_ddl).parquet(*files).select(
            *[F.col(f"`{s}`").alias(n) for s, n in zip(node.stored, node.columns, strict=True)])
        if r is not None and r.values is not None and pruned_on is not None and len(
                r.values) <= ISIN_LIMIT and all(v[0] is not None for v in r.values):
            # A literal IN list reaches the Parquet reader, which skips row groups.
            df = df.where(F.col(f"`{pruned_on}`").isin([v[0] for v in r.values]))
        return self._top(df, r)

    def _empty(self, node: Node) -> Any:
        return self._schema_of(node).limit(0)

    def _schema_of(self, node: Node) -> Any:
        """An empty frame with the node's columns and types (for a missing table)."""
        from pyspark.sql import functions as F

        if isinstance(node, ir.Get):
            inp = self.inputs[node.ref]
            empty = self.spark.createDataFrame([], inp.schema_ddl)
            return empty.select(*[F.col(f"`{s}`").alias(n)
                                  for s, n in zip(node.stored, node.columns, strict=True)])
        raise AssertionError(type(node).__name__)

    def _full_filter(self, node: ir.Filter, mode: str, r: Restriction | None) -> Any:
        df = self.full(node.input, mode, r)  # same columns: push as is
        for p in node.predicates:
            df = df.where(_sql(p))
        return df

    def _full_map(self, node: ir.Map, mode: str, r: Restriction | None) -> Any:
        pushed = None
        if r is not None:
            subst = dict(zip(node.columns, node.exprs, strict=True))
            exprs = tuple(_substitute(e, subst) for e in r.exprs)
            if all(_deterministic(e) for e in exprs):
                pushed = Restriction(exprs, r.keys, r.values)
        df = self.full(node.input, mode, pushed)
        df = _project(df, node.exprs, node.columns)
        return df if pushed is not None or r is None else self._top(df, r)

    def _full_join(self, node: ir.Join, mode: str, r: Restriction | None) -> Any:
        owner = {c: i for i, p in enumerate(node.parts) for c in p.columns}
        per_part: dict[int, Restriction] = {}
        top = r
        if r is not None:
            used = {c.name for e in r.exprs for c in e.find_all(exp.Column)}
            parts = {owner[c] for c in used if c in owner}
            if len(parts) == 1:
                (i,) = parts
                per_part[i] = r
                top = None
                plain = _plain(r.exprs[0]) if len(r.exprs) == 1 else None
                for y, cy in _equivalent(node, (i, plain or "")):
                    if y not in per_part:
                        per_part[y] = Restriction((ir.col(cy),), r.keys, r.values)
        dfs = [self.full(p, mode, per_part.get(i)) for i, p in enumerate(node.parts)]
        return self._top(self._join(dfs, node.predicates), top)

    def _join(self, dfs: list[Any], predicates: Sequence[exp.Expr]) -> Any:
        df = dfs[0]
        for other in dfs[1:]:
            df = df.crossJoin(other)
        for p in predicates:
            df = df.where(_sql(p))  # Spark turns cross join + equality into a hash join
        return df

    def _full_outerjoin(self, node: ir.OuterJoin, mode: str, r: Restriction | None) -> Any:
        left_r = right_r = None
        top = r
        if r is not None and node.kind == "left":
            used = {c.name for e in r.exprs for c in e.find_all(exp.Column)}
            if used <= set(node.left.columns):
                left_r, top = r, None
                plain = _plain(r.exprs[0]) if len(r.exprs) == 1 else None
                for lk, rk in node.keys:
                    if lk == plain:
                        right_r = Restriction((ir.col(rk),), r.keys, r.values)
        return self._top(self._outer(node, self.full(node.left, mode, left_r),
                                     self.full(node.right, mode, right_r)), top)

    def _outer(self, node: ir.OuterJoin, left: Any, right: Any) -> Any:
        from pyspark.sql import functions as F

        how = "left" if node.kind == "left" else "full"
        return left.join(right, F.expr(_sql(node.on)), how).select(
            *[F.col(f"`{c}`") for c in node.columns])

    def _full_reduce(self, node: ir.Reduce, mode: str, r: Restriction | None) -> Any:
        nkeys = len(node.keys)
        pushed = None
        if r is not None:
            used = {c.name for e in r.exprs for c in e.find_all(exp.Column)}
            if used <= set(node.columns[:nkeys]):
                subst = dict(zip(node.columns[:nkeys], node.keys, strict=True))
                pushed = Restriction(tuple(_substitute(e, subst) for e in r.exprs), r.keys,
                                     r.values)
        df = self._reduce(node, self.full(node.input, mode, pushed))
        return df if pushed is not None or r is None else self._top(df, r)

    def _reduce(self, node: ir.Reduce, df: Any) -> Any:
        from pyspark.sql import functions as F

        nkeys = len(node.keys)
        keys = [F.expr(_sql(k)).alias(n) for k, n in zip(node.keys, node.columns, strict=False)]
        aggs = [F.expr(_sql(a)).alias(n) for a, n in zip(node.aggs, node.columns[nkeys:],
                                                         strict=True)]
        if not aggs:
            return df.select(*keys).distinct()
        return df.groupBy(*keys).agg(*aggs) if keys else df.agg(*aggs)

    def _full_topk(self, node: ir.TopK, mode: str, r: Restriction | None) -> Any:
        pushed = None
        if r is not None and node.group:
            used = {c.name for e in r.exprs for c in e.find_all(exp.Column)}
            if used <= set(node.group):
                pushed = r
        df = _topk(node, self.full(node.input, mode, pushed))
        return df if pushed is not None or r is None else self._top(df, r)

    def _full_window(self, node: ir.Window, mode: str, r: Restriction | None) -> Any:
        pushed = None
        if r is not None:
            used = {c.name for e in r.exprs for c in e.find_all(exp.Column)}
            if used <= set(node.partition):
                pushed = r
        df = self.full(node.input, mode, pushed)
        df = df.selectExpr("*", *[f"{_sql(e)} AS `{n}`" for e, n in zip(
            node.exprs, node.columns[len(node.input.columns):], strict=True)])
        return df if pushed is not None or r is None else self._top(df, r)

    def _full_union(self, node: ir.Union, mode: str, r: Restriction | None) -> Any:
        out = None
        for part in node.parts:
            pr = None
            if r is not None:
                subst = {c: ir.col(p) for c, p in zip(node.columns, part.columns, strict=True)}
                pr = Restriction(tuple(_substitute(e, subst) for e in r.exprs), r.keys,
                                 r.values)
            df = self.full(part, mode, pr).toDF(*node.columns)
            out = df if out is None else out.unionAll(df)
        return out

    def _full_setop(self, node: ir.SetOp, mode: str, r: Restriction | None) -> Any:
        sides = []
        for part in (node.left, node.right):
            pr = None
            if r is not None:
                subst = {c: ir.col(p) for c, p in zip(node.columns, part.columns, strict=True)}
                pr = Restriction(tuple(_substitute(e, subst) for e in r.exprs), r.keys,
                                 r.values)
            sides.append(self.full(part, mode, pr).toDF(*node.columns))
        left, right = sides
        if node.kind == "except":
            return left.exceptAll(right) if node.all else left.subtract(right)
        return left.intersectAll(right) if node.all else left.intersect(right)

    def _full_opaque(self, node: ir.Opaque, mode: str, r: Restriction | None) -> Any:
        from mzflow.render.spark import to_spark_sql

        views = {}
        for get in node.reads:
            name = f"mz_{mode}_{get.ref}"
            self.full(get, mode).toDF(*get.stored).createOrReplaceTempView(name)
            views[get.ref] = name
        df = self.spark.sql(to_spark_sql(node.query, views)).toDF(*node.columns)
        return self._top(df, r)

    # -- changes -----------------------------------------------------------------------

    def _changes(self, node: Node) -> Any:
        """``delta`` of an input its parent only asks for when that input changed."""
        d = self.delta(node)
        assert d is not None
        return d

    def delta(self, node: Node) -> Any | None:
        """Changes between the two times (None: statically none)."""
        if not self.changed(node):
            return None
        if id(node) not in self._deltas:
            method = getattr(self, f"_delta_{type(node).__name__.lower()}", None)
            self._deltas[id(node)] = (method(node) if method is not None
                                      else self._recompute_diff(node))
        return self._deltas[id(node)]

    def _recompute_diff(self, node: Node, r: Restriction | None = None) -> Any:
        from pyspark.sql import functions as F

        new = self.full(node, NEW, r).withColumn(DIFF, F.lit(1).cast("bigint"))
        old = self.full(node, OLD, r).withColumn(DIFF, F.lit(-1).cast("bigint"))
        return new.unionAll(old)

    def _keyed(self, node: Node, key_exprs: tuple[exp.Expr, ...], keys: Any) -> Any:
        """Recompute the output rows whose key is among ``keys`` at both times."""
        return self._recompute_diff(node, self.restriction(key_exprs, keys))

    def restriction(self, exprs: tuple[exp.Expr, ...], keys: Any) -> Restriction:
        keys = keys.toDF(*[f"k{i}" for i in range(len(exprs))]).distinct()
        rows = keys.limit(COLLECT_LIMIT + 1).collect()
        if len(rows) > COLLECT_LIMIT:
            return Restriction(exprs, keys, None)
        values = [tuple(row) for row in rows]
        local = self.spark.createDataFrame(values, keys.schema) if values else keys.limit(0)
        return Restriction(exprs, local, values)

    def _delta_get(self, node: ir.Get) -> Any:
        from pyspark.sql import functions as F

        inp = self.inputs[node.ref]
        assert inp.changes is not None
        changes, rows = inp.changes()
        self.rows_read += rows
        # (a Spark Connect DataFrame answers every attribute, so test the type)
        df = (from_arrow(changes) if isinstance(changes, pa.Table)
              else changes)
        return df.select(*[F.col(f"`{s}`").alias(n) for s, n in zip(
            node.stored, node.columns, strict=True)], F.col(DIFF).cast("bigint").alias(DIFF))

    def _delta_filter(self, node: ir.Filter) -> Any:
        df = self._changes(node.input)
        for p in node.predicates:
            df = df.where(_sql(p))
        return df

    def _delta_map(self, node: ir.Map) -> Any:
        df = self.delta(node.input)
        return _project(df, node.exprs + (ir.col(DIFF),), node.columns + (DIFF,))

    def _delta_union(self, node: ir.Union) -> Any:
        out = None
        for part in node.parts:
            d = self.delta(part)
            if d is None:
                continue
            d = d.toDF(*node.columns, DIFF)
            out = d if out is None else out.unionAll(d)
        return out

    def _delta_join(self, node: ir.Join) -> Any:
        """d(A ⋈ B ⋈ …) = Σᵢ new(<i) ⋈ dᵢ ⋈ old(>i), each other input restricted to the
        join keys that the change rows carry."""
        from pyspark.sql import functions as F

        out = None
        for i, part in enumerate(node.parts):
            d = self.delta(part)
            if d is None:
                continue
            dfs: list[Any] = []
            for j, other in enumerate(node.parts):
                if j == i:
                    dfs.append(d)
                    continue
                mode = NEW if j < i else OLD
                # Any column of part j equal (transitively) to a column of part i can
                # only join rows whose value the change rows carry.
                r = None
                for cx in part.columns:
                    match = [cy for y, cy in _equivalent(node, (i, cx)) if y == j]
                    if match:
                        r = self.restriction((ir.col(match[0]),), d.select(F.col(f"`{cx}`")))
                        break
                dfs.append(self.full(other, mode, r))
            term = self._join(dfs, node.predicates).select(
                *[F.col(f"`{c}`") for c in node.columns + (DIFF,)])
            out = term if out is None else out.unionAll(term)
        return out

    def _delta_reduce(self, node: ir.Reduce) -> Any:
        from pyspark.sql import functions as F

        if not node.keys:
            return self._recompute_diff(node)
        d = self._changes(node.input)
        keys = d.select(*[F.expr(_sql(k)) for k in node.keys])
        return self._keyed(node, tuple(ir.col(c) for c in node.columns[:len(node.keys)]), keys)

    def _delta_topk(self, node: ir.TopK) -> Any:
        return self._per_partition(node, node.input, node.group)

    def _delta_window(self, node: ir.Window) -> Any:
        return self._per_partition(node, node.input, node.partition)

    def _per_partition(self, node: Node, input: Node, partition: tuple[str, ...]) -> Any:
        """Recompute the partitions the changes touch (all of it without a partition)."""
        if not partition:
            return self._recompute_diff(node)
        d = self._changes(input)
        return self._keyed(node, tuple(ir.col(g) for g in partition),
                           d.select(*[f"`{g}`" for g in partition]))

    def _delta_setop(self, node: ir.SetOp) -> Any:
        keys = None
        for part in (node.left, node.right):
            d = self.delta(part)
            if d is not None:
                d = d.drop(DIFF).toDF(*node.columns)
                keys = d if keys is None else keys.unionAll(d)
        return self._keyed(node, tuple(ir.col(c) for c in node.columns), keys)

    def _delta_outerjoin(self, node: ir.OuterJoin) -> Any:
        from pyspark.sql import functions as F

        if not node.keys:
            return self._recompute_diff(node)
        lks = [lk for lk, _ in node.keys]
        rks = [rk for _, rk in node.keys]
        keys = None
        for part, cols in ((node.left, lks), (node.right, rks)):
            d = self.delta(part)
            if d is not None:
                d = d.select(*[f"`{c}`" for c in cols]).toDF(*lks)
                keys = d if keys is None else keys.unionAll(d)
        r = self.restriction(tuple(ir.col(c) for c in lks), keys)
        rr = Restriction(tuple(ir.col(c) for c in rks), r.keys, r.values)
        out = None
        for mode, sign in ((NEW, 1), (OLD, -1)):
            df = self._outer(node, self.full(node.left, mode, r),
                             self.full(node.right, mode, rr)).withColumn(
                DIFF, F.lit(sign).cast("bigint"))
            out = df if out is None else out.unionAll(df)
        return out


def _equivalent(node: ir.Join, start: tuple[int, str]) -> list[tuple[int, str]]:
    """The (input, column) pairs that the join's equalities make equal to ``start``,
    transitively, in other inputs."""
    seen = {start}
    frontier = [start]
    while frontier:
        at = frontier.pop()
        for a, b in node.equalities:
            for x, y in ((a, b), (b, a)):
                if x == at and y not in seen:
                    seen.add(y)
                    frontier.append(y)
    return sorted(p for p in seen if p[0] != start[0])


def _topk(node: ir.TopK, df: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.expr(_sql(o.this)) for o in node.order]
    order = [_sort(c, o) for c, o in zip(order, node.order, strict=True)] or [F.lit(1)]
    if node.group or node.offset:
        w = Window.partitionBy(*[F.col(f"`{g}`") for g in node.group]).orderBy(*order)
        ranked = df.withColumn("_mz_rn", F.row_number().over(w))
        cond = F.col("_mz_rn") > node.offset
        if node.limit is not None:
            cond = cond & (F.col("_mz_rn") <= node.offset + node.limit)
        return ranked.where(cond).drop("_mz_rn")
    out = df.orderBy(*order)
    return out.limit(node.limit) if node.limit is not None else out


def _project(df: Any, exprs: Sequence[exp.Expr], names: Sequence[str]) -> Any:
    return df.selectExpr(*[f"{_sql(e)} AS `{n}`" for e, n in zip(exprs, names, strict=True)])


def _sort(c: Any, o: exp.Ordered) -> Any:
    desc = bool(o.args.get("desc"))
    nulls_first = o.args.get("nulls_first")
    if nulls_first is None:
        nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
    if desc:
        return c.desc_nulls_first() if nulls_first else c.desc_nulls_last()
    return c.asc_nulls_first() if nulls_first else c.asc_nulls_last()


def _sql(e: exp.Expr) -> str:
    fixed = pg_semantics(e.copy())
    return fixed.sql(dialect="spark")


def _plain(e: exp.Expr) -> str | None:
    return e.name if isinstance(e, exp.Column) and not e.table else None


def _substitute(e: exp.Expr, subst: Mapping[str, exp.Expr]) -> exp.Expr:
    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and not n.table and n.name in subst:
            return subst[n.name].copy()
        return n
    return e.copy().transform(fix)


def _deterministic(e: exp.Expr) -> bool:
    return not any(isinstance(n, exp.AggFunc | exp.Window) for n in e.walk())


def _prune(files: list[str], actions: Any, column: str, values: list[Any]) -> list[str]:
    """Keep the files whose [min, max] of ``column`` may hold one of ``values``."""
    if actions is None or any(v is None for v in values):
        return files
    names = actions.column_names
    lo_name, hi_name = f"min.{column}", f"max.{column}"
    if lo_name not in names or hi_name not in names:
        return files
    try:
        ordered = sorted(values)
    except TypeError:
        return files
    stats = {}
    for path, lo, hi in zip(actions.column("path").to_pylist(),
                            actions.column(lo_name).to_pylist(),
                            actions.column(hi_name).to_pylist(), strict=True):
        stats[path.rsplit("/", 1)[-1]] = (lo, hi)
    kept = []
    for uri in files:
        lo_hi = stats.get(uri.rsplit("/", 1)[-1])
        if lo_hi is None or lo_hi[0] is None or lo_hi[1] is None:
            kept.append(uri)
            continue
        lo, hi = lo_hi
        try:
            i = bisect.bisect_left(ordered, lo)
        except TypeError:
            kept.append(uri)
            continue
        if i < len(ordered) and ordered[i] <= hi:
            kept.append(uri)
    return kept
