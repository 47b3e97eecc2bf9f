"""Ticks: bring maintained indexes (and so materialized views) up to a time.

A tick of one index reads its inputs at the target time, computes the changes
to its stored contents with the object's change plan, and applies them in one
Delta commit that also records the new frontier. The commit carries the
idempotency key ``(tick-<index id>, time)``: a tick killed at any point leaves
the previous state, and a tick run twice for one time applies once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.catalog import sizes
from mzflow.catalog.model import INDEX, ROWID, Column, Item, Snapshot
from mzflow.errors import Error, UnknownObject
from mzflow.incremental.plan import (
    DELTA,
    FULL,
    R_BATCH,
    R_FIRST,
    R_HISTORY,
    R_MEASURED,
    R_MEASURING,
    RECOMPUTE,
    STATE,
    ChangePlan,
    Strategy,
    derive,
)
from mzflow.plan import ir
from mzflow.render import dataflow
from mzflow.render.dataflow import NEW, OLD
from mzflow.runtime import reads
from mzflow.storage.delta import (
    COUNT,
    DIFF,
    KEY,
    ROWS,
    TS_KEY,
    IndexShard,
    Shard,
    StateShard,
)
from mzflow.storage.rows import Target, conform
from mzflow.storage.types import arrow_schema, parse_type, spark_ddl

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


# Planning a definition (bind, inline, lower: sqlglot) costs a tick ~0.15 s. It depends
# on the catalog only, which (installation, version) names: every DDL bumps the version.
_PLANS: dict[tuple[str, int, str], tuple[ChangePlan, reads.Plan]] = {}


def _planned(snap: Snapshot, index: Item) -> tuple[ChangePlan, reads.Plan]:
    key = (snap.installation_id, snap.version, index.id)
    hit = _PLANS.get(key)
    if hit is None:
        if len(_PLANS) >= 256:
            _PLANS.clear()
        plan = derive(snap, index)
        hit = _PLANS[key] = (plan, reads.plan(snap, plan.definition))
    return hit


def tick_index(snap: Snapshot, warehouse: Path, index: Item, at: int) -> TickReport:
    started = time.perf_counter()
    plan, query_plan = _planned(snap, index)
    shard = ensure_shard(warehouse, index, plan.columns)
    done_through, error = shard.state()
    version_before = shard.version()
    if done_through >= at:
        return TickReport(index.qualified_name, plan.on.qualified_name,
                          f"{plan.strategy.describe()}, mode {plan.mode}", done_through + 1,
                          done_through + 1,
                          version_before, version_before, 0, 0, 0, error,
                          time.perf_counter() - started)
    app_id = f"tick-{index.id}"
    # Changes start where the contents were last exactly right: an errored tick leaves
    # them as they were, and the next one starts from the same place.
    since = shard.good_through()
    work = _Work(snap, warehouse, plan, query_plan, shard, since, at)
    try:
        changes = work.run()
        new_error = None
    except reads.InvalidTimestamp:
        raise
    except Error as e:  # an evaluation error lands in the object's error collection
        changes, new_error = None, str(e).splitlines()[0]
    extra = work.metadata(time.perf_counter() - started)
    if changes is not None and changes.num_rows:
        version = shard.apply(changes, at, app_id, extra)
    else:
        version = shard.mark(at, app_id, new_error, _schema(plan.columns).append(
            pa.field(KEY, pa.string(), nullable=False)).append(
            pa.field(COUNT, pa.int64(), nullable=False)), extra)
    report = TickReport(index.qualified_name, plan.on.qualified_name, work.describe(),
                        done_through + 1, at + 1, version_before, version, work.rows_read,
                        work.files_read, changes.num_rows if changes is not None else 0,
                        new_error, time.perf_counter() - started)
    log.info("tick %s", report.line())
    return report


# Above this share of its inputs' rows, a batch is recomputed rather than propagated
# (MZFLOW_RECOMPUTE_SHARE overrides it; tests of the incremental path raise it).
RECOMPUTE_SHARE = 0.25


def recompute_share() -> float:
    return float(os.environ.get("MZFLOW_RECOMPUTE_SHARE", RECOMPUTE_SHARE))


# Each tick commit records what it did and cost (Delta commit metadata), so the next
# tick can compare incremental work with recomputing, measured on this index.
MODE_KEY, SECONDS_KEY, BATCH_KEY, ROWS_KEY, REASON_KEY = (
    "mzflow.mode", "mzflow.seconds", "mzflow.batch_rows", "mzflow.input_rows",
    "mzflow.reason")
DETAIL_KEY = "mzflow.strategy"


def last_switch(warehouse: Path, index: Item) -> str | None:
    """How the index's last tick ran, when the run time overrode the plan (a measured
    or large-batch recompute, compacted history): EXPLAIN shows it."""
    shard = index_shard(warehouse, index)
    if not shard.exists():
        return None
    history = shard.ticks(1)
    return history[0].get(DETAIL_KEY) if history else None


REBUILD = "rebuild"  # a state-mode tick that recomputed all groups (first tick, or after
# recomputed ticks left the state behind): its cost is a recompute's
PROBE_EVERY = 20  # after this many measured recomputes in a row, try incremental again
MEASURE_EVERY = 50  # ticks between measurements of what a recompute costs
COLD_KEY = "mzflow.cold"  # the first tick: Spark and caches are cold, its cost says little
# A state-mode tick that also timed a recompute it did not commit (R014 without losing
# the state: a committed recompute would leave the state behind, and rebuilding it
# costs 2-3 recomputes on TPC-H Q18 and top-k).
MEASURED_KEY = "mzflow.recompute_seconds"


class _Work:
    """One tick's computation: picks the mode, runs it, counts what it read."""

    def __init__(self, snap: Snapshot, warehouse: Path, plan: ChangePlan,
                 query_plan: reads.Plan, shard: IndexShard, since: int, at: int):
        self.snap, self.warehouse, self.plan, self.shard = snap, warehouse, plan, shard
        self.query_plan = query_plan
        self.since, self.at = since, at
        self.mode = plan.mode
        self.reason: str | None = None
        self.detail = ""  # the measured figures behind R013
        self.rebuild = False  # state mode: recompute every group and replace the state
        self.measure = False  # state mode: also time a recompute (R014), not committed
        self.measured: float | None = None
        self.rows_read = 0
        self.files_read = 0
        self.batch_rows = 0
        self.input_rows = 0
        self._batch: dict[str, Callable[[], int]] = {}  # per input: its batch's rows

    def describe(self) -> str:
        if self.mode == FULL:
            code = self.reason or self.plan.strategy.code
            return Strategy(RECOMPUTE, code).describe() + self.detail
        if self.rebuild:
            return f"{self.plan.strategy.describe()}, mode {self.mode} (state rebuilt)"
        if self.measured is not None:
            return (f"{self.plan.strategy.describe()}, mode {self.mode} ({R_MEASURING}: "
                    f"recompute timed at {self.measured:.2f} s, not committed)")
        return f"{self.plan.strategy.describe()}, mode {self.mode}"

    def metadata(self, seconds: float) -> dict[str, str]:
        mode = REBUILD if self.rebuild else self.mode
        out = {MODE_KEY: mode, SECONDS_KEY: f"{seconds:.3f}",
               BATCH_KEY: str(self.batch_rows), ROWS_KEY: str(self.input_rows)}
        if self.since < 0:
            out[COLD_KEY] = "1"
        if self.measured is not None:
            out[MEASURED_KEY] = f"{self.measured:.3f}"
        if self.reason:
            out[REASON_KEY] = self.reason
        if self.reason in (R_BATCH, R_HISTORY, R_MEASURED):
            out[DETAIL_KEY] = self.describe()
        return out

    def run(self) -> pa.Table | None:
        from mzflow.render import spark

        p = self.query_plan
        reads.check_time(self.snap, (self.snap.item(item.id) for _, item, _ in p.tables),
                         self.at)
        # The cluster's SIZE picks the tick's Spark resources (shuffle parallelism here;
        # executor cores and memory apply when the cluster has its own Spark application).
        cluster = self.snap.cluster(self.plan.index.cluster_id)
        size = sizes.of_cluster(cluster.virtual, cluster.size) if cluster else sizes.VIRTUAL_SIZE
        spark.session().conf.set("spark.sql.shuffle.partitions", str(size.shuffle_partitions))
        if self.mode == DELTA and self.since < 0:
            self.mode, self.reason = FULL, R_FIRST
        if self.mode != FULL:
            inputs = self._inputs()
            if self.mode == DELTA and self._large(inputs):
                self.mode, self.reason = FULL, R_BATCH
            elif self._measured_slower(inputs):
                self.mode, self.reason = FULL, R_MEASURED
            elif self.mode == STATE and self.since >= 0 and self._state_behind():
                self.rebuild = True
                inputs = self._inputs()  # every input row, as the first tick reads them
            elif self.mode == STATE and self.since < 0:
                self.rebuild = True
            elif self.since >= 0 and self._measurement_due():
                # Without a recent recompute's cost the switch cannot compare: measure
                # one. State mode keeps its state: it ticks, then times a recompute.
                if self.mode == STATE:
                    self.measure = True
                else:
                    self.mode, self.reason = FULL, R_MEASURING
        try:
            if self.mode == FULL:
                return self._recompute(p)
            changed = self._incremental(inputs)
            if self.measure:
                self._time_recompute(p)
            return changed
        except Error:
            raise
        except _HistoryGone:
            self.mode, self.reason = FULL, R_HISTORY
            return self._recompute(p)
        except _EmptyRebuild:
            self.mode, self.rebuild = FULL, False
            return self._recompute(p)
        except Exception as e:
            raise spark.translate_error(e) from None

    # -- inputs ------------------------------------------------------------------------

    def _state_behind(self) -> bool:
        """The state is consistent with the index only if the tick that made the index's
        current contents kept it (a recompute does not)."""
        for entry in self.shard.ticks(50):
            # Compaction commits carry the same time and no mode: skip them.
            if int(entry.get(TS_KEY, -1)) == self.since and MODE_KEY in entry:
                return entry[MODE_KEY] not in (STATE, REBUILD)
        return False  # ticks from before modes were recorded kept their state

    def _measured_slower(self, inputs: dict[str, dataflow.Input]) -> bool:
        if recompute_share() >= 1:  # the cost switches are off (tests of the paths)
            return False
        history = self.shard.ticks(50)
        if not history:
            return False
        self._count(inputs)
        detail = measured_slower(history, self.batch_rows, self.input_rows)
        if detail is None:
            return False
        self.detail = f" [{detail}]"
        return True

    def _measurement_due(self) -> bool:
        if recompute_share() >= 1:
            return False
        return measurement_due(self.shard.ticks(MEASURE_EVERY))

    def _count(self, inputs: dict[str, dataflow.Input]) -> None:
        # From the Delta logs, so that deciding to recompute costs no read of the
        # change feed (the ticks it is compared with were counted the same way).
        self.batch_rows = sum(self._batch[ref]() for ref in inputs)
        self.input_rows = sum(inp.num_rows[NEW](inp.files[NEW] or ())
                              for inp in inputs.values())

    def _inputs(self) -> dict[str, dataflow.Input]:
        out: dict[str, dataflow.Input] = {}
        assert self.plan.root is not None
        for get in self.plan.root.gets():
            if get.ref in out:
                continue
            item = self.snap.item(get.item_id)
            shard = Shard(self.warehouse / item.id)
            out[get.ref] = self._input(item, shard)
            self._batch[get.ref] = self._estimate(out[get.ref], shard)
        return out

    def _estimate(self, inp: dataflow.Input, shard: Shard) -> Callable[[], int]:
        """The input's batch size: its change rows by the Delta log, or every row when
        the tick reads the whole input."""
        since = -1 if self.rebuild else self.since
        old_v = shard.version_at(since) if since >= 0 else None
        new_v = shard.version_at(self.at)
        if old_v is None:
            return lambda: inp.num_rows[NEW](inp.files[NEW] or ())
        assert new_v is not None
        return lambda: shard.changed_rows(old_v, new_v)

    def _input(self, item: Item, shard: Shard) -> dataflow.Input:
        new_v = shard.version_at(self.at)
        if new_v is None:
            raise reads.InvalidTimestamp(f"{item.qualified_name} did not exist at {self.at}")
        since = -1 if self.rebuild else self.since
        old_v = shard.version_at(since) if since >= 0 else None
        versions = {NEW: new_v, OLD: old_v}
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
            def count(uris: Sequence[str]) -> int:
                table = stats_of(v)()
                if table is None:
                    return 0
                by_name = dict(zip([p.rsplit("/", 1)[-1] for p in
                                    table.column("path").to_pylist()],
                                   table.column("num_records").to_pylist(), strict=True))
                return sum(int(by_name.get(u.rsplit("/", 1)[-1]) or 0) for u in uris)
            return count

        changes: Callable[[], tuple[Any, int]] | None = None
        if old_v is None:
            def hydrate() -> tuple[Any, int]:
                from pyspark.sql import functions as F

                from mzflow.render.spark import session
                uris = files[NEW] or ()
                if not uris:
                    return session().createDataFrame([], self._ddl(item)).withColumn(
                        DIFF, F.lit(1).cast("bigint")), 0
                df = session().read.schema(self._ddl(item)).parquet(*uris)
                return df.withColumn(DIFF, F.lit(1).cast("bigint")), rows_of(new_v)(uris)
            changes = hydrate
        elif old_v != new_v:
            cached: list[tuple[Any, int]] = []

            def feed() -> tuple[Any, int]:
                if cached:
                    return cached[0]
                try:
                    rows = shard.change_rows(old_v, new_v)
                except OSError as e:  # files of that history were compacted away
                    raise _HistoryGone(str(e)) from None
                except Exception as e:
                    if "not found" in str(e).lower() or "no such file" in str(e).lower():
                        raise _HistoryGone(str(e)) from None
                    raise
                cached.append((rows, rows.num_rows))
                return cached[0]
            changes = feed
        return dataflow.Input(files=files, stats={m: stats_of(v) for m, v in versions.items()},
                              schema_ddl=self._ddl(item), changes=changes,
                              num_rows={m: rows_of(v) for m, v in versions.items()})

    def _ddl(self, item: Item) -> str:
        return spark_ddl([(c.name, c.type) for c in item.columns] + [(ROWID, "bigint")])

    def _large(self, inputs: dict[str, dataflow.Input]) -> bool:
        """Compare the batch's change rows (from the Delta logs) with the inputs' rows
        (from file statistics)."""
        self._count(inputs)
        total = self.input_rows
        return total > 0 and self.batch_rows > recompute_share() * total

    # -- modes -------------------------------------------------------------------------

    def _index_ddl(self) -> str:
        return spark_ddl([(c.name, c.type) for c in self.plan.columns] + [(KEY, "text"),
                                                                         (COUNT, "bigint")])

    def _types(self) -> list[str]:
        return [parse_type(c.type).spark for c in self.plan.columns]

    def _finish(self, changed: pa.Table) -> pa.Table:
        n = len(self.plan.columns)
        values = conform(changed.select(list(range(n))), _targets(self.plan.columns))
        return values.append_column(
            pa.field(KEY, pa.string(), nullable=False), changed.column(KEY).cast(pa.string())
        ).append_column(pa.field(COUNT, pa.int64(), nullable=False),
                        changed.column(COUNT).cast(pa.int64()))

    def _recompute(self, p: reads.Plan) -> pa.Table:
        from mzflow.render import diffs, spark

        relations = reads.relations(p, self.warehouse, self.at)
        self.rows_read = sum(_rows_in(f) for rel in relations.values() for f in rel.files)
        self.input_rows = self.rows_read
        self.files_read = sum(len(rel.files) for rel in relations.values())
        columns = [c.name for c in self.plan.columns]
        with spark.registered(relations) as views:
            new = spark.dataframe(p.query, views).toDF(*columns)
            changed = diffs.changes(new, self.shard.files(self.shard.version()),
                                    self._index_ddl(), columns, self._types())
        return self._finish(changed)

    def _time_recompute(self, p: reads.Plan) -> None:
        """What a recompute of this index costs now, with its reads counted in the
        tick's; its result is dropped (the incremental one is committed)."""
        counted = self.rows_read, self.files_read, self.input_rows
        started = time.perf_counter()
        self._recompute(p)
        self.measured = time.perf_counter() - started
        self.rows_read += counted[0]
        self.files_read += counted[1]
        self.input_rows = counted[2] or self.input_rows

    def _incremental(self, inputs: dict[str, dataflow.Input]) -> pa.Table | None:
        from mzflow.render import diffs, spark, stateful

        if not self.batch_rows:
            self._count(inputs)
        flow = dataflow.Dataflow(spark.session(), inputs)
        columns = [c.name for c in self.plan.columns]
        index_files = self.shard.files(self.shard.version())
        root = self.plan.root
        assert root is not None
        try:
            if self.mode == DELTA:
                diff = flow.delta(root)
                if diff is None:
                    return None
                return self._finish(diffs.apply_diff(
                    diff.toDF(*columns, DIFF), index_files, self._index_ddl(), columns,
                    self._types()))
            reduce = self.plan.state_chain[-1].inputs[0] if self.plan.state_chain else root
            assert isinstance(reduce, ir.Reduce)
            state = StateShard(self.warehouse / f"{self.plan.index.id}.state")
            state_version = (state.version_at(self.since)
                             if state.exists() and not self.rebuild else None)
            state_files = state.files(state_version) if state_version is not None else None

            def state_rows(keys: pa.Array) -> pa.Table | None:
                return (state.rows_with_keys(state_version, keys)
                        if state_version is not None else None)
            result = stateful.run(flow, self.plan.state_chain, reduce, state_rows,
                                  state_files)
            if result is None:
                if self.rebuild and self.shard.files(self.shard.version()):
                    raise _EmptyRebuild  # no input rows left: the contents empty out
                return None
            if result.full or self.rebuild:
                # A rebuild saw every input row: its "after" rows are the contents.
                output = result.output if result.full else result.output.where(
                    f"`{DIFF}` > 0").drop(DIFF)
                changed = diffs.changes(output.toDF(*columns), index_files,
                                        self._index_ddl(), columns, self._types())
            else:
                changed = diffs.apply_diff(result.output.toDF(*columns, DIFF), index_files,
                                           self._index_ddl(), columns, self._types())
            app = f"tick-{self.plan.index.id}-state"
            if state.exists() and (state.applied(app) or -1) >= self.at:
                pass  # a retried tick: this time's groups are already merged
            elif self.rebuild:
                groups = result.groups
                if reduce.keys:
                    groups = groups.filter(pc.not_equal(groups.column(ROWS), 0))
                state.replace_groups(groups, self.at, app)
            elif result.groups.num_rows:
                state.merge_groups(result.groups, self.at, app,
                                   keep_empty=not reduce.keys)
            return self._finish(changed)
        finally:
            self.rows_read += flow.rows_read
            self.files_read += flow.files_read


