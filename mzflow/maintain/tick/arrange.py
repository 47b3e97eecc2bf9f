"""A tick's arrangements: the cluster's arranged tables brought up to the tick's
time before its joins look keys up in them.

Each (table, column) a plan's joins use (``incremental/arrangements.py``) has one
arrangement per cluster, shared by every index of the cluster that needs it. A
tick appends the table's changes since the arrangement's frontier as one batch
(the change feed the tick reads anyway, when the frontiers agree), then lets
older batches merge. An arrangement that does not exist yet is built from the
table at the tick's old time, so that the tick can already read both times from
it. Everything here is idempotent per (arrangement, version range): a tick killed
or run twice leaves batches the next reader either reuses or ignores.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow import caches
from mzflow.catalog import sizes
from mzflow.catalog.model import INDEX, Snapshot
from mzflow.config import Tuning
from mzflow.errors import Error
from mzflow.incremental import columns
from mzflow.incremental.arrangements import Need, needs
from mzflow.incremental.dataflow import Input
from mzflow.incremental.modes import Side
from mzflow.incremental.plan import derive
from mzflow.maintain import hot as hot_mod
from mzflow.maintain.hot import Hot
from mzflow.plan.ir import Node
from mzflow.storage import paths
from mzflow.storage.arrangement import ArrangementShard, Batch, Lookup
from mzflow.storage.delta import DIFF, Shard

log = logging.getLogger("mzflow.arrangements")

READS_FILE = "_mz_reads.json"  # rows the last tick's lookups read, per arrangement

# Open arrangement shards, process-wide: an open Delta table reads only the commits
# since it was last read, so a tick's bookkeeping does not grow with the history.
_OPEN = caches.lru("maintain.open_arrangements", 1024)


def shard(warehouse: Path, cluster_id: int, need: Need) -> ArrangementShard:
    path = paths.arrangement(warehouse, cluster_id, need.item_id, need.column)
    hit = _OPEN.get(str(path))
    if hit is None or not hit.exists():
        hit = _OPEN[str(path)] = ArrangementShard(path, need.column)
    return hit


def forget(path: Path) -> None:
    """Drop the open handle of an arrangement whose storage was removed."""
    _OPEN.pop(str(path), None)


@dataclass
class Arranged:
    """One arrangement as a tick reads it: its batches at the tick's start, and the
    table versions of the tick's two times."""

    need: Need
    shard: ArrangementShard
    batches: list[Batch]
    versions: dict[Side, int | None]
    most: int | None = None  # rows a lookup may bring to the driver (None: any)
    read: list[int] = field(default_factory=lambda: [0])  # rows its lookups read

    def lookup(self, side: Side, values: Sequence[Any], columns: list[str]) -> Lookup | None:
        """The table's rows at ``side``'s time whose key is among ``values`` (None: the
        arrangement cannot serve that time; the caller reads the table)."""
        version = self.versions[side]
        if version is None:
            return None
        chain = self.shard.chain(version, self.batches)
        if chain is None:
            return None
        found = self.shard.lookup(chain, values.to_pylist() if isinstance(values, pa.Array)
                                  else list(values), columns, self.most)
        if found is not None:
            self.read[0] += found.read
        return found


@dataclass
class HotArranged:
    """An in-memory arrangement (``maintain/hot.py``) as a tick reads it."""

    need: Need
    hot: Hot
    versions: dict[Side, int | None]
    path: Path  # where its statistics go (the Delta-backed arrangement's folder)
    read: list[int] = field(default_factory=lambda: [0])

    def lookup(self, side: Side, values: Sequence[Any], columns: list[str]) -> Lookup | None:
        version = self.versions[side]
        if version is None:
            return None
        with self.hot.lock:
            found = self.hot.lookup(version, values, columns)
        if found is not None:
            self.read[0] += found.read
        return found


