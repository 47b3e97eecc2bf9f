"""Opaque: a subquery the IR does not model, recomputed whole and diffed.

Lowering leaves such a query as it was bound (over pin keys) with the reason it
could not be modelled; the rule evaluates it in Spark SQL over the tick's
versions of the tables it reads, at each time, and its changes are the new
contents minus the old.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, recompute
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction

_names = itertools.count()


class Opaque(Rule):
    node = ir.Opaque

    def strategy(self, node: ir.Opaque, ctx: Context) -> Strategy:
        return recompute(node.reason)

    def describe(self, node: ir.Opaque) -> str:
        return f"Opaque ({', '.join(node.columns)}) := {node.query.sql(dialect='postgres')}"

    def full(self, flow: Dataflow, node: ir.Opaque, side: Side, r: Restriction | None) -> DataFrame:
        from mzflow.engine.spark import to_spark_sql

        views = {}
        try:
            for get in node.reads:
                name = f"mz_{side}_{get.ref}_{next(_names)}"
                flow.full(get, side).toDF(*get.stored).createOrReplaceTempView(name)
                views[get.ref] = name
            df = flow.spark.sql(to_spark_sql(node.query, views)).toDF(*node.columns)
        finally:
            # spark.sql analyzes at once: the frame holds the views' plans, not their
            # names. A view left in the session keeps its plan (the files it read, any
            # local rows in it) alive, one per input version and time, for good.
            for name in views.values():
                flow.spark.catalog.dropTempView(name)
        return flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Opaque) -> DataFrame:
        return flow.recompute_diff(node)


RULE = Opaque()
