"""Ticks: bring maintained indexes (and so materialized views) up to a time.

A tick of one index gathers its inputs at the target time (``tick/inputs.py``),
decides how to run (``incremental/decide.py``, pure), computes the changes to its
stored contents with the object's change plan (``tick/execute.py``), and applies
them in one Delta commit that also records the new frontier (``tick/commit.py``).
The commit carries the idempotency key ``(tick-<index id>, time)``: a tick killed
at any point leaves the previous state, and a tick run twice for one time applies
once.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow import caches, config, reasons
from mzflow.catalog import names, sizes
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, Item, Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import Error, UnknownObject
from mzflow.incremental import local
from mzflow.incremental.decide import (
    DETAIL_KEY,
    EXECUTOR_KEY,
    LOCAL,
    SPARK,
    Decision,
    Facts,
    decide,
    executor,
)
from mzflow.incremental.modes import Mode, Side, StrategyKind
from mzflow.incremental.plan import ChangePlan, derive
from mzflow.incremental.rules.base import Strategy
from mzflow.maintain import arrangements
from mzflow.maintain.tick import arrange, commit, execute, inputs
from mzflow.maintain.tick import local as tick_local
from mzflow.maintain.tick.commit import ensure_shard, index_shard
from mzflow.maintain.tick.holds import IndexHold
from mzflow.maintain.tick.limit import Limit
from mzflow.plan.ir import Node
from mzflow.quality import quarantine as quarantines
from mzflow.quality import validate as quality
from mzflow.read import reads
from mzflow.reasons import R_HISTORY, R_LAPSED, R_MEASURING
from mzflow.storage import locks, paths
from mzflow.storage.delta import ERROR_CODE_KEY, StorageError

__all__ = ["TickReport", "index_shard", "indexes_to_tick", "last_switch", "tick_index"]

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
    spark_jobs: int | None = None  # Spark jobs the tick ran (None: not countable)
    executor: str | None = None  # where an incremental tick ran, and why
    # Why it did not run where it would have (its cluster's warm processes did not fit
    # the machine's memory budget: clusters/budget.py).
    notice: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields and the line: what a tick service sends its caller."""
        return {**asdict(self), "line": self.line()}

    def line(self) -> str:
        state = f"error: {self.error}" if self.error else f"{self.rows_changed} rows changed"
        jobs = f", {self.spark_jobs} Spark jobs" if self.spark_jobs is not None else ""
        ran = f", executor {self.executor}" if self.executor else ""
        return (f"{self.index}: upper {self.upper_before} -> {self.upper_after}, version "
                f"{self.version_before} -> {self.version_after}, read {self.rows_read} rows in "
                f"{self.files_read} files{jobs}, {state}, {self.strategy}{ran}, "
                f"{self.seconds:.2f} s" + (f"\nNOTICE: {self.notice}" if self.notice else ""))


SPARK_KEY = "mzflow.spark"  # where the tick ran (clusters/servers.py)

# Plans the in-process executor refused for good (an expression it cannot evaluate):
# (installation, catalog version, index id) → why. Their next ticks go to Spark.
_REFUSED = caches.lru("maintain.local_refusals", 4096)

Record = Callable[[list[dict[str, Any]], list[dict[str, Any]]], None]

# Planning a definition (bind, inline, lower: sqlglot) costs a tick ~0.15 s. It depends
# on the catalog only, which (installation, version) names: every DDL bumps the version.
_PLANS = caches.lru("maintain.change_plans", 4096)  # the plan_cache knob bounds it lower


def _planned(snap: Snapshot, index: Item, limit: int) -> tuple[ChangePlan, reads.Plan]:
    key = (snap.installation_id, snap.version, index.id)
    hit = _PLANS.get(key)
    if hit is None:
        while _PLANS and len(_PLANS) >= limit:
            _PLANS.popitem()  # the least recently used
        plan = derive(snap, index)
        hit = _PLANS[key] = (plan, reads.plan(snap, plan.definition))
    return hit


