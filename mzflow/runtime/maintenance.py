"""Compaction: advance each table's ``since`` and reclaim what no valid read needs.

For every table: ``since`` moves up to its retention, but not past what a sink
still has to export (its read hold); Delta's small files are
merged (optimize), the log is checkpointed, and files no version at or after
``since`` can read are vacuumed. Reads at ``t >= since`` keep working; reads
below ``since`` were already refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from mzflow.catalog import frontiers
from mzflow.catalog.model import INDEX, TABLE, Item
from mzflow.catalog.store import Store, Writer
from mzflow.runtime import sinks
from mzflow.storage import paths
from mzflow.storage.delta import IndexShard, Shard

log = logging.getLogger("mzflow.compact")


@dataclass(frozen=True)
class Compacted:
    table: str
    since: int
    kept_from_version: int
    version: int
    files_removed: int
    files_merged: int


def compact(store: Store, warehouse: Path, only: str | None = None) -> list[Compacted]:
    out = []
    # Under the write lock: no write can commit between choosing `since` and vacuuming.
    with store.write() as w:
        snap = w.snapshot
        held = sinks.holds(snap)
        for item in snap.items:
            if item.kind == INDEX and (only is None or item.name == only):
                out.append(_compact_index(w, warehouse, item))
            if item.kind != TABLE or (only is not None and item.name != only):
                continue
            shard = Shard(paths.table(warehouse, item.id))
            since = frontiers.since(item, snap)
            if item.id in held:  # a sink still has to export from there
                since = max(item.since_ts or 0, min(since, held[item.id]))
            keep_from = shard.version_at(since) or 0
            ts = w.allocate_ts()
            stats = shard.compact(keep_from, ts)
            w.committed(ts)
            w.set_since(item.id, since)
            merged = int(stats["optimize"].get("numFilesRemoved", 0))
            result = Compacted(item.qualified_name, since, keep_from, shard.version(),
                               stats["removed_files"], merged)
            log.info("compacted %s: since %d, versions >= %d kept, %d files removed",
                     result.table, since, keep_from, result.files_removed)
            out.append(result)
    return out


def _compact_index(w: Writer, warehouse: Path, index: Item) -> Compacted:
    shard = IndexShard(paths.index(warehouse, index.id))
    if not shard.exists():
        return Compacted(index.qualified_name, 0, 0, -1, 0, 0)
    done, _ = shard.state()
    # An index's since never passes what it holds: a serializable read at its upper
    # must still find its files.
    since = min(done, frontiers.since(index, w.snapshot))
    keep_from = shard.version_at(since) or 0
    stats = shard.compact(keep_from, done)
    w.set_since(index.id, since)
    return Compacted(index.qualified_name, since, keep_from, shard.version(),
                     stats["removed_files"], int(stats["optimize"].get("numFilesRemoved", 0)))
