"""UNION ALL: linear, so its changes are the union of its changed inputs' changes.

Inputs line up by position; a key restriction is renamed into each input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import DIFF, substitute
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


def renamed(r: Restriction | None, node: ir.Node, part: ir.Node) -> Restriction | None:
    """A restriction over ``node``'s columns moved to ``part``, whose columns line up with
    them by position."""
    if r is None:
        return None
    subst = {c: ir.col(p) for c, p in zip(node.columns, part.columns, strict=True)}
    return r.over(tuple(substitute(e, subst) for e in r.exprs))


class Union(Rule):
    node = ir.Union

    def strategy(self, node: ir.Union, ctx: Context) -> Strategy:
        return incremental("row by row")

    def describe(self, node: ir.Union) -> str:
        return "Union"

    def full(self, flow: Dataflow, node: ir.Union, side: Side, r: Restriction | None
             ) -> DataFrame:
        out = None
        for part in node.parts:
            df = flow.full(part, side, renamed(r, node, part)).toDF(*node.columns)
            out = df if out is None else out.unionAll(df)
        assert out is not None  # a union has parts
        return out

    def delta(self, flow: Dataflow, node: ir.Union) -> DataFrame:
        out = None
        for part in node.parts:
            d = flow.delta(part)
            if d is None:
                continue
            d = d.toDF(*node.columns, DIFF)
            out = d if out is None else out.unionAll(d)
        assert out is not None  # asked only when a part changed
        return out


RULE = Union()