def tick_index(snap: Snapshot, warehouse: Path, index: Item, at: int, *,
               full_refresh: bool = False, record: Record | None = None,
               quarantine: quarantines.Quarantine | None = None,
               named: Callable[[], bool] | None = None,
               store: Store | None = None) -> TickReport:
    """``record`` keeps the results of the view's expectations (mz_expectation_results);
    ``quarantine`` writes the rows its QUARANTINE expectations fail to its quarantine.
    ``named``: whether the catalog, read now, still holds the index (asked after the
    tick). ``store``: the catalog the index's read hold on its inputs is kept in
    (tick/holds.py; None: no hold, as in tests of a tick alone). One tick of an index
    at a time, across processes (storage/locks.py): two would both start from the same
    commit and apply the changes between twice. A tick that exceeds ``tick_timeout``,
    waiting for that lock included, is cancelled (tick/limit.py)."""
    limit = Limit(index.qualified_name, config.tuning(snap.settings).tick_timeout)
    with locks.exclusive(locks.index_lock(warehouse, index.id),
                         timeout=limit.remaining()) as held:
        if not held:
            raise limit.lock_error()
        if named is not None and not named():
            # Dropped while this tick waited for the lock (a read's catch-up behind the
            # ticker, a blue/green swap's clean-up meanwhile): its shard is gone, and a
            # tick now would make an empty one again and recompute at a time whose
            # history compaction may have passed (the soak's swap reader failed so).
            raise _dropped(index)
        try:
            with limit.running():
                report = _tick_index(snap, warehouse, index, at, full_refresh=full_refresh,
                                     record=record, quarantine=quarantine, store=store,
                                     limit=limit)
            if index.cluster_id is not None:
                arrange.compact_later(warehouse, index.cluster_id)
        except Exception as e:
            # A DROP committed meanwhile and removed the index's shard under the tick
            # (the soak saw "could not write shard u49: Invalid table version: 0"), or
            # the tick failed for what the DROP took (its inputs' history): nothing was
            # lost, and what happened is that the index is gone.
            if named is not None and not named():
                _remove_storage(warehouse, index)
            elif not (isinstance(e, StorageError) and not index_shard(warehouse,
                                                                       index).exists()):
                raise
            raise _dropped(index) from None
        if named is not None and not named():
            # A DROP committed while this tick ran (or before it, after its snapshot).
            # The DROP removes the storage without this lock, so the tick may have
            # written after it (ensure_shard makes a missing shard): a shard no catalog
            # names, which nothing would ever remove. All of the tick's writes are done
            # and a dropped id is never reused: remove what it left.
            _remove_storage(warehouse, index)
            raise _dropped(index)
        return report


def _remove_storage(warehouse: Path, index: Item) -> None:
    for path in paths.of_item(warehouse, index.id):
        shutil.rmtree(path, ignore_errors=True)


def _dropped(index: Item) -> UnknownObject:
    return UnknownObject(f"{index.qualified_name} was dropped while it ticked",
                         hint="nothing to maintain any more")