def maintain(snap: Snapshot, warehouse: Path, cluster_id: int, root: Node,
             inputs: dict[str, Input], at: int, tuning: Tuning, extra: Sequence[Need] = ()
             ) -> dict[str, Input]:
    """``inputs`` with each arranged table's arrangements attached, brought up to the
    tick's new time first. ``extra``: arrangements the index is itself (an index on a
    table by a column), kept even when no join uses them yet. In memory when the
    process may hold them (``hot.py``); else the Delta-backed ones."""
    if not tuning.arrangements:
        return inputs
    by_item: dict[str, list[Need]] = {}
    for need in sorted(set(needs(root)) | set(extra)):
        by_item.setdefault(need.item_id, []).append(need)
    used = _cluster_columns(snap, cluster_id, root)
    budget = memory_budget(snap, cluster_id, tuning)
    out = dict(inputs)
    for ref, inp in inputs.items():
        item_id = ref_item(root, ref)
        arranged = dict(inp.arranged)
        for need in by_item.get(item_id, []):
            def resolve(need: Need = need, inp: Input = inp, item_id: str = item_id
                        ) -> Arranged | HotArranged:
                table = Shard.shared(paths.table(warehouse, item_id))
                if tuning.hot_arrangements:
                    hot = _hot(warehouse, cluster_id, need, table, inp,
                               used.get(item_id, frozenset()), budget)
                    if hot is not None:
                        return HotArranged(need, hot, inp.versions, paths.arrangement(
                            warehouse, cluster_id, need.item_id, need.column))
                arr = shard(warehouse, cluster_id, need)
                _catch_up(arr, table, inp, at, tuning)
                return Arranged(need, arr, arr.batches(), inp.versions, tuning.lookup_rows)
            lazy = Lazy(need, resolve)
            if not tuning.hot_arrangements or need in extra:
                # Delta-backed ones are kept by every tick, as mz_arrangements shows them,
                # and an index that is an arrangement is kept by its own ticks.
                lazy.resolved()
            arranged[need.column] = lazy
        out[ref] = dataclasses.replace(inp, arranged=arranged)
    return out


@dataclass
class Lazy:
    """An arrangement brought up to the tick's time on its first lookup: in memory, a
    tick whose batch never reaches a table (Q5's line items by supplier, while
    suppliers do not change) does not hydrate it."""

    need: Need
    resolve: Callable[[], Arranged | HotArranged]
    done: Arranged | HotArranged | None = None

    def resolved(self) -> Arranged | HotArranged:
        if self.done is None:
            self.done = self.resolve()
        return self.done

    def lookup(self, side: Side, values: Sequence[Any], columns: list[str]) -> Lookup | None:
        return self.resolved().lookup(side, values, columns)


def hydrate(inputs: dict[str, Input]) -> None:
    """Bring every arrangement of ``inputs`` into being (memory, if it fits), after an
    index's first tick, which builds its state from whole inputs and looks nothing up:
    as Materialize hydrates an index's arrangements when it is created, so that its first
    small tick does not pay for it (TPC-H Q3's, at SF 1: 2.4 s against 0.07 s)."""
    for inp in inputs.values():
        for a in inp.arranged.values():
            if isinstance(a, Lazy):
                a.resolved()


# (installation, catalog version, cluster) → the stored columns its indexes' plans read,
# per table they look keys up in: an arrangement in memory keeps them all, so the next
# view's tick does not hydrate it again with more columns.
_CLUSTER_COLUMNS = caches.lru("maintain.cluster_columns", 256)


def _cluster_columns(snap: Snapshot, cluster_id: int, root: Node
                     ) -> dict[str, frozenset[str]]:
    key = (snap.installation_id, snap.version, cluster_id)
    found = _CLUSTER_COLUMNS.get(key)
    if found is None:
        union: dict[str, set[str]] = {}
        for index in snap.items:
            if index.kind != INDEX or index.cluster_id != cluster_id or index.on_id is None:
                continue
            try:
                plan = derive(snap, index)
            except Error:  # cannot be planned: recomputed, looks nothing up
                continue
            if plan.root is not None:
                arranged = {n.item_id for n in needs(plan.root)}
                for item, cols in columns.stored(plan.root).items():
                    if item in arranged:  # a view that only scans the table adds nothing
                        union.setdefault(item, set()).update(cols)
        found = _CLUSTER_COLUMNS[key] = {k: frozenset(v) for k, v in union.items()}
    own = columns.stored(root)
    return {k: found.get(k, frozenset()) | own.get(k, frozenset())
            for k in set(found) | set(own)}


