"""Filter and Map: linear operators, maintained row by row.

A change row passes a filter or is projected exactly as a row of the contents
would be, so their changes are their input's changes transformed. A key
restriction passes through a filter as is, and through a map by substituting the
map's expressions for its columns (when they are row-local).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from mzflow.engine.frames import DIFF, project, row_local, sql, substitute
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction
    from mzflow.incremental.local.flow import Keys


class Filter(Rule):
    node = ir.Filter

    def strategy(self, node: ir.Filter, ctx: Context) -> Strategy:
        return incremental("row by row")

    def describe(self, node: ir.Filter) -> str:
        return f"Filter {' AND '.join(ir.sql(p) for p in node.predicates)}"

    def full(self, flow: Dataflow, node: ir.Filter, side: Side, r: Restriction | None) -> DataFrame:
        return self.apply(node, flow.full(node.input, side, r))  # same columns: push as is

    def delta(self, flow: Dataflow, node: ir.Filter) -> DataFrame:
        return self.apply(node, flow.changes(node.input))

    def apply(self, node: ir.Filter, df: DataFrame) -> DataFrame:
        for p in node.predicates:
            df = df.where(sql(p))
        return df


class Map(Rule):
    node = ir.Map

    def strategy(self, node: ir.Map, ctx: Context) -> Strategy:
        return incremental("row by row")

    def describe(self, node: ir.Map) -> str:
        shown = [n if ir.sql(e) == f'"{n}"' else f"{n} := {ir.sql(e)}"
                 for n, e in zip(node.columns, node.exprs, strict=True)]
        return f"Map ({', '.join(shown)})"

    def full(self, flow: Dataflow, node: ir.Map, side: Side, r: Restriction | None) -> DataFrame:
        pushed = through(node, r)
        df = self.apply(node, flow.full(node.input, side, pushed))
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Map) -> DataFrame:
        return project(flow.changes(node.input), node.exprs + (ir.col(DIFF),),
                       node.columns + (DIFF,))

    def apply(self, node: ir.Map, df: DataFrame) -> DataFrame:
        return project(df, node.exprs, node.columns)


R = TypeVar("R", bound="Restriction | Keys")


def through(node: ir.Map, r: R | None) -> R | None:
    """A restriction on the map's output as one on its input (either engine's kind):
    the map's expressions substituted for its columns, when they are row-local."""
    if r is None:
        return None
    subst = dict(zip(node.columns, node.exprs, strict=True))
    exprs = tuple(substitute(e, subst) for e in r.exprs)
    return r.over(exprs) if all(row_local(e) for e in exprs) else None  # type: ignore[return-value]


FILTER, MAP = Filter(), Map()