def _tick_index(snap: Snapshot, warehouse: Path, index: Item, at: int, *,
                full_refresh: bool, record: Record | None,
                quarantine: quarantines.Quarantine | None, store: Store | None,
                limit: Limit) -> TickReport:
    started = time.perf_counter()
    if quarantine is not None:  # what an earlier tick, killed, left to do
        for path in quarantines.staged_ticks(warehouse, index):
            quarantines.finish_tick(path, quarantine)
    tuning = config.tuning(snap.settings)
    plan, query = _planned(snap, index, tuning.plan_cache)
    shard = ensure_shard(warehouse, index, plan.columns)
    done_through, error, _ = shard.state()
    version_before = shard.version()
    if done_through >= at:
        return TickReport(index.qualified_name, plan.on.qualified_name,
                          f"{plan.strategy.describe()}, mode {plan.mode}", done_through + 1,
                          done_through + 1, version_before, version_before, 0, 0, 0, error,
                          time.perf_counter() - started, 0)
    # Changes start where the contents were last exactly right: an errored tick leaves
    # them as they were, and the next one starts from the same place.
    since = shard.good_through()
    # A plan that never reads changes (recompute mode) needs no history kept for it.
    hold = None if store is None or plan.mode == Mode.RECOMPUTE else IndexHold(
        store, index, [snap.item(item.id) for _, item, _ in query.tables],
        tuning.index_hold_lease_seconds)
    tick = _Tick(snap, warehouse, plan, query, execute.IndexTarget(plan, shard, tuning), since, at,
                 hold)
    from mzflow.engine import spark

    staged = None
    with spark.counting_jobs() as jobs:
        try:
            changes = tick.run(full_refresh)
            new_error, error_code = None, None
            if changes is not None and snap.expectations_on(plan.on.id):
                # The index keeps every row, failing or not (its readers leave out what
                # DROP ROW and QUARANTINE say): only results and quarantined rows follow.
                checked = quality.validate_changes(snap, plan.on, changes,
                                                   f"tick {index.name}")
                if checked is not None and record is not None:
                    record(*checked.records(at))
                bad = quarantines.tick_rows(checked, at, plan.on) if checked else None
                if bad is not None and quarantine is not None:
                    staged = quarantines.stage_tick(warehouse, index, plan.on, bad, at)
        except quality.ExpectationFailed as failed:
            # FAIL rejects the tick: nothing is committed, the index stays where it was.
            if record is not None:
                record(*failed.checked.records(at))
            raise
        except reads.InvalidTimestamp:
            raise
        except Error as e:
            if limit.expired:  # cancelled: Spark's error is the cancel's, not the data's
                raise limit.error() from e
            # A data exception (SQLSTATE class 22: division by zero, a bad cast) is the
            # definition's answer at this time and lands in the error collection. Any
            # other failure says nothing about the data (an input file vacuumed under a
            # long tick, a lost Spark): recording it would make readers fail until the
            # next write, so the tick fails with nothing committed and runs again.
            if not e.code.startswith("22"):
                raise
            changes, new_error, error_code = None, str(e).splitlines()[0], e.code
        spark_jobs = jobs()
    described = tick.describe()
    extra = commit.metadata(tick.decision, since, tick.batch_rows, tick.counters,
                            time.perf_counter() - started, described, spark_jobs)
    extra[SPARK_KEY] = spark.where()  # the cluster's warm server, or in-process
    if tick.executor is not None:
        extra[EXECUTOR_KEY] = tick.executor
    if new_error is not None and error_code is not None:
        extra[ERROR_CODE_KEY] = error_code  # a read of the index raises it with its code
    limit.check()  # past the limit nothing is committed, even work that finished
    version = commit.commit(shard, index, plan.columns, changes, at, new_error, extra)
    if hold is not None:  # the next tick starts at the last error-free time
        hold.advance(at if new_error is None else since)
    if staged is not None:
        assert quarantine is not None
        quarantines.finish_tick(staged, quarantine)
    n = tick.counters
    report = TickReport(index.qualified_name, plan.on.qualified_name, described,
                        done_through + 1, at + 1, version_before, version, n.rows_read,
                        n.files_read, changes.num_rows if changes is not None else 0,
                        new_error, time.perf_counter() - started, spark_jobs, tick.executor)
    log.info("tick %s", report.line())
    return report


def last_switch(warehouse: Path, index: Item) -> str | None:
    """How the index's last tick ran, when the run time overrode the plan (a measured
    or large-batch recompute, compacted history, a full refresh): EXPLAIN shows it."""
    shard = index_shard(warehouse, index)
    if not shard.exists():
        return None
    history = shard.ticks(1)
    return history[0].get(DETAIL_KEY) if history else None