# In-memory arrangements, process-wide: (warehouse, cluster id, table, key) → Hot.
# Their memory is bounded by each cluster's budget (``_hot``); their number here.
_HOT = caches.lru("maintain.hot_arrangements", 256)
_HOT_LOCK = threading.Lock()


# Open connections per warehouse: the last one to close takes its arrangements out of
# memory (a program that ticked views in five homes held all five homes' lineitems).
_CONNECTIONS: dict[str, int] = {}  # bounded: closed() removes a warehouse at zero


def opened(warehouse: Path) -> None:
    with _HOT_LOCK:
        _CONNECTIONS[str(warehouse)] = _CONNECTIONS.get(str(warehouse), 0) + 1


def closed(warehouse: Path) -> None:
    """A connection on ``warehouse`` closed; the last one releases its arrangements."""
    key = str(warehouse)
    with _HOT_LOCK:
        _CONNECTIONS[key] = _CONNECTIONS.get(key, 1) - 1
        if _CONNECTIONS[key] > 0:
            return
        del _CONNECTIONS[key]
        for k in [k for k in _HOT if k[0] == key]:
            del _HOT[k]
        for path in [p for p in _OPEN if p.startswith(key + os.sep)]:
            _OPEN.pop(path, None)


def drop_hot(keep: Callable[[tuple[str, int, str, str]], bool]) -> None:
    """Forget the in-memory arrangements ``keep`` refuses (dropped objects)."""
    with _HOT_LOCK:
        for k in [k for k in _HOT if not keep(k)]:
            del _HOT[k]


def _hot(warehouse: Path, cluster_id: int, need: Need, table: Shard, inp: Input,
         used: frozenset[str], budget: int) -> Hot | None:
    """The arrangement in memory, brought up to the tick's new time and holding its
    old one (None: it would not fit the budget; the tick uses the Delta-backed one)."""
    new_v, old_v = inp.versions[Side.NEW], inp.versions[Side.OLD]
    assert new_v is not None
    first = Side.OLD if old_v is not None else Side.NEW
    base = inp.versions[first]
    assert base is not None
    key = (str(warehouse), cluster_id, need.item_id, need.column)
    with _HOT_LOCK:
        hot = _HOT.get(key)
        wanted = set(used) | {need.column}
        if hot is not None and not wanted <= set(hot.columns):
            wanted |= set(hot.columns)  # another view reads more columns: hydrate them all
            hot = None
        if hot is not None and hot.frontier < base:
            hot = _caught_up(hot, table, base)
        if hot is not None and hot.chain(base) is None and hot.frontier > base:
            return None  # an index far behind the others: the Delta-backed lookups serve it
        if hot is None:
            files = inp.files[first] or ()
            cols = sorted(wanted)
            others = sum(h.nbytes for k, h in _HOT.items() if k != key)
            if others + hot_mod.estimate_bytes(files, cols) > budget:
                log.warning("arrangement %s.%s does not fit the cluster's memory budget "
                            "(%d bytes): its lookups read the Delta-backed arrangement",
                            need.item_id, need.column, budget)
                return None
            hot = hot_mod.hydrate(need.item_id, need.column, cols,
                                  table.arrow_schema(base), files, base)
            log.info("arrangement %s.%s hydrated in memory: %d rows, %d bytes, %.2f s",
                     need.item_id, need.column, hot.records, hot.nbytes, hot.hydrated_seconds)
        _HOT[key] = hot
    with hot.lock:
        if hot.frontier < new_v:
            changes = None
            if hot.frontier == old_v and inp.changes is not None:
                changes, _ = inp.changes()  # the change feed the tick reads anyway
            if not isinstance(changes, pa.Table):
                changes = table.diffs(hot.frontier, new_v)
            hot.add(changes, hot.frontier, new_v)
    return hot


