"""The Reduce rule's kept state: a top GROUP BY whose aggregates accumulate.

COUNT, SUM and AVG are sums over the input rows, so a batch's changes become
per-group partial sums (``Σ diff``, ``Σ x·diff``, ``Σ diff where x is not NULL``)
that add to the partials kept in the state shard. MIN and MAX merge the same way
while a batch only inserts; a batch that retracts recomputes them for its
affected groups (hierarchical MIN/MAX in the small). Only the groups a batch
touches are read from the state; the operators above the GROUP BY (HAVING, the
SELECT list, a top-k: the *chain*) then give the output's changes: the affected
groups' rows after, minus the same groups' rows before. A top-k over all groups
reads every group's partials (the state, not the input) and is diffed against the
index by the tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.incremental.rules.reduce import accumulable
from mzflow.plan import ir
from mzflow.render.diffs import key_column
from mzflow.render.frames import DIFF, sql
from mzflow.render.spark import average_sql, from_arrow
from mzflow.storage.delta import KEY, ROWS, StateShard

if TYPE_CHECKING:
    from mzflow.incremental.dataflow import Dataflow


def state_chain(root: ir.Node) -> tuple[tuple[ir.Node, ...], ir.Reduce] | None:
    """``root`` = Map/Filter/TopK operators over a Reduce whose aggregates accumulate."""
    chain: list[ir.Node] = []
    node = root
    while isinstance(node, ir.Map | ir.Filter | ir.TopK):
        chain.append(node)
        node = node.input
    if (isinstance(node, ir.Reduce) and node.aggs and all(accumulable(a) for a in node.aggs)
            and sum(isinstance(n, ir.TopK) for n in chain) <= 1):
        return tuple(chain), node
    return None


@dataclass
class StateResult:
    groups: Any  # Arrow: the affected groups' new partials (ROWS = 0: gone), with KEY
    output: Any  # DataFrame: output changes (with DIFF), or the full output if ``full``
    full: bool
    parts: tuple[Any, ...] = ()  # ``output`` as the frames it is the union of, if any


class KeptState:
    """The state shard as one tick sees it: the partials as of the tick's start (none
    for a rebuild, which recomputes every group), then one idempotent commit."""

    def __init__(self, shard: StateShard, since: int, rebuild: bool):
        self.shard = shard
        self.version = (shard.version_at(since) if shard.exists() and not rebuild
                        else None)
        self.files = shard.files(self.version) if self.version is not None else None
        self.rebuild = rebuild

    def rows(self, keys: pa.Array) -> pa.Table | None:
        return (self.shard.rows_with_keys(self.version, keys)
                if self.version is not None else None)

    def commit(self, node: ir.Reduce, result: StateResult, at: int, app_id: str) -> None:
        """Merge the tick's groups (or replace every group on a rebuild), before the
        index commit; a retried tick finds its time applied and skips the write."""
        if self.shard.exists() and (self.shard.applied(app_id) or -1) >= at:
            return
        if self.rebuild:
            groups = result.groups
            if node.keys:
                groups = groups.filter(pc.not_equal(groups.column(ROWS), 0))
            self.shard.replace_groups(groups, at, app_id)
        elif result.groups.num_rows:
            self.shard.merge_groups(result.groups, at, app_id, keep_empty=not node.keys)


def _parts(node: ir.Reduce) -> list[tuple[str, exp.Expr | None, str]]:
    """(state column, argument, role) for each aggregate's partials."""
    out: list[tuple[str, exp.Expr | None, str]] = []
    for i, agg in enumerate(node.aggs):
        arg = agg.this if not isinstance(agg.this, exp.Star) else None
        if isinstance(agg, exp.Count):
            if arg is not None:
                out.append((f"_n{i}", arg, "n"))
        elif isinstance(agg, exp.Min | exp.Max):
            out.append((f"_m{i}", arg, "min" if isinstance(agg, exp.Min) else "max"))
        else:
            out.append((f"_s{i}", arg, "s"))
            out.append((f"_n{i}", arg, "n"))
    return out


