"""The plugin's HTML: the catalog (``/mzflow/``) and a page per cluster
(``/mzflow/cluster/<name>``, and ``/mzflow/dag/<dag id>`` as a tab of its DAG).

No JavaScript and no CDN (the api-server may be offline); inline SVG for the charts.
Every link is relative: Airflow's UI shows these pages in an iframe whose ``src`` is
resolved against its ``<base href>``, so under a base URL (``[api] base_url``) the
plugin's own links must not start with ``/``. Pages one level down (a cluster's) reach
the catalog with ``../`` and Airflow's own pages with ``../../`` (``target=_top``, out
of the iframe).
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any
from urllib.parse import quote

from mzflow.airflow import lagchart

TICK_COLUMNS = ["through_time", "committed_time", "mode", "executor", "seconds",
                "rows_read", "reason", "error"]
INDEX_COLUMNS = ["index", "on", "cluster", "frontier", "lag_s", "error"]
QUALITY_COLUMNS = ["object", "expectations", "batches", "failed_rows", "rejected",
                   "quarantined_rows", "in_quarantine"]
_HEADINGS = {"through_time": "complete through", "committed_time": "committed",
             "seconds": "seconds", "rows_read": "rows read", "lag_s": "lag (s)",
             "frontier": "complete through", "failed_rows": "failed rows",
             "quarantined_rows": "quarantined rows", "in_quarantine": "in quarantine"}


def catalog_page(view: dict[str, Any]) -> str:
    """The catalog: clusters (each linking to its page), indexes, data quality, lag."""
    clusters = [{**c, "name": _link(f"cluster/{quote(c['name'], safe='')}", c["name"]),
                 "dag": _link(f"../dags/{quote(c['dag'], safe='')}", c["dag"], top=True)}
                for c in view["clusters"]]
    return _page("mzflow catalog", "<h2>mzflow catalog</h2>" + _header(view) + (
        _table("Clusters", ["name", "size", "pool", "slots", "dag"], clusters, raw=True)
        + _table("Maintained indexes", INDEX_COLUMNS, view["indexes"])
        + _table("Data quality: expectation results", QUALITY_COLUMNS, view["quality"])
        + _lag_charts(view["lag_history"])))


def cluster_page(view: dict[str, Any]) -> str:
    """One cluster: its indexes, lag chart, tick history per view and expectations."""
    c = view["cluster"]
    nav = " · ".join([_link("../", "all clusters")] + [
        _link(f"../cluster/{quote(n, safe='')}", n) for n in view["clusters"]
        if n != c["name"]])
    body = [f"<p class='nav'>{nav}</p>", _header(view),
            f"<p>size {html.escape(str(c['size']))}, pool <code>{html.escape(c['pool'])}"
            f"</code> ({c['slots']} slots), DAG "
            + _link(f"../../dags/{quote(c['dag'], safe='')}", c["dag"], top=True) + "</p>",
            _table("Maintained indexes", INDEX_COLUMNS, view["indexes"]),
            _lag_charts(view["lag_history"]),
            "<h3>Tick history</h3>"]
    if not view["ticks"]:
        body.append("<p>No maintained index on this cluster.</p>")
    for name, ticks in sorted(view["ticks"].items()):
        body.append(_table(f"{name}", TICK_COLUMNS, ticks, level=4, empty="No tick yet."))
    body.append(_table("Data quality: expectation results", QUALITY_COLUMNS, view["quality"],
                       empty="No expectation on what this cluster reads."))
    return _page(f"mzflow cluster {c['name']}", f"<h2>cluster {html.escape(c['name'])}</h2>"
                 + "".join(body))


def not_found_page(what: str) -> str:
    return _page("mzflow", f"<p class='nav'>{_link('../', 'all clusters')}</p>"
                           f"<p>{html.escape(what)}</p>")


def _header(view: dict[str, Any]) -> str:
    read = view.get("read_time") or "no write yet"
    return (f"<p>home <code>{html.escape(view['home'])}</code>, every write committed "
            f"through <time>{html.escape(read)}</time></p>")


def _link(href: str, text: str, top: bool = False) -> str:
    target = ' target="_top"' if top else ""
    return f'<a href="{html.escape(href)}"{target}>{html.escape(text)}</a>'


def _lag_charts(history: list[dict[str, Any]]) -> str:
    now = dt.datetime.now(dt.UTC)
    start = now - lagchart.DAY
    by_cluster: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in history:
        at = dt.datetime.fromisoformat(r["occurred_at"])
        by_cluster.setdefault(r["cluster"] or "?", {}).setdefault(r["object"], []).append(
            ((at - start).total_seconds(), r["lag_s"]))
    return lagchart.section(by_cluster, now)


def _table(title: str, cols: list[str], rows: list[dict[str, Any]], *, raw: bool = False,
           level: int = 3, empty: str = "None.") -> str:
    """``raw``: the name column holds HTML already escaped (a link)."""
    out = f"<h{level}>{html.escape(title)}</h{level}>"
    if not rows:
        return out + f"<p>{html.escape(empty)}</p>"
    head = "".join(f"<th>{html.escape(_HEADINGS.get(c, c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r[c], raw and c in ('name', 'dag'))}</td>"
                                    for c in cols) + "</tr>" for r in rows)
    return out + f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any, raw: bool) -> str:
    if raw:
        return str(value)
    return html.escape("" if value is None else str(value))


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title>{_STYLE}</head><body>{body}</body></html>")


_STYLE = ("<style>body{font-family:sans-serif;margin:1.5em;color:#222}"
          "table{border-collapse:collapse;margin-bottom:1em}"
          "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
          "th{background:#f3f3f3}.nav a{margin-right:.3em}</style>")
