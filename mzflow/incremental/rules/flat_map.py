"""FlatMap: a set-returning function (``generate_series``) per input row.

Linear, like Map: each input row yields its elements whatever the other rows hold,
so the changes are the input's change rows each expanded to its series, with the
row's diff (an inserted row adds its elements, a deleted one retracts them). A
FlatMap without input has constant arguments: a constant relation, which never
changes (no change feed reaches it, so a tick never asks for its changes). A key
restriction on input columns passes to the input; on the series' columns it is
applied to the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.engine.frames import DIFF, columns_of, quoted, sql
from mzflow.engine.spark.series import generator_sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class FlatMap(Rule):
    node = ir.FlatMap

    def strategy(self, node: ir.FlatMap, ctx: Context) -> Strategy:
        if node.input is None:
            return incremental("constant arguments: a constant relation, never changes")
        return incremental("row by row: each change row expanded to its series")

    def describe(self, node: ir.FlatMap) -> str:
        calls = ", ".join(ir.sql(c) for c in node.calls)
        if len(node.calls) > 1:
            calls = f"ROWS FROM ({calls})"
        return f"FlatMap {calls} AS ({', '.join(outputs(node))})"

    def full(self, flow: Dataflow, node: ir.FlatMap, side: Side, r: Restriction | None
             ) -> DataFrame:
        if node.input is None:
            return flow.restrict(expand(flow.spark.range(1), node, ()), r)
        pushed = r if r is not None and columns_of(r.exprs) <= set(node.input.columns) else None
        df = expand(flow.full(node.input, side, pushed), node, node.input.columns)
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.FlatMap) -> DataFrame:
        assert node.input is not None  # a constant has no changes: never asked
        return expand(flow.changes(node.input), node, node.input.columns, (DIFF,))

    def apply(self, node: ir.FlatMap, df: DataFrame) -> DataFrame:
        return expand(df, node, node.input.columns if node.input is not None else ())


def outputs(node: ir.FlatMap) -> tuple[str, ...]:
    return node.columns[len(node.columns) - len(node.calls):]


def expand(df: DataFrame, node: ir.FlatMap, kept: tuple[str, ...], after: tuple[str, ...] = ()
           ) -> DataFrame:
    """``df``'s ``kept`` columns, the series' columns, then the ``after`` columns."""
    names = ", ".join(quoted(c) for c in outputs(node))
    return df.selectExpr(*[quoted(c) for c in kept],
                         f"{generator_sql(list(node.calls), sql)} AS ({names})",
                         *[quoted(c) for c in after])


RULE = FlatMap()