class _Tick:
    """One tick's run: facts, decision, execution, with what it read counted."""

    def __init__(self, snap: Snapshot, warehouse: Path, plan: ChangePlan, query: reads.Plan,
                 target: execute.IndexTarget, since: int, at: int,
                 hold: IndexHold | None = None):
        self.snap, self.warehouse, self.plan, self.query = snap, warehouse, plan, query
        self.target, self.since, self.at, self.hold = target, since, at, hold
        self.decision = Decision(plan.mode)
        self.executor: str | None = None
        self.batch_rows = 0
        self.counters = execute.Counters()

    def describe(self) -> str:
        d, strategy = self.decision, self.plan.strategy
        if d.mode == Mode.RECOMPUTE:
            return Strategy(StrategyKind.RECOMPUTE, d.reason or strategy.code).describe() + d.detail
        if d.rebuild:
            why = f", as a recompute: {d.reason}: {reasons.text(d.reason)}" if d.reason else ""
            return f"{strategy.describe()}, mode {d.mode} (state rebuilt{why}){d.detail}"
        if self.counters.measured is not None:
            return (f"{strategy.describe()}, mode {d.mode} ({R_MEASURING}: "
                    f"recompute timed at {self.counters.measured:.2f} s, not committed)")
        return f"{strategy.describe()}, mode {d.mode}"

    def run(self, full_refresh: bool) -> pa.Table | None:
        from mzflow.engine import spark

        reads.check_time(self.snap, (self.snap.item(item.id) for _, item, _ in
                                     self.query.tables), self.at)
        # The cluster's SIZE picks the tick's Spark resources (shuffle parallelism here;
        # executor cores and memory apply when the cluster has its own Spark application).
        cluster = self.snap.cluster(self.plan.index.cluster_id)
        size = sizes.of_cluster(cluster.virtual, cluster.size) if cluster else sizes.VIRTUAL_SIZE
        spark.session().conf.set("spark.sql.shuffle.partitions", str(size.shuffle_partitions))
        gathered = None
        facts = Facts(self.plan.mode, self.since, full_refresh=full_refresh)
        # Compaction passed where this tick's changes start (the index's hold lapsed):
        # it recomputes, and says why (R016).
        passed = self.hold.start(self.since) if (
            self.hold is not None and not full_refresh) else None
        if passed is not None:
            log.warning("%s: %s", self.plan.index.qualified_name,
                        f"{reasons.text(R_LAPSED)}{passed.describe()}")
            facts = Facts(self.plan.mode, self.since, passed=passed.describe())
        # Only a tick that may run incrementally needs its inputs' facts (a first
        # delta-mode tick recomputes whatever they are).
        elif self.plan.mode != Mode.RECOMPUTE and not full_refresh and not (
                self.plan.mode == Mode.DELTA and facts.first):
            gathered = inputs.gather(self.snap, self.warehouse, self._root(), self.since,
                                     self.at)
            self.batch_rows, input_rows = inputs.count(*gathered)
            self.counters.input_rows = input_rows
            history = self.target.shard.ticks(self.target.tuning.history_ticks)
            facts = Facts(self.plan.mode, self.since, history, self.batch_rows, input_rows,
                          joins=len(self.query.tables) > 1,
                          local_refusal=self._refusal())
        self.decision = decide(facts, self.target.tuning)
        try:
            try:
                return self._compute(facts, gathered)
            except _OnSpark as e:
                # The in-process executor refused a tick the decision counted on running
                # in process: decide again as for Spark, whose prior for a join is far
                # lower (TPC-H's top-k at SF 1 with a 10 % batch: a Spark delta join of
                # 1.2 M changes ran its cluster's 4 GB server out of memory, where the
                # rebuild this decides takes seconds).
                facts = dataclasses.replace(facts, local_refusal=e.why)
                again = decide(facts, self.target.tuning)
                self.decision = dataclasses.replace(again, detail=f"{again.detail} [{e.why}]")
                return self._compute(facts, gathered)
        except Error:
            raise
        except inputs.HistoryGone:
            self.decision = Decision(Mode.RECOMPUTE, R_HISTORY)
            with self._beside_spark(None):
                return self._recompute()
        except Exception as e:
            raise spark.translate_error(e) from None

    def _compute(self, facts: Facts, gathered: tuple[inputs.Inputs, Any] | None) -> pa.Table | None:
        d = self.decision
        if d.mode == Mode.RECOMPUTE:
            with self._beside_spark(None):
                return self._recompute()
        if d.rebuild and self.since >= 0:  # every input row, as the first tick reads them
            gathered = inputs.gather(self.snap, self.warehouse, self._root(), -1, self.at)
        assert gathered is not None
        cluster_id = self.plan.index.cluster_id
        arranged = gathered[0] if cluster_id is None else arrange.maintain(
            self.snap, self.warehouse, cluster_id, self._root(), gathered[0], self.at,
            self.target.tuning, arrangements.explicit(self.snap, self.plan.index))
        where = executor(facts, self.target.tuning, d)
        if d.rebuild:  # reads whole inputs on Spark and looks nothing up
            with self._beside_spark(arranged if facts.first else None):
                changed = self._incremental(facts, where, arranged)
        else:
            changed = self._incremental(facts, where, arranged)
            if facts.first and cluster_id is not None:
                arrange.hydrate(arranged)
        for inp in arranged.values():
            for a in inp.arranged.values():
                arrange.record(a)
        if d.measure:
            execute.time_recompute(self.target, self.query, self.warehouse, self.at,
                                   self.counters, self.snap)
        return changed

    @contextmanager
    def _beside_spark(self, first: inputs.Inputs | None) -> Iterator[None]:
        """Around a tick that reads whole inputs on Spark (a recompute, a state rebuild):
        the cluster's arrangements in memory are brought up to this tick's time, and on
        an index's first tick its own are hydrated (``first``), in a thread while Spark
        computes, since the tick looks nothing up. Done after Spark, they were a fixed
        cost on top of a recompute's: TPC-H Q3 at SF 1 with a 10 % batch spent 0.64 s of
        its 2.9 s reading the change feed into lineitem's arrangement. Whatever the
        thread raises is raised here, once both are done."""
        cluster_id = self.plan.index.cluster_id
        if cluster_id is None or not (self.target.tuning.hot_arrangements or first):
            yield
            return

        def work() -> None:
            if first is not None:
                arrange.hydrate(first)
            if self.target.tuning.hot_arrangements:
                arrange.advance_hot(self.warehouse, cluster_id, self.at)

        side = _Beside(work)
        try:
            yield
        except BaseException:
            side.join(quiet=True)  # the tick's own error is the one to report
            raise
        side.join()
        # Reading whole inputs and hydrating allocate far more than the process keeps:
        # hand what Arrow's allocator holds unused back to the system.
        pa.default_memory_pool().release_unused()

    def _refusal(self) -> str | None:
        found = _REFUSED.get(self._plan_key())
        if found is not None:
            return str(found)
        return local.refusal(self.plan, self.target.tuning.topk_margin)

    def _plan_key(self) -> tuple[str, int, str]:
        return (self.snap.installation_id, self.snap.version, self.plan.index.id)

    def _incremental(self, facts: Facts, where: tuple[str, str], arranged: inputs.Inputs
                     ) -> pa.Table | None:
        """The changes, in process when the decision says so and it can run them
        exactly, else on Spark (what ran and why goes into the tick's line). Raises
        _OnSpark when the refusal changes the decision."""
        d = self.decision
        if where[0] == LOCAL and d.rebuild:
            where = self._rebuild_fits(where, arranged)
        if where[0] == LOCAL:
            try:
                changed = tick_local.incremental(self.target, arranged, d.mode, self.since,
                                                 self.at, self.warehouse, self.counters,
                                                 rebuild=d.rebuild)
                self.executor = f"local ({where[1]})"
                return changed
            except local.NotLocal as e:
                if e.lasting:
                    _REFUSED[self._plan_key()] = f"in process: {e}"
                where = (SPARK, f"in process: {e}")
                if decide(dataclasses.replace(facts, local_refusal=where[1]),
                          self.target.tuning) != d:
                    raise _OnSpark(where[1]) from None
        self.executor = f"spark ({where[1]})"
        return execute.incremental(self.target, arranged, d.mode, self.since, d.rebuild,
                                   self.at, self.warehouse, self.counters)

    def _rebuild_fits(self, where: tuple[str, str], arranged: inputs.Inputs
                      ) -> tuple[str, str]:
        """``where``, or Spark when reading the inputs whole (a join's intermediate rows
        and the partials on top: 3x) would not fit the cluster's memory budget."""
        need = 3 * arrange.read_bytes(self._root(), arranged, Side.NEW)
        budget = arrange.memory_budget(self.snap, self.plan.index.cluster_id,
                                       self.target.tuning)
        if need <= budget:
            return where
        return SPARK, (f"in process: a rebuild needing ~{need >> 20} MiB does not fit the "
                       f"cluster's memory budget ({budget >> 20} MiB)")

    def _root(self) -> Node:
        assert self.plan.root is not None
        return self.plan.root

    def _recompute(self) -> pa.Table:
        return execute.recompute(self.target, self.query, self.warehouse, self.at,
                                 self.counters, self.snap)


