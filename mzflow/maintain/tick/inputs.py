"""A tick's inputs: each base table's files at the old and new time, its file
statistics, and its change feed between them, all read lazily; and the batch's
size from the Delta logs, so that deciding to recompute reads no data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow.catalog.model import ROWID, Item, Snapshot
from mzflow.incremental.dataflow import Input
from mzflow.incremental.modes import Side
from mzflow.plan.ir import Node
from mzflow.read import reads
from mzflow.storage import paths
from mzflow.storage.delta import DIFF, Shard
from mzflow.storage.types import spark_ddl


class HistoryGone(Exception):
    """The change history between the two times was compacted away."""


Inputs = dict[str, Input]


def gather(snap: Snapshot, warehouse: Path, root: Node, since: int, at: int
           ) -> tuple[Inputs, dict[str, Callable[[], int]]]:
    """Every base table the plan reads (by pin key), and a counter of each one's
    batch rows (change rows by the Delta log; every row when ``since`` < 0)."""
    inputs: Inputs = {}
    batch: dict[str, Callable[[], int]] = {}
    for get in root.gets():
        if get.ref in inputs:
            continue
        item = snap.item(get.item_id)
        shard = Shard.shared(paths.table(warehouse, item.id))
        inputs[get.ref] = _input(item, shard, since, at)
        batch[get.ref] = _estimate(inputs[get.ref], shard, since, at)
    return inputs, batch


def count(inputs: Inputs, batch: dict[str, Callable[[], int]]) -> tuple[int, int]:
    """(batch rows, input rows at the new time), from Delta logs and file statistics."""
    batch_rows = sum(batch[ref]() for ref in inputs)
    input_rows = sum(inp.num_rows[Side.NEW](inp.files[Side.NEW] or ()) for inp in inputs.values())
    return batch_rows, input_rows


def _estimate(inp: Input, shard: Shard, since: int, at: int) -> Callable[[], int]:
    old_v = shard.version_at(since) if since >= 0 else None
    new_v = shard.version_at(at)
    if old_v is None:
        return lambda: inp.num_rows[Side.NEW](inp.files[Side.NEW] or ())
    assert new_v is not None
    return lambda: shard.estimated_change_count(old_v, new_v)


def ddl(item: Item) -> str:
    return spark_ddl([(c.name, c.type) for c in item.columns] + [(ROWID, "bigint")])


def _input(item: Item, shard: Shard, since: int, at: int) -> Input:
    new_v = shard.version_at(at)
    if new_v is None:
        raise reads.InvalidTimestamp(f"{item.qualified_name} did not exist at {at}")
    old_v = shard.version_at(since) if since >= 0 else None
    versions = {Side.NEW: new_v, Side.OLD: old_v}
    files = {m: (tuple(shard.files(v)) if v is not None else None)
             for m, v in versions.items()}
    actions: dict[int, pa.Table] = {}

    def stats_of(v: int | None) -> Callable[[], pa.Table | None]:
        def load() -> pa.Table | None:
            if v is None:
                return None
            if v not in actions:
                actions[v] = shard.add_actions(v)
            return actions[v]
        return load

    def rows_of(v: int | None) -> Callable[[Sequence[str]], int]:
        def rows(uris: Sequence[str]) -> int:
            table = stats_of(v)()
            if table is None:
                return 0
            by_name = dict(zip([p.rsplit("/", 1)[-1] for p in
                                table.column("path").to_pylist()],
                               table.column("num_records").to_pylist(), strict=True))
            return sum(int(by_name.get(u.rsplit("/", 1)[-1]) or 0) for u in uris)
        return rows

    changes: Callable[[], tuple[Any, int]] | None = None
    if old_v is None:
        def hydrate() -> tuple[Any, int]:
            from pyspark.sql import functions as F

            from mzflow.engine.spark import session
            uris = files[Side.NEW] or ()
            if not uris:
                return session().createDataFrame([], ddl(item)).withColumn(
                    DIFF, F.lit(1).cast("bigint")), 0
            df = session().read.schema(ddl(item)).parquet(*uris)
            return df.withColumn(DIFF, F.lit(1).cast("bigint")), rows_of(new_v)(uris)
        changes = hydrate
    elif old_v != new_v:
        cached: list[tuple[Any, int]] = []

        def feed() -> tuple[Any, int]:
            if cached:
                return cached[0]
            try:
                rows = shard.diffs(old_v, new_v)
            except OSError as e:  # files of that history were compacted away
                raise HistoryGone(str(e)) from None
            except Exception as e:
                if "not found" in str(e).lower() or "no such file" in str(e).lower():
                    raise HistoryGone(str(e)) from None
                raise
            cached.append((rows, rows.num_rows))
            return cached[0]
        changes = feed
    return Input(files=files, stats={m: stats_of(v) for m, v in versions.items()},
                 schema_ddl=ddl(item), changes=changes,
                 num_rows={m: rows_of(v) for m, v in versions.items()}, versions=versions,
                 arrow_schema=lambda: shard.arrow_schema(new_v))
