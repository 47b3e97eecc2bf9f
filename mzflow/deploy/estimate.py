"""What a plan's new indexes must hydrate: the rows their first tick reads, and a time.

Rows are the live tables' row counts from their Delta logs (the tables each index
reads, through views; a table the plan creates holds none). The time divides them by
the throughput this installation's own recomputes had, read from the indexes' tick
commits (``mzflow.input_rows`` over ``mzflow.seconds``): the median, so a cold first
tick does not set it. With no recompute on record the time is unknown, and said so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from mzflow.catalog.model import INDEX, TABLE, Item, Snapshot
from mzflow.deploy.diff import Diff
from mzflow.incremental.decide import MODE_KEY, ROWS_KEY, SECONDS_KEY
from mzflow.incremental.modes import Mode

_FULL = (str(Mode.RECOMPUTE), str(Mode.REBUILD))


@dataclass(frozen=True)
class Hydration:
    index: str
    cluster: str
    rows: int
    seconds: float | None  # None: no recorded recompute to go by


def _tables(snap: Snapshot, index: Item) -> set[tuple[str, str]]:
    """(schema, name) of the tables ``index`` reads, through views."""
    from mzflow.maintain.freshness import base_tables

    on = next(i for i in snap.items if i.id == index.on_id)
    return {(t.schema, t.name) for t in ([on] if on.kind == TABLE else base_tables(snap, on))}


def _rows(warehouse: Path, table: Item) -> int:
    from mzflow.storage import paths
    from mzflow.storage.delta import Shard

    shard = Shard(paths.table(warehouse, table.id))
    if not shard.exists():
        return 0
    counts = shard.add_actions(shard.version()).column("num_records").to_pylist()
    return int(sum(c or 0 for c in counts))


def throughput(live: Snapshot, warehouse: Path) -> float | None:
    """Rows a second of this installation's recorded recomputes (median), if any."""
    from mzflow.storage import paths
    from mzflow.storage.commits import read_log
    from mzflow.storage.delta import Shard

    rates = []
    for index in (i for i in live.items if i.kind == INDEX):
        shard = Shard(paths.index(warehouse, index.id))
        if not shard.exists():
            continue
        for e in read_log(shard._table(), 50):
            if e.get(MODE_KEY) in _FULL and float(e.get(SECONDS_KEY) or 0) > 0:
                rates.append(int(e.get(ROWS_KEY) or 0) / float(e[SECONDS_KEY]))
    rates = [r for r in rates if r > 0]
    return statistics.median(rates) if rates else None


def hydrations(live: Snapshot, desired: Snapshot, d: Diff, warehouse: Path
               ) -> list[Hydration]:
    """One per index the plan creates or whose object it replaces (the object's
    dataflow is built again from its inputs)."""
    rebuilt = {c.name for c in d.changes if c.action in ("create", "replace")}
    live_tables = {(i.schema, i.name): i for i in live.items if i.kind == TABLE}
    by_id = {i.id: i for i in desired.items}
    rate = throughput(live, warehouse)
    out = []
    for index in (i for i in desired.items if i.kind == INDEX and i.cluster_id is not None):
        on = by_id.get(index.on_id or "")
        if index.qualified_name not in rebuilt and (on is None
                                                    or on.qualified_name not in rebuilt):
            continue
        rows = sum(_rows(warehouse, live_tables[t]) for t in _tables(desired, index)
                   if t in live_tables)
        cluster = desired.cluster(index.cluster_id)
        out.append(Hydration(index.qualified_name, cluster.name if cluster else "?", rows,
                             rows / rate if rate else None))
    return out