def advance_hot(warehouse: Path, cluster_id: int, at: int) -> None:
    """Bring the cluster's arrangements already in memory up to ``at``, after a tick
    that read whole inputs and looked nothing up (a recompute, a state rebuild): the
    next small tick then finds them current. Left behind, three 10 % batches of TPC-H
    SF 1 put them past ``_REBUILD_SHARE`` and the next 0.1 % tick of Q3 hydrated
    lineitem anew, 2.7 s against 0.1 s. One too far behind is forgotten (the next
    lookup hydrates it)."""
    with _HOT_LOCK:
        held = [(k, h) for k, h in _HOT.items() if k[0] == str(warehouse) and k[1] == cluster_id]
    for key, hot in held:
        table = Shard.shared(paths.table(warehouse, key[2]))
        version = table.version_at(at)
        if version is not None and _caught_up(hot, table, version) is None:
            with _HOT_LOCK:
                if _HOT.get(key) is hot:
                    del _HOT[key]


def compact_later(warehouse: Path, cluster_id: int) -> threading.Thread | None:
    """Run the merges the cluster's ticks left for later (``Hot.compact``) in a
    thread, after the tick: off the path of the next one, which arrives when the
    cluster's schedule says (the thread is a daemon: a process that exits drops it)."""
    with _HOT_LOCK:
        due = [h for k, h in _HOT.items()
               if k[0] == str(warehouse) and k[1] == cluster_id and h.due]
    if not due:
        return None

    def merge() -> None:
        for hot in due:
            try:
                hot.compact()
            except Exception:  # memory is a cache: the next add tries again
                log.exception("merging arrangement %s.%s", hot.item_id, hot.key)

    worker = threading.Thread(target=merge, name="mzflow-arrangement-merges", daemon=True)
    worker.start()
    return worker


def _caught_up(hot: Hot, table: Shard, version: int) -> Hot | None:
    """``hot`` brought to ``version`` from the table's change feed (None: too far
    behind, or that history is gone: hydrate anew). Under the arrangement's lock from
    reading its frontier to adding the changes: a tick service catches arrangements up
    from several threads, and changes read from a frontier another thread then moved
    would be added twice."""
    with hot.lock:
        start = hot.frontier
        if start >= version:
            return hot
        if _far_behind(table, start, version, hot.parts[0].rows.num_rows):
            return None
        try:
            changes = table.diffs(start, version)
        except Exception as e:  # compacted away
            log.info("arrangement %s.%s: changes since %d are gone (%s)", hot.item_id,
                     hot.key, start, e)
            return None
        hot.add(changes, start, version)
    return hot


def record(lazy: Lazy) -> None:
    """What the tick's lookups read, for mz_arrangements and mz_arrangement_sizes."""
    a = lazy.done
    if a is None:  # not looked up this tick
        return
    path = a.path if isinstance(a, HotArranged) else a.shard.path
    if isinstance(a, HotArranged):
        hot_mod.write_stats(path, a.hot)
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / READS_FILE).write_text(json.dumps({"rows": a.read[0]}))
    except OSError:  # dropped meanwhile
        pass


def memory_budget(snap: Snapshot, cluster_id: int | None, tuning: Tuning) -> int:
    """The bytes a cluster's work may hold in one process: a share of its SIZE."""
    cluster = snap.cluster(cluster_id) if cluster_id is not None else None
    return int(tuning.hot_memory_share * sizes.of_cluster(
        cluster.virtual if cluster else True, cluster.size if cluster else None).memory_bytes)


