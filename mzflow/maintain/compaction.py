"""Compaction: advance each table's ``since`` and reclaim what no valid read needs.

For every table: ``since`` moves up to its retention, but not past what a sink
still has to export, nor past the time of a live read hold (a ``SELECT … AS OF`` or a
SUBSCRIBE still reading: read/holds.py); Delta's small files are
merged (optimize), the log is checkpointed, and files no version at or after
``since`` can read are vacuumed. Reads at ``t >= since`` keep working; reads
below ``since`` were already refused.

The shards ticks keep beside their indexes are compacted too, so that a tick's cost
does not grow with the ticks before it: an index's GROUP BY state (its merges leave
many small files) and each cluster's arrangements (their merges leave merged-away
batches behind for readers still at an older version; those go once older than the
arranged table's retention).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mzflow.catalog import frontiers
from mzflow.catalog.model import INDEX, TABLE, Item
from mzflow.catalog.store import Store, Writer
from mzflow.maintain import arrangements
from mzflow.projections import manage as projections
from mzflow.read import holds
from mzflow.sinks import export as sinks
from mzflow.storage import locks, paths
from mzflow.storage.arrangement import ArrangementShard
from mzflow.storage.delta import IndexShard, Shard, StateShard

log = logging.getLogger("mzflow.compact")


@dataclass(frozen=True)
class Compacted:
    table: str
    since: int
    kept_from_version: int
    version: int
    files_removed: int
    files_merged: int
    # table, index, state (of an index), arrangement, or projection (files_merged: parts
    # the merged files brought, materialized; files_removed: parts of vacuumed files)
    kind: str = "table"


# Paused between two locked steps: longer than SQLite's busy handler sleeps between its
# retries (100 ms at most), so a writer that waited for the lock retries while it is free
# instead of losing every race to the next step.
_PAUSE_S = 0.15


class _Steps:
    """Compaction's transactions, one object at a time. One transaction for everything
    held the catalog's write lock, and so every INSERT, for the whole compaction: 34 s
    in a 20-minute soak, past the 30 s writers wait before CatalogBusy (issue 19)."""

    def __init__(self, store: Store):
        self.store = store
        self.last_end = 0.0

    @contextmanager
    def locked(self) -> Iterator[tuple[Writer, dict[str, int]]]:
        """The write lock, with the times sinks and reads hold each object at, read in
        this transaction (expired holds deleted in it): a read either holds before a
        since is chosen here or is refused after."""
        wait = self.last_end + _PAUSE_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            with self.store.write() as w:
                started = time.monotonic()
                held = sinks.holds(w.snapshot)
                indexes = (i.id for i in w.snapshot.items if i.kind == INDEX)
                for object_id, ts in holds.live(w.conn, indexes).items():
                    held[object_id] = min(held.get(object_id, ts), ts)
                yield w, held
                # Holders could not renew while this held the lock (SQLite has one
                # writer): give their leases that time back, or the next step would drop
                # holds whose holders are alive and were only waiting.
                holds.extend_leases(w.conn, int((time.monotonic() - started) * 1000))
        finally:
            self.last_end = time.monotonic()


def _current(w: Writer, item_id: str) -> Item | None:
    """The item as this transaction sees it; None once dropped since compaction began."""
    return next((i for i in w.snapshot.items if i.id == item_id), None)


def compact(store: Store, warehouse: Path, only: str | None = None) -> list[Compacted]:
    out: list[Compacted] = []
    steps = _Steps(store)
    for listed in store.snapshot().items:
        if only is not None and listed.name != only:
            continue
        if listed.kind == INDEX:
            with steps.locked() as (w, held):
                index = _current(w, listed.id)
                if index is not None:
                    out.extend(_compact_index(w, warehouse, index, held.get(index.id)))
        elif listed.kind == TABLE:
            out.extend(_compact_table(steps, warehouse, listed.id))
    with steps.locked() as (w, _):
        out.extend(_compact_arrangements(w, warehouse, only))
    return out


def _compact_table(steps: _Steps, warehouse: Path, table_id: str) -> list[Compacted]:
    """The table under the write lock (no write commits between choosing ``since`` and
    vacuuming, and the merge's commit is the newest, saying the time the shard is
    complete through); then each projection in a transaction of its own."""
    with steps.locked() as (w, held):
        item = _current(w, table_id)
        if item is None:
            return []
        snap = w.snapshot
        shard = Shard(paths.table(warehouse, item.id))
        since = frontiers.since(item, snap)
        if item.id in held:  # a sink still has to export from there, or a read reads
            since = max(item.since_ts or 0, min(since, held[item.id]))
        keep_from = shard.version_at(since) or 0
        ts = w.allocate_ts()
        stats = shard.compact(keep_from, ts)
        w.committed(ts)
        w.set_since(item.id, since)
        version = shard.version()
        merged = int(stats["optimize"].get("numFilesRemoved", 0))
        table = Compacted(item.qualified_name, since, keep_from, version,
                          stats["removed_files"], merged)
        log.info("compacted %s: since %d, versions >= %d kept, %d files removed",
                 table.table, since, keep_from, table.files_removed)
        wanted = [p.id for p in snap.projections_on(item.id)]
    out = [table]
    for projection_id in wanted:
        # Under the lock as any writer of a projection (see projections/write.py: add_parts).
        with steps.locked() as (w, _):
            current = _current(w, table_id)
            projection = next((p for p in w.snapshot.projections
                               if p.id == projection_id), None)
            if current is None or projection is None:
                continue
            built, dropped = projections.after_compaction(w.snapshot, warehouse, current,
                                                          projection)
        out.append(Compacted(f"{item.qualified_name}.{projection.name}", since, keep_from,
                             version, dropped, built, "projection"))
    return out


def _compact_index(w: Writer, warehouse: Path, index: Item, held: int | None
                   ) -> list[Compacted]:
    """The index, then the GROUP BY state its ticks keep beside it (if any); skipped
    while a tick of it runs (the next compaction gets it): waiting here, under the
    catalog's write lock, for a tick that may itself wait for that lock would stall
    both until SQLite's busy timeout. ``held``: the oldest time a read holds it at."""
    with locks.exclusive(locks.index_lock(warehouse, index.id), wait=False) as free:
        if not free:
            log.info("%s is being ticked: not compacted now", index.qualified_name)
            return []
        return _compact_index_locked(w, warehouse, index, held)


