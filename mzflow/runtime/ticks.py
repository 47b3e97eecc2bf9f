"""Ticks: bring maintained indexes (and so materialized views) up to a time.

A tick of one index reads its inputs at the target time, computes the changes
to its stored contents with the object's change plan, and applies them in one
Delta commit that also records the new frontier. The commit carries the
idempotency key ``(tick-<index id>, time)``: a tick killed at any point leaves
the previous state, and a tick run twice for one time applies once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from mzflow.catalog import sizes
from mzflow.catalog.model import INDEX, Column, Item, Snapshot
from mzflow.errors import Error, UnknownObject
from mzflow.incremental.plan import ChangePlan, derive
from mzflow.runtime import reads
from mzflow.storage.delta import COUNT, KEY, IndexShard
from mzflow.storage.rows import Target, conform
from mzflow.storage.types import arrow_schema, spark_ddl

log = logging.getLogger("mzflow.tick")


@dataclass(frozen=True)
class TickReport:
    index: str
    on: str
    strategy: str
    upper_before: int  # first time not yet reflected, before the tick
    upper_after: int
    version_before: int
    version_after: int
    rows_read: int  # input rows the tick read
    files_read: int
    rows_changed: int  # distinct rows whose count changed
    error: str | None
    seconds: float

    def line(self) -> str:
        state = f"error: {self.error}" if self.error else f"{self.rows_changed} rows changed"
        return (f"{self.index}: upper {self.upper_before} -> {self.upper_after}, version "
                f"{self.version_before} -> {self.version_after}, read {self.rows_read} rows in "
                f"{self.files_read} files, {state}, {self.strategy}, {self.seconds:.2f} s")


def index_shard(warehouse: Path, index: Item) -> IndexShard:
    return IndexShard(warehouse / index.id)


def _targets(columns: tuple[Column, ...]) -> list[Target]:
    return [Target(c.name, c.type, True) for c in columns]


def _schema(columns: tuple[Column, ...]) -> pa.Schema:
    return arrow_schema([(c.name, c.type, True) for c in columns])


def ensure_shard(warehouse: Path, index: Item, columns: tuple[Column, ...]) -> IndexShard:
    shard = index_shard(warehouse, index)
    if not shard.exists():
        shard.create_index(_schema(columns), -1)
    return shard


def tick_index(snap: Snapshot, warehouse: Path, index: Item, at: int) -> TickReport:
    started = time.perf_counter()
    plan = derive(snap, index)
    shard = ensure_shard(warehouse, index, plan.columns)
    done_through, error = shard.state()
    version_before = shard.version()
    if done_through >= at:
        return TickReport(index.qualified_name, plan.on.qualified_name,
                          plan.strategy.describe(), done_through + 1, done_through + 1,
                          version_before, version_before, 0, 0, 0, error,
                          time.perf_counter() - started)
    app_id = f"tick-{index.id}"
    rows_read, files_read = 0, 0
    try:
        changes, rows_read, files_read = _recompute(snap, warehouse, plan, shard, at)
        new_error = None
    except reads.InvalidTimestamp:
        raise
    except Error as e:  # an evaluation error lands in the object's error collection
        changes, new_error = None, str(e).splitlines()[0]
    if changes is not None and changes.num_rows:
        version = shard.apply(changes, at, app_id)
    else:
        version = shard.mark(at, app_id, new_error, _schema(plan.columns).append(
            pa.field(KEY, pa.string(), nullable=False)).append(
            pa.field(COUNT, pa.int64(), nullable=False)))
    report = TickReport(index.qualified_name, plan.on.qualified_name,
                        plan.strategy.describe(), done_through + 1, at + 1, version_before,
                        version, rows_read, files_read,
                        changes.num_rows if changes is not None else 0, new_error,
                        time.perf_counter() - started)
    log.info("tick %s", report.line())
    return report


def _recompute(snap: Snapshot, warehouse: Path, plan: ChangePlan, shard: IndexShard,
               at: int) -> tuple[pa.Table, int, int]:
    from mzflow.render import diffs, spark

    p = reads.plan(snap, plan.definition)
    reads.check_time(snap, (item for _, item, _ in p.tables), at)
    relations = reads.relations(p, warehouse, at)
    # The cluster's SIZE picks the tick's Spark resources (shuffle parallelism here;
    # executor cores and memory apply when the cluster has its own Spark application).
    cluster = snap.cluster(plan.index.cluster_id)
    size = sizes.of_cluster(cluster.virtual, cluster.size) if cluster else sizes.VIRTUAL_SIZE
    spark.session().conf.set("spark.sql.shuffle.partitions", str(size.shuffle_partitions))
    rows_read = sum(_rows_in(f) for rel in relations.values() for f in rel.files)
    files_read = sum(len(rel.files) for rel in relations.values())
    columns = [c.name for c in plan.columns]
    old_ddl = spark_ddl([(c.name, c.type) for c in plan.columns] + [(KEY, "text"),
                                                                        (COUNT, "bigint")])
    with spark.registered(relations) as views:
        try:
            new = spark.dataframe(p.query, views).toDF(*columns)
            changed = diffs.changes(new, shard.files(shard.version()), old_ddl, columns)
        except Error:
            raise
        except Exception as e:
            raise spark.translate_error(e) from None
    values = conform(changed.select(list(range(len(columns)))), _targets(plan.columns))
    changed = values.append_column(pa.field(KEY, pa.string(), nullable=False),
                                   changed.column(KEY).cast(pa.string())).append_column(
        pa.field(COUNT, pa.int64(), nullable=False), changed.column(COUNT).cast(pa.int64()))
    return changed, rows_read, files_read


def _rows_in(uri: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(uri.removeprefix("file://")).metadata.num_rows)


def indexes_to_tick(snap: Snapshot, cluster: str | None, name: str | None) -> list[Item]:
    if name is not None:
        item = snap.resolve(name)
        if item.kind == INDEX:
            return [item]
        found = snap.indexes_on(item.id)
        if not found:
            raise UnknownObject(f"{item.qualified_name} has no index to maintain")
        return found
    cluster_id = snap.cluster_by_name(cluster).id if cluster is not None else None
    return [i for i in snap.items
            if i.kind == INDEX and (cluster_id is None or i.cluster_id == cluster_id)]
