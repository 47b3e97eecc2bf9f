"""Window functions: the affected partitions recomputed at both times.

Every window function of the node partitions by a common set of columns
(``Window.partition``), so an output row depends only on its partition's input
rows. Without a common PARTITION BY column, the window is recomputed whole (R006).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import columns_of, sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental, recompute
from mzflow.incremental.rules.topk import per_partition
from mzflow.plan import ir
from mzflow.reasons import R_WINDOW

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class Window(Rule):
    node = ir.Window

    def strategy(self, node: ir.Window, ctx: Context) -> Strategy:
        return (incremental("affected partitions recomputed") if node.partition
                else recompute(R_WINDOW))

    def describe(self, node: ir.Window) -> str:
        return (f"Window partition_by=[{', '.join(node.partition)}] "
                f"({', '.join(ir.sql(e) for e in node.exprs)})")

    def full(self, flow: Dataflow, node: ir.Window, side: Side, r: Restriction | None) -> DataFrame:
        pushed = r if r is not None and columns_of(r.exprs) <= set(node.partition) else None
        df = flow.full(node.input, side, pushed)
        df = df.selectExpr("*", *[f"{sql(e)} AS `{n}`" for e, n in zip(
            node.exprs, node.columns[len(node.input.columns):], strict=True)])
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Window) -> DataFrame:
        return per_partition(flow, node, node.input, node.partition)


RULE = Window()
