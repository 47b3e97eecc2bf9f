"""Get: a base table's version. Changes come from its Delta change feed.

Contents read the version's exact Parquet files; a key restriction on one
column prunes files by their Delta min/max statistics and, for short key lists,
reaches the Parquet reader as an IN list that skips row groups. This is what
keeps a join lookup or an affected-group recompute reading in proportion to the
batch.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mzflow.engine.frames import DIFF, plain, renamed
from mzflow.engine.spark import from_arrow
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


class Get(Rule):
    node = ir.Get

    def strategy(self, node: ir.Get, ctx: Context) -> Strategy:
        return incremental("changes from the Delta change feed")

    def describe(self, node: ir.Get) -> str:
        return f"Get {node.name}"

    def full(self, flow: Dataflow, node: ir.Get, side: Side, r: Restriction | None) -> DataFrame:
        from pyspark.sql import functions as F

        inp = flow.inputs[node.ref]
        stored_files = inp.files[side]
        if not stored_files:
            return empty(flow, node)
        files = list(stored_files)
        pruned_on = plain(r.exprs[0]) if r is not None else None
        if r is not None and r.values is not None and pruned_on is not None:
            stored = node.stored[node.columns.index(pruned_on)]
            looked_up = lookup(flow, node, side, stored, [v[0] for v in r.values])
            if looked_up is not None:
                return looked_up if len(r.exprs) == 1 else flow.restrict(looked_up, r)
            files = prune(files, inp.stats[side](), stored, [v[0] for v in r.values])
        flow.files_read += len(files)
        flow.rows_read += inp.num_rows[side](files) if files else 0
        if not files:
            return empty(flow, node)
        df = renamed(flow.spark.read.schema(inp.schema_ddl).parquet(*files), _pairs(node))
        if r is not None and r.values is not None and pruned_on is not None and len(
                r.values) <= flow.isin_limit and all(v[0] is not None for v in r.values):
            # A literal IN list reaches the Parquet reader, which skips row groups.
            df = df.where(F.col(f"`{pruned_on}`").isin([v[0] for v in r.values]))
        return flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Get) -> DataFrame:
        from pyspark.sql import functions as F

        inp = flow.inputs[node.ref]
        assert inp.changes is not None
        changes, rows = inp.changes()
        flow.rows_read += rows
        # (a Spark Connect DataFrame answers every attribute, so test the type)
        df = from_arrow(changes) if isinstance(changes, pa.Table) else changes
        pairs = [*_pairs(node), (DIFF, DIFF)]
        out = renamed(df.withColumn(DIFF, F.col(DIFF).cast("bigint")), pairs)
        return flow.held(out, _renamed(changes, pairs)) if isinstance(
            changes, pa.Table) else out


def lookup(flow: Dataflow, node: ir.Get, side: Side, stored: str, values: list[Any]
           ) -> DataFrame | None:
    """The rows whose ``stored`` column holds one of ``values``, from the table's
    arrangement on that column: local rows, read from the few row groups that can
    hold the keys (None: no arrangement serves this table, column and time)."""

    arranged = flow.inputs[node.ref].arranged.get(stored)
    if arranged is None:
        return None
    found = arranged.lookup(side, values, list(dict.fromkeys(node.stored)))
    if found is None:
        return None
    flow.rows_read += found.read
    flow.lookups.append((arranged.need.id, side, len(values), found.read))
    return flow.held(renamed(from_arrow(found.rows), _pairs(node)),
                     _renamed(found.rows, _pairs(node)))


def _renamed(rows: pa.Table, pairs: list[tuple[str, str]]) -> pa.Table:
    """Arrow's ``renamed``: the rows a frame made by it holds."""
    return pa.table([rows.column(s) for s, _ in pairs], names=[n for _, n in pairs])


def empty(flow: Dataflow, node: ir.Get) -> DataFrame:
    """An empty frame with the table's columns and types (a table that did not exist)."""

    inp = flow.inputs[node.ref]
    frame = flow.spark.createDataFrame([], inp.schema_ddl)
    return renamed(frame, _pairs(node)).limit(0)


def _pairs(node: ir.Get) -> list[tuple[str, str]]:
    return list(zip(node.stored, node.columns, strict=True))


def prune(files: list[str], actions: pa.Table | None, column: str, values: list[Any]) -> list[str]:
    """Keep the files whose [min, max] of ``column`` may hold one of ``values``."""
    if actions is None or any(v is None for v in values):
        return files
    names = actions.column_names
    lo_name, hi_name = f"min.{column}", f"max.{column}"
    if lo_name not in names or hi_name not in names:
        return files
    try:
        ordered = sorted(values)
    except TypeError:
        return files
    stats = {}
    for path, lo, hi in zip(actions.column("path").to_pylist(),
                            actions.column(lo_name).to_pylist(),
                            actions.column(hi_name).to_pylist(), strict=True):
        stats[path.rsplit("/", 1)[-1]] = (lo, hi)
    kept = []
    for uri in files:
        lo_hi = stats.get(uri.rsplit("/", 1)[-1])
        if lo_hi is None or lo_hi[0] is None or lo_hi[1] is None:
            kept.append(uri)
            continue
        lo, hi = lo_hi
        try:
            i = bisect.bisect_left(ordered, lo)
        except TypeError:
            kept.append(uri)
            continue
        if i < len(ordered) and ordered[i] <= hi:
            kept.append(uri)
    return kept


RULE = Get()
