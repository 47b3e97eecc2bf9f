"""LEFT and FULL equi-joins: the affected join keys recomputed at both times.

An outer join's output for a join key depends only on both sides' rows with that
key (matched or NULL-extended), so the keys any change carries are recomputed
(both sides restricted to them) at the old and the new time. Without an equality
between the sides there is no such key: recompute (R007).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import DIFF, columns_of, plain, sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental, recompute
from mzflow.plan import ir
from mzflow.reasons import R_OUTER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class OuterJoin(Rule):
    node = ir.OuterJoin

    def strategy(self, node: ir.OuterJoin, ctx: Context) -> Strategy:
        return (incremental("affected join keys recomputed") if node.keys
                else recompute(R_OUTER))

    def describe(self, node: ir.OuterJoin) -> str:
        return f"{node.kind.capitalize()}Join on=({ir.sql(node.on)})"

    def full(self, flow: Dataflow, node: ir.OuterJoin, side: Side, r: Restriction | None
             ) -> DataFrame:
        left_r = right_r = None
        top = r
        if r is not None and node.kind == "left" and columns_of(r.exprs) <= set(
                node.left.columns):
            left_r, top = r, None
            single = plain(r.exprs[0]) if len(r.exprs) == 1 else None
            for lk, rk in node.keys:
                if lk == single:
                    right_r = r.over((ir.col(rk),))
        return flow.restrict(outer(node, flow.full(node.left, side, left_r),
                                   flow.full(node.right, side, right_r)), top)

    def delta(self, flow: Dataflow, node: ir.OuterJoin) -> DataFrame:
        from pyspark.sql import functions as F

        if not node.keys:
            return flow.recompute_diff(node)
        lks = [lk for lk, _ in node.keys]
        rks = [rk for _, rk in node.keys]
        keys = None
        for part, cols in ((node.left, lks), (node.right, rks)):
            d = flow.delta(part)
            if d is not None:
                d = d.select(*[f"`{c}`" for c in cols]).toDF(*lks)
                keys = d if keys is None else keys.unionAll(d)
        assert keys is not None  # asked only when a side changed
        r = flow.restriction(tuple(ir.col(c) for c in lks), keys)
        rr = r.over(tuple(ir.col(c) for c in rks))
        out = None
        for side, sign in ((Side.NEW, 1), (Side.OLD, -1)):
            df = outer(node, flow.full(node.left, side, r),
                       flow.full(node.right, side, rr)).withColumn(
                DIFF, F.lit(sign).cast("bigint"))
            out = df if out is None else out.unionAll(df)
        assert out is not None
        return out


def outer(node: ir.OuterJoin, left: DataFrame, right: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    how = "left" if node.kind == "left" else "full"
    return left.join(right, F.expr(sql(node.on)), how).select(
        *[F.col(f"`{c}`") for c in node.columns])


RULE = OuterJoin()