class _OnSpark(Exception):
    """The in-process executor refused, and on Spark the tick decides otherwise."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class _Beside:
    """A thread of in-process work beside a Spark computation; ``join`` waits for it
    and raises what it raised."""

    def __init__(self, work: Callable[[], None]):
        self.error: BaseException | None = None

        def run() -> None:
            try:
                work()
            except BaseException as e:  # raised again in the tick's thread
                self.error = e

        self.thread = threading.Thread(target=run, name="mzflow-beside-spark", daemon=True)
        self.thread.start()

    def join(self, quiet: bool = False) -> None:
        self.thread.join()
        if self.error is not None and not quiet:
            raise self.error


def default_index_name(snap: Snapshot, name: str) -> str:
    """A materialized view's name stands for its default index (DAG-as-code declares
    views, and does not know what the catalog will name their indexes)."""
    item = names.find(snap, name)
    if item is not None and item.kind == MATERIALIZED_VIEW:
        for ix in snap.indexes_on(item.id):
            if ix.is_default_index:
                return names.short(ix)
    return name


def indexes_to_tick(snap: Snapshot, cluster: str | None, name: str | None) -> list[Item]:
    if name is not None:
        item = names.resolve(snap, name)
        if item.kind == INDEX:
            return [item]
        found = snap.indexes_on(item.id)
        if not found:
            raise UnknownObject(f"{item.qualified_name} has no index to maintain")
        return found
    cluster_id = snap.cluster_by_name(cluster).id if cluster is not None else None
    return [i for i in snap.items
            if i.kind == INDEX and (cluster_id is None or i.cluster_id == cluster_id)]
