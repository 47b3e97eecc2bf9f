"""A cluster's arrangements as a whole: which ones its objects want, dropping those
no object wants any more, and the rows of ``mz_arrangements``.

An arrangement is wanted by every maintained index of its cluster whose plan joins
on the arranged column (``incremental/arrangements.py``), and by an explicit
``CREATE INDEX … IN CLUSTER c ON t (col)`` on a table (in Materialize such an index
*is* an arrangement). One arrangement serves all of them; it goes with its last
user.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from mzflow.catalog.model import INDEX, TABLE, Item, Snapshot
from mzflow.errors import Error
from mzflow.incremental.arrangements import Need, needs
from mzflow.incremental.plan import derive
from mzflow.maintain import hot
from mzflow.maintain.tick import arrange
from mzflow.storage import paths
from mzflow.storage.arrangement import ArrangementShard

log = logging.getLogger("mzflow.arrangements")

READS_FILE = arrange.READS_FILE


def wanted(snap: Snapshot) -> dict[int, dict[Need, list[str]]]:
    """cluster id → each wanted arrangement → the ids of the indexes that want it."""
    out: dict[int, dict[Need, list[str]]] = {}
    for index in snap.items:
        if index.kind != INDEX or index.cluster_id is None or index.on_id is None:
            continue
        found = explicit(snap, index)
        if not found:
            try:
                plan = derive(snap, index)
            except Error:  # cannot be planned: recomputed, looks nothing up
                continue
            if plan.root is not None:
                found.extend(needs(plan.root))
        for need in found:
            out.setdefault(index.cluster_id, {}).setdefault(need, []).append(index.id)
    return out


def explicit(snap: Snapshot, index: Item) -> list[Need]:
    """The arrangement an index on a table by one column is (Materialize's model)."""
    on = snap.item(index.on_id) if index.on_id else None
    if (on is not None and on.kind == TABLE and len(index.keys) == 1
            and index.keys[0].column is not None):
        return [Need(on.id, index.keys[0].column)]
    return []


def release(snap: Snapshot, warehouse: Path) -> list[Path]:
    """Remove the storage of arrangements nobody in ``snap`` wants (after a DROP)."""
    root = warehouse / "arrangements"
    if not root.is_dir():
        return []
    keep = {paths.arrangement(warehouse, c, n.item_id, n.column)
            for c, found in wanted(snap).items() for n in found}
    removed = []
    for cluster_dir in root.iterdir():
        for p in cluster_dir.iterdir() if cluster_dir.is_dir() else ():
            if p not in keep:
                shutil.rmtree(p, ignore_errors=True)
                arrange.forget(p)
                removed.append(p)
        if cluster_dir.is_dir() and not any(cluster_dir.iterdir()):
            cluster_dir.rmdir()
    arrange.drop_hot(lambda k: Path(k[0]) != warehouse or paths.arrangement(
        warehouse, k[1], k[2], k[3]) in keep)
    if removed:
        log.info("dropped %d arrangement(s) no object uses: %s", len(removed),
                 ", ".join(p.name for p in removed))
    return removed


def rows(snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    """mz_arrangements: (id, object_id, cluster_id, key, rows, bytes, files,
    records_read_last_tick), one row per wanted arrangement (rows, bytes and files are
    NULL until a tick has built it)."""
    out: list[tuple[Any, ...]] = []
    for cluster_id, found in sorted(wanted(snap).items()):
        for need in sorted(found):
            path = paths.arrangement(warehouse, cluster_id, need.item_id, need.column)
            shard = ArrangementShard(path, need.column)
            n_rows = n_bytes = n_files = reads = None
            chain = shard.chain() if shard.exists() else None
            if chain:
                n_rows = sum(b.rows for b in chain)
                n_files = sum(len(b.files) for b in chain)
                n_bytes = sum(Path(f).stat().st_size for b in chain for f in b.files
                              if Path(f).exists())
            try:  # held in a ticking process's memory: its figures
                held = json.loads((path / hot.STATS_FILE).read_text())
                n_rows, n_bytes = held["records"], held["bytes"]
            except (OSError, ValueError, KeyError):
                pass
            try:
                reads = json.loads((path / READS_FILE).read_text())["rows"]
            except (OSError, ValueError, KeyError):
                pass
            out.append((need.id, need.item_id, cluster_id, need.column, n_rows, n_bytes,
                        n_files, reads))
    return out


def sizes(snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    """mz_arrangement_sizes: (object_id, cluster_id, key, records, batches, size,
    hydration_seconds) of each wanted arrangement a ticking process holds in memory."""
    out: list[tuple[Any, ...]] = []
    for cluster_id, found in sorted(wanted(snap).items()):
        for need in sorted(found):
            path = paths.arrangement(warehouse, cluster_id, need.item_id, need.column)
            try:
                held = json.loads((path / hot.STATS_FILE).read_text())
            except (OSError, ValueError):
                continue
            out.append((need.item_id, cluster_id, need.column, held.get("records"),
                        held.get("parts"), held.get("bytes"), held.get("hydration_seconds")))
    return out