def run(flow: Dataflow, chain: Sequence[ir.Node], node: ir.Reduce, state: KeptState
        ) -> StateResult | None:
    """None when no input changed (nothing to merge, no output change).

    One Spark job sums the batch per group; the affected groups' partials are then
    looked up and merged in Arrow (they are few), so the output's changes are
    computed from local data and the state is never scanned, unless a top-k needs
    every group."""
    from pyspark.sql import functions as F

    spark = flow.spark
    nkeys = len(node.keys)
    keys = list(node.columns[:nkeys])
    parts = _parts(node)
    d = flow.delta(node.input)
    if d is None:
        return None
    sums = [F.sum(F.col(DIFF)).alias(ROWS), F.min(F.col(DIFF)).alias(_LEAST_DIFF)]
    for name, arg, role in parts:
        assert arg is not None
        if role in ("min", "max"):
            sums.append((F.min if role == "min" else F.max)(F.expr(sql(arg))).alias(name))
        elif role == "s":
            sums.append(F.sum(F.expr(f"({sql(arg)}) * `{DIFF}`")).alias(name))
        else:
            sums.append(F.sum(F.when(F.expr(sql(arg)).isNotNull(), F.col(DIFF))
                              .otherwise(F.lit(0))).alias(name))
    key_cols = [F.expr(sql(k)).alias(n) for k, n in zip(node.keys, keys, strict=True)]
    batch_df = d.groupBy(*key_cols).agg(*sums) if keys else d.agg(*sums)
    batch_df = batch_df.withColumn(KEY, key_column(batch_df, keys) if keys else F.lit("global"))
    batch = batch_df.toArrow()
    if keys:
        batch = batch.filter(pc.is_valid(batch.column(ROWS)))
    if batch.num_rows == 0:
        return None
    retracts = (pc.min(batch.column(_LEAST_DIFF)).as_py() or 0) < 0
    batch = batch.drop_columns([_LEAST_DIFF])
    extremes = [p for p in parts if p[2] in ("min", "max")]
    if extremes and retracts:
        batch = _recompute_extremes(flow, node, batch, keys, extremes)
    partials = [ROWS] + [p[0] for p in parts]
    old = state.rows(batch.column(KEY))
    if old is None:
        old = batch.schema.empty_table()
    old = old.select(keys + partials + [KEY]).cast(batch.schema)
    joined = batch.join(old.select([KEY] + partials), keys=KEY, join_type="left outer",
                        right_suffix="_old", use_threads=False)
    merged = joined.select(keys + [KEY])
    roles = {p[0]: p[2] for p in parts}
    for c in partials:
        kind = batch.schema.field(c).type
        if roles.get(c) in ("min", "max"):
            merged = merged.append_column(c, _extreme(joined, c, roles[c], retracts))
            continue
        # Arrow widens decimal sums by one digit of precision, past decimal128's 38.
        wide = pa.decimal256(75, kind.scale) if pa.types.is_decimal(kind) else kind
        a = pc.coalesce(joined.column(c), pa.scalar(0, kind)).cast(wide)
        b = pc.coalesce(joined.column(f"{c}_old"), pa.scalar(0, kind)).cast(wide)
        merged = merged.append_column(c, pc.add_checked(a, b).cast(kind))
    groups = merged.select(keys + partials + [KEY])
    new = from_arrow(groups)
    live = new if not keys else new.where(F.col(ROWS) != 0)
    before_df = from_arrow(old) if old.num_rows else new.limit(0)
    if any(isinstance(n, ir.TopK) for n in chain):
        if state.files:
            rest = spark.read.parquet(*state.files).select(
                *[F.col(f"`{c}`") for c in keys + partials + [KEY]])
            rest = rest.join(new.select(KEY), KEY, "left_anti")
            everything = rest.unionByName(live)
        else:
            everything = live
        return StateResult(groups, _above(chain, _finalize(node, everything)), full=True)
    after = _above(chain, _finalize(node, live)).withColumn(DIFF, F.lit(1).cast("bigint"))
    before = _above(chain, _finalize(node, before_df)).withColumn(
        DIFF, F.lit(-1).cast("bigint"))
    return StateResult(groups, after.unionAll(before), full=False, parts=(after, before))


