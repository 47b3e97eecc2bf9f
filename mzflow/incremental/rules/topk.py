"""TopK: ORDER BY … LIMIT/OFFSET, globally or per group.

A group's top rows depend only on that group's input rows, so a per-group top-k
recomputes the groups its input's changes touch, at both times. Above a kept
GROUP BY state (``reduce_state``) a global top-k re-ranks the groups a tick
changed against the candidates kept with the state (``topk_state``), and ranks
every group's partials only when too few candidates are left. Otherwise a
global top-k is recomputed whole (R005).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import columns_of, sort_key, sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental, recompute
from mzflow.plan import ir
from mzflow.reasons import R_GLOBAL_TOPK

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class TopK(Rule):
    node = ir.TopK

    def strategy(self, node: ir.TopK, ctx: Context) -> Strategy:
        if node.group:
            return incremental("affected groups recomputed")
        if node in ctx.chain:
            return incremental("top-k over the maintained groups")
        return recompute(R_GLOBAL_TOPK)

    def describe(self, node: ir.TopK) -> str:
        order = ", ".join(ir.sql(o) for o in node.order)
        group = f" group_by=[{', '.join(node.group)}]" if node.group else ""
        offset = f" offset={node.offset}" if node.offset else ""
        return f"TopK{group} order_by=[{order}] limit={node.limit}{offset}"

    def full(self, flow: Dataflow, node: ir.TopK, side: Side, r: Restriction | None) -> DataFrame:
        pushed = r if r is not None and node.group and columns_of(r.exprs) <= set(
            node.group) else None
        df = self.apply(node, flow.full(node.input, side, pushed))
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.TopK) -> DataFrame:
        return per_partition(flow, node, node.input, node.group)

    def apply(self, node: ir.TopK, df: DataFrame) -> DataFrame:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        order = [sort_key(F.expr(sql(o.this)), o) for o in node.order] or [F.lit(1)]
        if node.group or node.offset:
            w = Window.partitionBy(*[F.col(f"`{g}`") for g in node.group]).orderBy(*order)
            ranked = df.withColumn("_mz_rn", F.row_number().over(w))
            cond = F.col("_mz_rn") > node.offset
            if node.limit is not None:
                cond = cond & (F.col("_mz_rn") <= node.offset + node.limit)
            return ranked.where(cond).drop("_mz_rn")
        out = df.orderBy(*order)
        return out.limit(node.limit) if node.limit is not None else out


def per_partition(flow: Dataflow, node: ir.Node, input: ir.Node, partition: tuple[str, ...]
                  ) -> DataFrame:
    """Recompute the partitions the input's changes touch (all of it without a
    partition): shared by top-k per group and windows."""
    if not partition:
        return flow.recompute_diff(node)
    d = flow.changes(input)
    return flow.keyed(node, tuple(ir.col(g) for g in partition),
                      d.select(*[f"`{g}`" for g in partition]))


RULE = TopK()
