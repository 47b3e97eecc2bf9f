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

from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir
from mzflow.render.frames import DIFF, plain
from mzflow.render.spark import from_arrow

if TYPE_CHECKING:
    from mzflow.incremental.dataflow import Dataflow, Restriction


class Get(Rule):
    node = ir.Get

    def strategy(self, node: ir.Get, ctx: Context) -> Strategy:
        return incremental("changes from the Delta change feed")

    def describe(self, node: ir.Get) -> str:
        return f"Get {node.name}"

    def full(self, flow: Dataflow, node: ir.Get, mode: str, r: Restriction | None) -> Any:
        from pyspark.sql import functions as F

        inp = flow.inputs[node.ref]
        stored_files = inp.files[mode]
        if not stored_files:
            return empty(flow, node)
        files = list(stored_files)
        pruned_on = plain(r.exprs[0]) if r is not None else None
        if r is not None and r.values is not None and pruned_on is not None:
            stored = node.stored[node.columns.index(pruned_on)]
            files = prune(files, inp.stats[mode](), stored, [v[0] for v in r.values])
        flow.files_read += len(files)
        flow.rows_read += inp.num_rows[mode](files) if files else 0
        if not files:
            return empty(flow, node)
        df = flow.spark.read.schema(inp.schema_ddl).parquet(*files).select(
            *[F.col(f"`{s}`").alias(n) for s, n in zip(node.stored, node.columns, strict=True)])
        if r is not None and r.values is not None and pruned_on is not None and len(
                r.values) <= flow.isin_limit and all(v[0] is not None for v in r.values):
            # A literal IN list reaches the Parquet reader, which skips row groups.
            df = df.where(F.col(f"`{pruned_on}`").isin([v[0] for v in r.values]))
        return flow.restrict(df, r)

    def delta(self, flow: Dataflow, node: ir.Get) -> Any:
        from pyspark.sql import functions as F

        inp = flow.inputs[node.ref]
        assert inp.changes is not None
        changes, rows = inp.changes()
        flow.rows_read += rows
        # (a Spark Connect DataFrame answers every attribute, so test the type)
        df = from_arrow(changes) if isinstance(changes, pa.Table) else changes
        return df.select(*[F.col(f"`{s}`").alias(n) for s, n in zip(
            node.stored, node.columns, strict=True)], F.col(DIFF).cast("bigint").alias(DIFF))


def empty(flow: Dataflow, node: ir.Get) -> Any:
    """An empty frame with the table's columns and types (a table that did not exist)."""
    from pyspark.sql import functions as F

    inp = flow.inputs[node.ref]
    frame = flow.spark.createDataFrame([], inp.schema_ddl)
    return frame.select(*[F.col(f"`{s}`").alias(n)
                          for s, n in zip(node.stored, node.columns, strict=True)]).limit(0)


def prune(files: list[str], actions: Any, column: str, values: list[Any]) -> list[str]:
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