def read_bytes(root: Node, inputs: dict[str, Input], side: Side) -> int:
    """What reading the inputs whole at ``side`` brings into memory (their columns the
    plan reads, from the files' Parquet metadata)."""
    wanted = columns.stored(root)
    return sum(hot_mod.estimate_bytes(inp.files[side] or (), sorted(wanted.get(
        ref_item(root, ref), ()))) for ref, inp in inputs.items())


def ref_item(root: Node, ref: str) -> str:
    return next(g.item_id for g in root.gets() if g.ref == ref)


def _catch_up(arr: ArrangementShard, table: Shard, inp: Input, at: int, tuning: Tuning
              ) -> None:
    new_v, old_v = inp.versions[Side.NEW], inp.versions[Side.OLD]
    assert new_v is not None
    write = {"group_rows": max(1, tuning.arrangement_group_rows),
             "file_size": tuning.file_size}
    frontier = arr.frontier()
    first = Side.OLD if old_v is not None else Side.NEW  # a state rebuild reads only Side.NEW
    base, files = inp.versions[first], inp.files[first] or ()
    assert base is not None
    if frontier is not None and frontier < base and _far_behind(
            table, frontier, base, inp.num_rows[first](files)):
        # Recomputed ticks left it behind by more changes than the table has rows:
        # reading the table anew is cheaper than the change feed, and leaves one batch
        # where catching up would leave a delta as large as the base to merge next.
        log.info("arrangement %s: %d versions behind; rebuilt from the table",
                 arr.path.name, base - frontier)
        frontier = None
    if frontier is None:
        if arr.exists():  # batches that no longer form a chain, or far behind: start over
            shutil.rmtree(arr.path)
            arr.forget()
        arr.add_batch(_rows_of(files, table, base), -1, base, at, **write)
        frontier = base
    if frontier >= new_v:
        return
    changes = None
    if frontier == old_v and inp.changes is not None:
        changes, _ = inp.changes()  # the change feed the tick reads anyway
    if not isinstance(changes, pa.Table):  # another range, or a hydrating tick's frame
        try:
            changes = table.diffs(frontier, new_v)
        except Exception as e:  # that history was compacted away: build it anew
            log.warning("arrangement %s: the table's changes since version %d are gone "
                        "(%s); rebuilding it", arr.path.name, frontier, e)
            shutil.rmtree(arr.path)
            arr.forget()
            arr.add_batch(_rows_of(inp.files[Side.NEW] or (), table, new_v), -1, new_v, at,
                          **write)
            return
    arr.add_batch(changes, frontier, new_v, at, **write)
    _merge(arr, frontier, at, write)


def _far_behind(table: Shard, frontier: int, version: int, rows: int) -> bool:
    return table.estimated_change_count(frontier, version) > _REBUILD_SHARE * max(1, rows)


_REBUILD_SHARE = 0.5  # changes missed, as a share of the table's rows, that start over


def _merge(arr: ArrangementShard, before: int, at: int, write: dict[str, int]) -> None:
    """Merge batches no newer than ``before`` like a binary counter: the youngest two
    while the older is not larger. The batch just appended stays apart, so the
    boundary at ``before`` (the old time of the cluster's next ticks) stays readable."""
    chain = arr.chain()
    if chain is None:
        return
    older = [b for b in chain if b.upto <= before]
    run = [older.pop()] if older else []
    while older and older[-1].rows <= sum(b.rows for b in run):
        run.insert(0, older.pop())
    if len(run) >= 2:
        arr.merge(run, at, **write)


def _rows_of(files: Sequence[str], table: Shard, version: int) -> pa.Table:
    """A table's rows at ``version`` (its files) with diff 1: an arrangement's first
    batch. Files written before an ADD COLUMN lack it: NULL there."""
    import pyarrow.parquet as pq

    from mzflow.storage.rows import plain_strings

    parts = [plain_strings(pq.read_table(f.removeprefix("file://"))) for f in files]
    if parts:
        rows = pa.concat_tables(parts, promote_options="default")
    else:
        rows = plain_strings(table.arrow_schema(version).empty_table())
    return rows.append_column(DIFF, pa.array([1] * rows.num_rows, pa.int64()))
