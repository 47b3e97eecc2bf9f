"""A tick's computation: the index's changed rows (new count per distinct row), by
recomputing the definition or by the incremental rules, as one Arrow table ready
for the index commit. Counts what it read."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog.model import Column, Snapshot
from mzflow.config import Tuning
from mzflow.engine.frames import DIFF
from mzflow.incremental.dataflow import Dataflow
from mzflow.incremental.modes import Mode
from mzflow.incremental.plan import ChangePlan
from mzflow.incremental.rules import variant
from mzflow.maintain.tick.inputs import Inputs
from mzflow.read import reads
from mzflow.storage import paths
from mzflow.storage.delta import COUNT, KEY, IndexShard
from mzflow.storage.rows import Target, conform
from mzflow.storage.types import parse_type, spark_ddl


@dataclass
class Counters:
    rows_read: int = 0  # input rows the tick read
    files_read: int = 0
    input_rows: int = 0  # the inputs' size, for the cost switch
    measured: float | None = None  # a recompute timed on the side (R014 in state mode)


@dataclass(frozen=True)
class IndexTarget:
    """What the tick writes: the index's columns, types and current files."""

    plan: ChangePlan
    shard: IndexShard
    tuning: Tuning

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.plan.columns]

    @property
    def ddl(self) -> str:
        return spark_ddl([(c.name, c.type) for c in self.plan.columns] + [(KEY, "text"),
                                                                         (COUNT, "bigint")])

    @property
    def types(self) -> list[str]:
        return [parse_type(c.type).spark for c in self.plan.columns]

    def files(self) -> list[str]:
        return self.shard.files(self.shard.version())

    def finish(self, changed: pa.Table) -> pa.Table:
        """Changed rows cast to the stored types, with their key and new count."""
        columns = self.plan.columns
        values = conform(changed.select(list(range(len(columns)))), _targets(columns))
        return values.append_column(
            pa.field(KEY, pa.string(), nullable=False), changed.column(KEY).cast(pa.string())
        ).append_column(pa.field(COUNT, pa.int64(), nullable=False),
                        changed.column(COUNT).cast(pa.int64()))


def _targets(columns: tuple[Column, ...]) -> list[Target]:
    return [Target(c.name, c.type, True) for c in columns]


def recompute(t: IndexTarget, query: reads.Plan, warehouse: Path, at: int, n: Counters,
              snap: Snapshot | None = None) -> pa.Table:
    """Evaluate the whole definition at ``at`` and diff it against the index. With
    ``snap``, a SELECT of the definition that a table's projection answers reads the
    projection (unless ALTER SYSTEM SET optimize_use_projections = false)."""
    from mzflow.engine import diffs, spark
    from mzflow.projections import route as projections

    relations = reads.relations(query, warehouse, at)
    statement = query.query
    routing = projections.route_query(snap, warehouse, statement, at) if (
        snap is not None and projections.enabled(snap)) else None
    if routing is not None:
        statement = routing.query
        relations = {**{k: v for k, v in relations.items()
                        if any(r.name == k for r in statement.find_all(exp.Table))},
                     **routing.relations}
    # (A routed relation's rows are a DataFrame, not files: its reads are not counted.)
    n.rows_read = sum(_rows_in(f) for rel in relations.values() for f in rel.files)
    n.input_rows = n.rows_read
    n.files_read = sum(len(rel.files) for rel in relations.values())
    with spark.registered(relations) as views:
        new = spark.dataframe(statement, views).toDF(*t.names)
        if _small_limit(query, t.tuning.arrow_diff_rows):
            # Keying the rows adds a projection above ORDER BY … LIMIT, which makes Spark
            # drop TakeOrderedAndProject for a global sort (Q18 at SF 1: 4.8 s → 7.7 s);
            # the few rows are collected first and keyed from Arrow instead.
            new = spark.from_arrow(spark.collect_arrow(new))
        changed = diffs.changes(new, t.files(), t.ddl, t.names, t.types,
                                arrow_rows=t.tuning.arrow_diff_rows)
    return t.finish(changed)


def _small_limit(query: reads.Plan, most: int) -> bool:
    """The definition ends in a LIMIT of at most ``most`` rows."""
    limit = query.query.args.get("limit")
    value = limit.expression if limit is not None else None
    return (value is not None and getattr(value, "is_int", False)
            and int(value.this) <= most)


def time_recompute(t: IndexTarget, query: reads.Plan, warehouse: Path, at: int, n: Counters,
                   snap: Snapshot | None = None) -> None:
    """What a recompute of this index costs now, with its reads counted in the tick's;
    its result is dropped (the incremental one is committed)."""
    import time

    side = Counters()
    started = time.perf_counter()
    recompute(t, query, warehouse, at, side, snap)
    n.measured = time.perf_counter() - started
    n.rows_read += side.rows_read
    n.files_read += side.files_read
    n.input_rows = n.input_rows or side.input_rows


def incremental(t: IndexTarget, inputs: Inputs, mode: Mode, since: int, rebuild: bool, at: int,
                warehouse: Path, n: Counters) -> pa.Table | None:
    from mzflow.engine import spark

    # A rebuild is a recompute's work: Spark's adaptive plans (broadcasts) do it best.
    with nullcontext() if rebuild else spark.few_jobs():
        return _incremental(t, inputs, mode, since, rebuild, at, warehouse, n)


def _incremental(t: IndexTarget, inputs: Inputs, mode: Mode, since: int, rebuild: bool, at: int,
                 warehouse: Path, n: Counters) -> pa.Table | None:
    """The index's changes by the rules: propagated through the tree (delta mode) or
    merged into the kept GROUP BY state (state mode, which commits the state here,
    before the index, under its own idempotency key)."""
    from mzflow.engine import diffs, spark

    flow = Dataflow(spark.session(), inputs, collect_limit=t.tuning.collect_limit,
                    isin_limit=t.tuning.isin_limit)
    root = t.plan.root
    assert root is not None
    arrow_rows = t.tuning.arrow_diff_rows
    try:
        if mode == Mode.DELTA:
            diff = flow.delta(root)
            if diff is None:
                return None
            return t.finish(diffs.apply_diff(diff.toDF(*t.names, DIFF), t.files(), t.ddl,
                                             t.names, t.types, arrow_rows=arrow_rows))
        # A mode that maintains the whole plan (state mode: the rules' registered variant)
        result = variant(mode).tick(flow, t.plan.context, paths.state(warehouse, t.plan.index.id),
                                    since, rebuild, topk_margin=t.tuning.topk_margin)
        if result is None:
            return None
        if result.full:  # every group's rows (a rebuild, or a top-k ranked anew)
            changed = diffs.changes(result.output.toDF(*t.names), t.files(), t.ddl,
                                    t.names, t.types, arrow_rows=arrow_rows)
        else:
            output = ([p.toDF(*t.names, DIFF) for p in result.parts] if result.parts
                      else result.output.toDF(*t.names, DIFF))
            changed = diffs.apply_diff(output, t.files(), t.ddl,
                                       t.names, t.types, arrow_rows=arrow_rows)
        result.commit(at, f"tick-{t.plan.index.id}-{mode}")
        return t.finish(changed)
    finally:
        n.rows_read += flow.rows_read
        n.files_read += flow.files_read


def _rows_in(uri: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(uri.removeprefix("file://")).metadata.num_rows)
