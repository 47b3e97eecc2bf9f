"""Reduce (GROUP BY and DISTINCT): affected groups, or partials kept in a state.

Without kept state, a group's output depends only on its input rows, so the
groups that the input's changes touch are recomputed at both times (their keys
restrict the input, down to file pruning at the base tables). A GROUP BY without
keys is one group: recomputed whole (R004), unless it keeps state.

At the top of a plan (under Map/Filter/at most one TopK), a GROUP BY whose
aggregates all accumulate keeps their partials in a state shard and merges each
batch into them: ``reduce_state.py`` holds that part of the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from sqlglot import exp

from mzflow.engine.frames import columns_of, sql, substitute
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental, recompute
from mzflow.plan import ir
from mzflow.reasons import R_GLOBAL_AGG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction
    from mzflow.incremental.local.flow import Keys

ACCUMULABLE = (exp.Count, exp.Sum, exp.Avg)
# MIN and MAX merge into the state too while the batch only inserts (monotonic input);
# a batch that retracts rows recomputes them for its affected groups.
MONOTONE = (exp.Min, exp.Max)


def accumulable(agg: exp.Expr) -> bool:
    if not isinstance(agg, ACCUMULABLE + MONOTONE):
        return False
    return not isinstance(agg.this, exp.Distinct)


class Reduce(Rule):
    node = ir.Reduce

    def strategy(self, node: ir.Reduce, ctx: Context) -> Strategy:
        if node is ctx.state_reduce:
            if any(isinstance(a, MONOTONE) for a in node.aggs):
                return incremental("accumulable: changes merged into the state by key; "
                                   "MIN/MAX merged for append-only batches, else their "
                                   "affected groups recomputed")
            return incremental("accumulable: changes merged into the state by key")
        if node.keys:
            return incremental("affected groups recomputed")
        return recompute(R_GLOBAL_AGG)

    def describe(self, node: ir.Reduce) -> str:
        keys = ", ".join(ir.sql(k) for k in node.keys)
        aggs = ", ".join(ir.sql(a) for a in node.aggs)
        return (f"Reduce group_by=[{keys}] aggregates=[{aggs}]" if aggs
                else f"Distinct [{keys}]")

    def full(self, flow: Dataflow, node: ir.Reduce, side: Side, r: Restriction | None) -> DataFrame:
        pushed = through(node, r)
        df = aggregate(node, flow.full(node.input, side, pushed))
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Reduce) -> DataFrame:
        from pyspark.sql import functions as F

        if not node.keys:
            return flow.recompute_diff(node)
        d = flow.changes(node.input)
        keys = d.select(*[F.expr(sql(k)) for k in node.keys])
        return flow.keyed(node, tuple(ir.col(c) for c in node.columns[:len(node.keys)]), keys)


R = TypeVar("R", bound="Restriction | Keys")


def through(node: ir.Reduce, r: R | None) -> R | None:
    """A restriction on the group keys as one on the input (either engine's kind): the
    key expressions substituted for the key columns (None: it reads an aggregate)."""
    nkeys = len(node.keys)
    if r is None or not columns_of(r.exprs) <= set(node.columns[:nkeys]):
        return None
    subst = dict(zip(node.columns[:nkeys], node.keys, strict=True))
    return r.over(tuple(substitute(e, subst) for e in r.exprs))  # type: ignore[return-value]


def aggregate(node: ir.Reduce, df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    nkeys = len(node.keys)
    keys = [F.expr(sql(k)).alias(n) for k, n in zip(node.keys, node.columns, strict=False)]
    aggs = [F.expr(sql(a)).alias(n) for a, n in zip(node.aggs, node.columns[nkeys:],
                                                   strict=True)]
    if not aggs:
        return df.select(*keys).distinct()
    return df.groupBy(*keys).agg(*aggs) if keys else df.agg(*aggs)


RULE = Reduce()
