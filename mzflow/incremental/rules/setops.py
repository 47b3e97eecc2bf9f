"""EXCEPT and INTERSECT [ALL]: the affected rows recomputed at both times.

A row's output multiplicity depends only on that row's multiplicities in the two
inputs, so the rows any change carries are the keys recomputed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import DIFF
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.incremental.rules.union import renamed
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class SetOp(Rule):
    node = ir.SetOp

    def strategy(self, node: ir.SetOp, ctx: Context) -> Strategy:
        return incremental("affected rows recomputed")

    def describe(self, node: ir.SetOp) -> str:
        return f"{node.kind.capitalize()}{' All' if node.all else ''}"

    def full(self, flow: Dataflow, node: ir.SetOp, side: Side, r: Restriction | None) -> DataFrame:
        left, right = (flow.full(part, side, renamed(r, node, part)).toDF(*node.columns)
                       for part in (node.left, node.right))
        if node.kind == "except":
            return left.exceptAll(right) if node.all else left.subtract(right)
        return left.intersectAll(right) if node.all else left.intersect(right)

    def delta(self, flow: Dataflow, node: ir.SetOp) -> DataFrame:
        keys = None
        for part in (node.left, node.right):
            d = flow.delta(part)
            if d is not None:
                d = d.drop(DIFF).toDF(*node.columns)
                keys = d if keys is None else keys.unionAll(d)
        assert keys is not None  # asked only when a side changed
        return flow.keyed(node, tuple(ir.col(c) for c in node.columns), keys)


RULE = SetOp()