def measured_slower(history: Sequence[dict[str, Any]], batch_rows: int, input_rows: int
                    ) -> str | None:
    """Whether to recompute, from an index's tick history (newest first): the cost of
    an incremental tick of this batch, fitted to its recent incremental ticks, against
    its last warm recompute scaled to these inputs. None: go incremental. After a state
    rebuild an incremental tick is always measured, and every PROBE_EVERY measured
    recomputes in a row incremental gets another chance (batches change)."""
    if history[0].get(MODE_KEY) == REBUILD:
        return None
    incs = [(int(h.get(BATCH_KEY, 1)), _incremental_seconds(h)) for h in history
            if h.get(MODE_KEY) in (DELTA, STATE) and SECONDS_KEY in h]
    rec = next((h for h in history if recompute_seconds(h) is not None), None)
    if not incs or rec is None:
        return None
    recent = history[:PROBE_EVERY]
    if len(recent) == PROBE_EVERY and all(h.get(REASON_KEY) == R_MEASURED for h in recent):
        return None
    est_inc = incremental_cost(incs, batch_rows)
    est_rec = (recompute_seconds(rec) or 0.0) * max(1, input_rows) / max(
        1, int(rec.get(ROWS_KEY, 1)))
    if est_inc <= est_rec:
        return None
    return (f"incremental ~{est_inc:.2f} s vs recompute ~{est_rec:.2f} s, from this "
            "index's last ticks")


