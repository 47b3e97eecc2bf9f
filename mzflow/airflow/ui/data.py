"""What the plugin shows, as plain dicts: no Airflow, no HTML, no Spark (an index's
frontier and its ticks come from its Delta log through delta-rs), so each function is
testable on a home alone.

Times in mzflow are the oracle's milliseconds since the epoch; the UI shows them as
UTC times (``as_time``), keeping the milliseconds beside them in the JSON.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from mzflow.airflow import lagchart
from mzflow.catalog.model import INDEX, Item, Snapshot

TICKS_SHOWN = 50  # the newest ticks per view on a cluster's page


def as_time(ms: int | None) -> str | None:
    """Epoch milliseconds as a UTC time; None (never) stays None."""
    if ms is None or ms < 0:
        return None
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} UTC"


def tick_history(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per tick commit (newest first, as ``IndexShard.ticks`` returns them):
    what the tick recorded in Delta's commit info (maintain/tick/commit.py)."""
    from mzflow.incremental.decide import EXECUTOR_KEY, MODE_KEY, READ_KEY, REASON_KEY, SECONDS_KEY
    from mzflow.storage.delta import ERROR_KEY, TS_KEY

    out = []
    for e in entries:
        if SECONDS_KEY not in e and ERROR_KEY not in e:
            continue  # the shard's creation or a compaction: not a tick
        through = int(e[TS_KEY])
        out.append({"through": through, "through_time": as_time(through),
                    "committed_time": as_time(int(e["timestamp"])) if "timestamp" in e else None,
                    "mode": e.get(MODE_KEY), "executor": e.get(EXECUTOR_KEY),
                    "seconds": float(e[SECONDS_KEY]) if SECONDS_KEY in e else None,
                    # ticks committed before rows read were recorded show none
                    "rows_read": int(e[READ_KEY]) if READ_KEY in e else None,
                    "reason": e.get(REASON_KEY), "error": e.get(ERROR_KEY)})
    return out


def _load(home: str | None) -> tuple[Any, Snapshot, list[tuple[Any, ...]]]:
    from mzflow import config
    from mzflow.catalog.store import Store

    cfg = config.load(home)
    store = Store(cfg.catalog_url)
    try:
        return cfg, store.snapshot(), store.expectation_results()
    finally:
        store.close()


def _index_row(snap: Snapshot, warehouse: Path, ix: Item, now_ms: int) -> dict[str, Any]:
    from mzflow.maintain import freshness
    from mzflow.maintain.ticks import index_shard
    from mzflow.storage.delta import IndexState

    by_id = {i.id: i for i in snap.items}
    names = {c.id: c.name for c in snap.clusters}
    shard = index_shard(warehouse, ix)
    done, error, _ = shard.state() if shard.exists() else IndexState(-1)
    lag = freshness.current_lag(snap, warehouse, ix, now_ms)[1]
    return {"index": ix.name, "on": by_id[ix.on_id].name if ix.on_id else None,
            "cluster": names.get(ix.cluster_id or -1),
            # upper: the first time not yet reflected; -1 + 1 = 0 means never ticked
            "upper": done + 1,
            # the time its contents are complete through, as a time (None: never ticked)
            "frontier": as_time(done) if done >= 0 else None,
            # how long the oldest input write it does not reflect has waited (0: current)
            "lag_ms": int(lag.total_seconds() * 1000) if lag is not None else None,
            "lag_s": round(lag.total_seconds(), 3) if lag is not None else None,
            "error": error}


def _lag_history(snap: Snapshot, warehouse: Path, now: dt.datetime) -> list[dict[str, Any]]:
    from mzflow.maintain import freshness

    names = {c.id: c.name for c in snap.clusters}
    by_id = {i.id: i for i in snap.items}
    objects = {freshness.object_id(ix): (by_id[freshness.object_id(ix)].name,
                                         names.get(ix.cluster_id or -1))
               for ix in freshness.maintained(snap)}
    return [{"object": objects[o][0], "cluster": objects[o][1],
             "lag_s": lag.total_seconds(), "occurred_at": at.isoformat()}
            for o, lag, at in freshness.lag_history(snap, warehouse)
            if o in objects and at >= now - lagchart.DAY]


def catalog_view(home: str | None = None) -> dict[str, Any]:
    """Clusters, maintained indexes, frontiers, lag and expectation results of a home."""
    from mzflow.airflow.graph import dag_id, pool_name
    from mzflow.catalog import sizes
    from mzflow.quality import docs as quality

    cfg, snap, results = _load(home)
    now = dt.datetime.now(dt.UTC)
    now_ms = int(now.timestamp() * 1000)
    indexes = [_index_row(snap, cfg.warehouse, ix, now_ms) for ix in snap.items
               if ix.kind == INDEX and ix.on_id is not None]
    clusters = [{"name": c.name, "size": "virtual" if c.virtual else c.size or sizes.DEFAULT_SIZE,
                 "pool": pool_name(c.name),
                 "slots": sizes.of_cluster(c.virtual, c.size).pool_slots,
                 "dag": dag_id(c.name)} for c in snap.clusters]
    return {"home": str(cfg.home), "read_ts": snap.read_ts, "read_time": as_time(snap.read_ts),
            "clusters": clusters, "indexes": indexes,
            "quality": quality.summary(snap, cfg.warehouse, results),
            "lag_history": _lag_history(snap, cfg.warehouse, now)}


def cluster_view(cluster: str | None = None, home: str | None = None, *,
                 dag: str | None = None) -> dict[str, Any] | None:
    """One cluster's page, by its name or its generated DAG's id: its indexes with their
    frontiers and tick history, the lag of its objects over the last day, and the
    expectation results of what they read. None when there is no such cluster."""
    from mzflow.maintain import freshness
    from mzflow.maintain.ticks import index_shard

    view = catalog_view(home)
    found = next((c for c in view["clusters"]
                  if (c["name"] == cluster if dag is None else c["dag"] == dag)), None)
    if found is None:
        return None
    cluster = found["name"]
    cfg, snap, _ = _load(home)
    cid = next(c.id for c in snap.clusters if c.name == cluster)
    mine = [ix for ix in freshness.maintained(snap) if ix.cluster_id == cid]
    ticks = {}
    read: set[str] = set()
    for ix in mine:
        shard = index_shard(cfg.warehouse, ix)
        ticks[ix.name] = tick_history(shard.ticks(TICKS_SHOWN) if shard.exists() else [])
        on = snap.item(ix.on_id) if ix.on_id else ix
        read |= {on.name} | {t.name for t in freshness.base_tables(snap, on)}
    return {"home": view["home"], "read_time": view["read_time"], "cluster": found,
            "clusters": [c["name"] for c in view["clusters"]],
            "indexes": [i for i in view["indexes"] if i["cluster"] == cluster],
            "ticks": ticks,
            "quality": [q for q in view["quality"] if q["object"] in read],
            "lag_history": [r for r in view["lag_history"] if r["cluster"] == cluster]}