def _compact_index_locked(w: Writer, warehouse: Path, index: Item, held: int | None
                          ) -> list[Compacted]:
    shard = IndexShard(paths.index(warehouse, index.id))
    if not shard.exists():
        return [Compacted(index.qualified_name, 0, 0, -1, 0, 0, INDEX)]
    done = shard.state().done_through
    # An index's since never passes what it holds: a serializable read at its upper
    # must still find its files.
    since = min(done, frontiers.since(index, w.snapshot))
    if held is not None:  # a read served from the index at an older time
        since = max(index.since_ts or 0, min(since, held))
    keep_from = shard.version_at(since) or 0
    stats = shard.compact(keep_from, done)
    w.set_since(index.id, since)
    out = [Compacted(index.qualified_name, since, keep_from, shard.version(),
                     stats["removed_files"], int(stats["optimize"].get("numFilesRemoved", 0)),
                     INDEX)]
    state = _compact_state(warehouse, index, done, since)
    return out if state is None else [*out, state]


def _compact_state(warehouse: Path, index: Item, done: int, since: int) -> Compacted | None:
    """The GROUP BY state of a state-mode index, read by its ticks at the newest commit
    at or before the index's time. Skipped while the state is ahead of its index (a
    tick failed between the two commits): the next tick puts those groups back by
    reading exactly those commits."""
    state = StateShard(paths.state(warehouse, index.id))
    if not state.exists():
        return None
    history = state.history()
    if history and history[-1][1] > done:
        log.info("state of %s is ahead of its index (%d > %d): not compacted",
                 index.qualified_name, history[-1][1], done)
        return None
    keep_from = state.version_at(since) or 0
    stats = state.compact(keep_from, done)
    return Compacted(f"{index.qualified_name} (state)", since, keep_from, state.version(),
                     stats["removed_files"], int(stats["optimize"].get("numFilesRemoved", 0)),
                     "state")


def _compact_arrangements(w: Writer, warehouse: Path, only: str | None) -> list[Compacted]:
    snap = w.snapshot
    out = []
    for cluster_id, found in sorted(arrangements.wanted(snap).items()):
        for need in sorted(found):
            table = snap.item(need.item_id)
            if only is not None and table.name != only:
                continue
            path = paths.arrangement(warehouse, cluster_id, need.item_id, need.column)
            shard = ArrangementShard(path, need.column)
            if not shard.exists():
                continue
            # A tick that opened the arrangement within the table's retention may still
            # read batches merged away since.
            keep_ts = snap.read_ts - frontiers.retain_ms(table, snap)
            stats = shard.reclaim(keep_ts)
            cluster = snap.cluster(cluster_id)
            where = cluster.name if cluster is not None else f"cluster {cluster_id}"
            name = f"{table.qualified_name} by {need.column} (arrangement in {where})"
            out.append(Compacted(name, keep_ts, stats["keep_from"], stats["version"],
                                 stats["removed_files"], 0, "arrangement"))
    return out