def recompute_seconds(entry: dict[str, Any]) -> float | None:
    """A tick's measure of a warm recompute, if it made one."""
    if entry.get(MODE_KEY) == FULL and not entry.get(COLD_KEY) and SECONDS_KEY in entry:
        return float(entry[SECONDS_KEY])
    if MEASURED_KEY in entry:
        return float(entry[MEASURED_KEY])
    return None


def _incremental_seconds(entry: dict[str, Any]) -> float:
    """An incremental tick's own cost (less a recompute it timed on the side)."""
    return float(entry[SECONDS_KEY]) - float(entry.get(MEASURED_KEY, 0))


def incremental_cost(ticks: Sequence[tuple[int, float]], batch_rows: int) -> float:
    """A tick's cost is a fixed part (Spark jobs, commits) plus a part that grows with
    the batch: fitted by least squares when recent batches were at least 2x apart in
    size; else from their medians, grown by the square root of the batch ratio
    (between the all-fixed and all-proportional extremes). Never below the cheapest
    tick seen."""
    sizes = [b for b, _ in ticks]
    floor = min(s for _, s in ticks)
    if max(sizes) >= 2 * max(1, min(sizes)):  # a fit needs sizes at least 2x apart
        n = len(ticks)
        mean_b = sum(b for b, _ in ticks) / n
        mean_s = sum(s for _, s in ticks) / n
        var = sum((b - mean_b) ** 2 for b, _ in ticks)
        slope = max(0.0, sum((b - mean_b) * (s - mean_s) for b, s in ticks) / var)
        return max(floor, mean_s + slope * (batch_rows - mean_b))
    b = sorted(sizes)[len(sizes) // 2]
    s = sorted(s for _, s in ticks)[len(ticks) // 2]
    return s * max(1.0, (batch_rows / max(1, b)) ** 0.5)


def measurement_due(history: Sequence[dict[str, Any]]) -> bool:
    """No warm recompute among the last MEASURE_EVERY ticks, and at least two
    incremental ticks to compare it with. (A state rebuild is no measure: it also
    writes every group's partials, which can cost far more than the recompute.)"""
    recent = history[:MEASURE_EVERY]
    warm = [h for h in recent if recompute_seconds(h) is not None]
    incremental = [h for h in recent if h.get(MODE_KEY) in (DELTA, STATE)]
    return not warm and len(incremental) >= 2


class _HistoryGone(Exception):
    pass


class _EmptyRebuild(Exception):
    pass


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