_LEAST_DIFF = "_mz_least_diff"


def _extreme(joined: pa.Table, c: str, role: str, recomputed: bool) -> pa.Array:
    """A group's new MIN/MAX: the batch's (recomputed over the group's rows) when the
    batch retracted rows, else the extreme of the kept value and the batch's."""
    batch = joined.column(c)
    if recomputed:
        return batch.combine_chunks() if isinstance(batch, pa.ChunkedArray) else batch
    both = (pc.min_element_wise if role == "min" else pc.max_element_wise)(
        batch, joined.column(f"{c}_old"), skip_nulls=True)
    return both.cast(batch.type)


def _recompute_extremes(flow: Dataflow, node: ir.Reduce, batch: pa.Table, keys: list[str],
                        extremes: list[tuple[str, exp.Expr | None, str]]) -> pa.Table:
    """MIN/MAX after a retraction: read the affected groups' rows at the new time (the
    restriction prunes files by key) and take the extremes afresh."""
    from pyspark.sql import functions as F

    from mzflow.incremental.dataflow import NEW

    r = None
    if keys:
        wanted = from_arrow(batch.select(keys))
        r = flow.restriction(tuple(node.keys), wanted)
    rows = flow.full(node.input, NEW, r)
    aggs = [(F.min if role == "min" else F.max)(F.expr(sql(arg))).alias(name)
            for name, arg, role in extremes if arg is not None]
    key_cols = [F.expr(sql(k)).alias(n) for k, n in zip(node.keys, keys, strict=True)]
    fresh = rows.groupBy(*key_cols).agg(*aggs) if keys else rows.agg(*aggs)
    fresh = fresh.withColumn(KEY, key_column(fresh, keys) if keys else F.lit("global"))
    values = fresh.select(KEY, *[name for name, _, _ in extremes]).toArrow()
    names = [name for name, _, _ in extremes]
    out = batch.drop_columns(names).join(values, keys=KEY, join_type="left outer",
                                         use_threads=False)
    return out.select(batch.column_names).cast(batch.schema)


def _finalize(node: ir.Reduce, state: Any) -> Any:
    """Partials → the GROUP BY's output columns."""
    nkeys = len(node.keys)
    exprs = [f"`{k}`" for k in node.columns[:nkeys]]
    for i, agg in enumerate(node.aggs):
        if isinstance(agg, exp.Count):
            exprs.append(f"`{ROWS}`" if isinstance(agg.this, exp.Star) else f"`_n{i}`")
        elif isinstance(agg, exp.Min | exp.Max):
            exprs.append(f"`_m{i}`")
        elif isinstance(agg, exp.Sum):
            exprs.append(f"CASE WHEN `_n{i}` = 0 THEN NULL ELSE `_s{i}` END")
        else:  # AVG
            assert isinstance(agg, exp.Avg)
            exprs.append(f"CASE WHEN `_n{i}` = 0 THEN NULL ELSE "
                         f"{average_sql(f'_s{i}', f'_n{i}', agg)} END")
    return state.selectExpr(*[f"{e} AS `{n}`" for e, n in zip(exprs, node.columns,
                                                               strict=True)])


def _above(chain: Sequence[ir.Node], df: Any) -> Any:
    """The chain's operators (outermost first) applied to the groups' output."""
    from mzflow.incremental.rules import rule_for

    for op in reversed(chain):
        df = rule_for(op).apply(op, df)
    return df
