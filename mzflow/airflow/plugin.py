"""The Airflow plugin: a view of the mzflow catalog inside the Airflow 3 UI.

Airflow 3 plugins can no longer register operators or hooks (DAG files import
``mzflow.airflow.operators`` directly); what they can add is a FastAPI app served
by the api-server and a link to it in the UI. The app shows, for the home the
api-server is configured with (``MZFLOW_HOME`` …): clusters with their pools and
slots, every maintained index with its frontier and lag — how long the oldest input
write its contents do not reflect has waited (maintain/freshness.py) — a chart per
cluster of each object's lag at its ticks over the last day, and, per object with
expectations, the rows that failed them, the writes or ticks they rejected and the
rows quarantined.

``plugins/mzflow_plugin.py`` is the loader Airflow finds; the catalog is read per
request (no Spark: an index's frontier comes from its Delta log via delta-rs).
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from mzflow.airflow import lagchart

URL_PREFIX = "/mzflow"


def catalog_view(home: str | None = None) -> dict[str, Any]:
    """Clusters, maintained indexes, frontiers and lag of the configured home."""
    from mzflow import config
    from mzflow.airflow.graph import dag_id, pool_name
    from mzflow.catalog import sizes
    from mzflow.catalog.model import INDEX
    from mzflow.catalog.store import Store
    from mzflow.maintain import freshness
    from mzflow.maintain.ticks import index_shard
    from mzflow.quality import docs as quality
    from mzflow.storage.delta import IndexState

    cfg = config.load(home)
    store = Store(cfg.catalog_url)
    try:
        snap = store.snapshot()
        results = store.expectation_results()
    finally:
        store.close()
    names = {c.id: c.name for c in snap.clusters}
    by_id = {i.id: i for i in snap.items}
    now = dt.datetime.now(dt.UTC)
    objects = {freshness.object_id(ix): (by_id[freshness.object_id(ix)].name,
                                         names.get(ix.cluster_id or -1))
               for ix in freshness.maintained(snap)}
    lag_history = [{"object": objects[o][0], "cluster": objects[o][1],
                    "lag_s": lag.total_seconds(), "occurred_at": at.isoformat()}
                   for o, lag, at in freshness.lag_history(snap, cfg.warehouse)
                   if o in objects and at >= now - lagchart.DAY]
    indexes = []
    for ix in snap.items:
        if ix.kind != INDEX or ix.on_id is None:
            continue
        shard = index_shard(cfg.warehouse, ix)
        done, error, _ = shard.state() if shard.exists() else IndexState(-1)
        lag = freshness.current_lag(snap, cfg.warehouse, ix, int(now.timestamp() * 1000))[1]
        indexes.append({
            "index": ix.name, "on": by_id[ix.on_id].name,
            "cluster": names.get(ix.cluster_id or -1),
            # upper: the first time not yet reflected; -1 + 1 = 0 means never ticked
            "upper": done + 1,
            # how long the oldest input write it does not reflect has waited (0: current)
            "lag_ms": int(lag.total_seconds() * 1000) if lag is not None else None,
            "error": error})
    clusters = [{"name": c.name, "size": "virtual" if c.virtual else c.size or sizes.DEFAULT_SIZE,
                 "pool": pool_name(c.name),
                 "slots": sizes.of_cluster(c.virtual, c.size).pool_slots,
                 "dag": dag_id(c.name)} for c in snap.clusters]
    return {"home": str(cfg.home), "read_ts": snap.read_ts, "clusters": clusters,
            "indexes": indexes, "quality": quality.summary(snap, cfg.warehouse, results),
            "lag_history": lag_history}


app = FastAPI(title="mzflow catalog")


@app.get("/api/catalog")
def api_catalog() -> dict[str, Any]:
    return catalog_view()


@app.get("/", response_class=HTMLResponse)
def page() -> str:
    view = catalog_view()
    return (f"<html><head><title>mzflow catalog</title>{_STYLE}</head><body>"
            f"<h2>mzflow catalog</h2><p>home <code>{html.escape(view['home'])}</code>, "
            f"every write committed through {view['read_ts']}</p>"
            + _table("Clusters", ["name", "size", "pool", "slots", "dag"], view["clusters"])
            + _table("Maintained indexes", ["index", "on", "cluster", "upper", "lag_ms",
                                            "error"], view["indexes"])
            + _table("Data quality", ["object", "expectations", "batches", "failed_rows",
                                      "rejected", "quarantined_rows", "in_quarantine"],
                     view["quality"])
            + _lag_charts(view["lag_history"])
            + "</body></html>")


def _lag_charts(history: list[dict[str, Any]]) -> str:
    now = dt.datetime.now(dt.UTC)
    start = now - lagchart.DAY
    by_cluster: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in history:
        at = dt.datetime.fromisoformat(r["occurred_at"])
        by_cluster.setdefault(r["cluster"] or "?", {}).setdefault(r["object"], []).append(
            ((at - start).total_seconds(), r["lag_s"]))
    return lagchart.section(by_cluster, now)


def _table(title: str, cols: list[str], rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(
        f"<td>{html.escape('' if r[c] is None else str(r[c]))}</td>" for c in cols) + "</tr>"
        for r in rows)
    return f"<h3>{html.escape(title)}</h3><table><tr>{head}</tr>{body}</table>"


_STYLE = ("<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}</style>")


class MzflowPlugin(AirflowPlugin):
    name = "mzflow"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "mzflow catalog"}]
    external_views = [{"name": "mzflow catalog", "href": f"{URL_PREFIX}/",
                       "destination": "nav", "category": "browse", "url_route": "mzflow"}]
