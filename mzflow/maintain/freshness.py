"""How fresh each maintained object is: mz_wallclock_lag_history, mz_hydration_statuses,
and the current lag that EXPLAIN shows.

Nothing new is stored. Every tick is one commit of its index's shard, and that commit
holds the time the contents are complete through (``mzflow.ts``) and, in Delta's commit
info, the wall-clock time it was made. A tick's lag is the second minus the first: how
long after that time was written it became readable in the view. Times in mzflow are
the oracle's milliseconds since the epoch, so both are wall-clock.

Times only move when something is written: a view whose inputs have not changed since
its last tick is fresh however old that tick is. Its current lag is the age of the
oldest input commit it does not reflect yet, and zero when there is none (Materialize's
wallclock lag, for a clock that ticks on writes).
"""

from __future__ import annotations

import bisect
import datetime as dt
from pathlib import Path
from typing import Any

from mzflow.catalog.model import INDEX, TABLE, Item, Snapshot
from mzflow.incremental.decide import SECONDS_KEY
from mzflow.storage import paths
from mzflow.storage.delta import ERROR_KEY, TS_KEY, IndexShard, Shard

HISTORY_TICKS = 10_000  # the newest ticks of each object that the lag history shows


def object_id(index: Item) -> str:
    """A materialized view is its default index: its lag is the view's."""
    return index.on_id if index.is_default_index and index.on_id else index.id


def maintained(snap: Snapshot) -> list[Item]:
    return [i for i in snap.items if i.kind == INDEX and i.on_id is not None]


def _ticks(warehouse: Path, index: Item, limit: int | None) -> list[dict[str, Any]]:
    shard = IndexShard(paths.index(warehouse, index.id))
    if not shard.exists():
        return []
    return shard.ticks(limit) if limit is not None else shard.ticks(1 << 30)


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _input_times(snap: Snapshot, warehouse: Path, index: Item) -> list[int]:
    """When the tables the index reads were written, sorted."""
    on = snap.item(index.on_id) if index.on_id else index
    return sorted({ts for table in base_tables(snap, on)
                   for _, ts in Shard(paths.table(warehouse, table.id)).history()})


def lag_history(snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    """(object_id, lag, occurred_at) per tick that committed contents, oldest first per
    object. The lag is how long the oldest write the tick brought in waited to become
    readable: the tick's commit minus the first input write after the previous tick's
    time (zero when the tick brought in no input write)."""
    out = []
    for index in maintained(snap):
        writes = _input_times(snap, warehouse, index)
        previous = None
        for entry in reversed(_ticks(warehouse, index, HISTORY_TICKS)):
            if "timestamp" not in entry or ERROR_KEY in entry or SECONDS_KEY not in entry:
                continue  # the shard's creation, or a tick that failed
            through, committed = int(entry[TS_KEY]), int(entry["timestamp"])
            if previous is not None:
                first = bisect.bisect_right(writes, previous)
                waited = (committed - writes[first]
                          if first < len(writes) and writes[first] <= through else 0)
                out.append((object_id(index), dt.timedelta(milliseconds=max(0, waited)),
                            _utc(committed)))
            previous = through
    return out


def hydration(snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    """(object_id, replica_id, hydrated, hydration_time): hydrated once a tick committed
    its contents; the time is what that first tick took. The replica is the cluster's
    one (mz_cluster_replicas)."""
    out = []
    for index in maintained(snap):
        first = next((e for e in reversed(_ticks(warehouse, index, None))
                      if ERROR_KEY not in e and SECONDS_KEY in e), None)
        seconds = first.get(SECONDS_KEY) if first else None
        out.append((object_id(index), f"r{index.cluster_id}", first is not None,
                    dt.timedelta(seconds=float(seconds)) if seconds else None))
    return out


def global_lag(snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    """mz_wallclock_global_lag: (object_id, lag) of each maintained object now, its
    default index's for a materialized view; NULL before its first tick."""
    now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    return [(object_id(index), current_lag(snap, warehouse, index, now_ms)[1])
            for index in maintained(snap)]


def base_tables(snap: Snapshot, item: Item) -> list[Item]:
    """The tables ``item`` reads, through any views."""
    seen: dict[str, Item] = {}
    todo = [item]
    while todo:
        current = todo.pop()
        for dep in current.depends_on:
            found = next((i for i in snap.items if i.id == dep), None)
            if found is None or found.id in seen:
                continue
            seen[found.id] = found
            todo.append(found)
    return [i for i in seen.values() if i.kind == TABLE]


def current_lag(snap: Snapshot, warehouse: Path, index: Item, now_ms: int
                ) -> tuple[int, dt.timedelta | None]:
    """(the time the index is complete through, its lag now; None: never ticked)."""
    shard = IndexShard(paths.index(warehouse, index.id))
    if not shard.exists():
        return -1, None
    through = shard.good_through()
    if through < 0:
        return through, None
    pending = [ts for ts in _input_times(snap, warehouse, index) if ts > through]
    return through, dt.timedelta(milliseconds=max(0, now_ms - pending[0]) if pending else 0)


def describe(snap: Snapshot, warehouse: Path, index: Item, now_ms: int) -> str:
    """EXPLAIN's line for one maintained index."""
    through, lag = current_lag(snap, warehouse, index, now_ms)
    if lag is None:
        return "Freshness: not hydrated (no tick has committed its contents yet)"
    when = _utc(through).strftime("%Y-%m-%d %H:%M:%S UTC") if through > 0 else "the start"
    if not lag:
        return f"Freshness: complete through {when}; lag 0 s (no input written since)"
    return (f"Freshness: complete through {when}; lag {lag.total_seconds():.1f} s (an input "
            "was written since; the next tick brings it in)")
