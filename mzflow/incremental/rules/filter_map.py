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
        # same columns: the restriction pushed as is
        return self._held(flow, node, flow.full(node.input, side, r))

    def delta(self, flow: Dataflow, node: ir.Filter) -> DataFrame:
        return self._held(flow, node, flow.changes(node.input))

    def apply(self, node: ir.Filter, df: DataFrame) -> DataFrame:
        for p in node.predicates:
            df = df.where(sql(p))
        return df

    def _held(self, flow: Dataflow, node: ir.Filter, df: DataFrame) -> DataFrame:
        """The filtered frame, with its rows when this process holds the input's and
        evaluates the predicates exactly (a join then takes keys from them)."""
        from mzflow.incremental.local.flow import filtered

        return flow.held_from(self.apply(node, df), df, lambda rows: filtered(node, rows))


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
        below = flow.full(node.input, side, pushed)
        df = _held_map(flow, node, below, self.apply(node, below), ())
        return df if pushed is not None else flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Map) -> DataFrame:
        changes = flow.changes(node.input)
        out = project(changes, node.exprs + (ir.col(DIFF),), node.columns + (DIFF,))
        return _held_map(flow, node, changes, out, (DIFF,))

    def apply(self, node: ir.Map, df: DataFrame) -> DataFrame:
        return project(df, node.exprs, node.columns)


def _held_map(flow: Dataflow, node: ir.Map, below: DataFrame, out: DataFrame,
              carry: tuple[str, ...]) -> DataFrame:
    """``out``, with its rows when this process holds ``below``'s (as Filter._held)."""
    from mzflow.incremental.local.flow import mapped

    return flow.held_from(out, below, lambda rows: mapped(node, rows, node.columns, carry))


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
