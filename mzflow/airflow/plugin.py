"""The Airflow plugin: the mzflow catalog inside the Airflow 3 UI.

Airflow 3 plugins can no longer register operators or hooks (DAG files import
``mzflow.airflow.operators`` directly); what they can add is a FastAPI app served by
the api-server and ``external_views``: pages that Airflow's UI shows in an iframe. The
catalog is an entry of Airflow's navigation (Browse → mzflow catalog) and each DAG has
an "mzflow cluster" tab, which for a cluster's ``mzflow_<cluster>`` DAG shows that
cluster: its indexes with their frontiers (as times) and lag, a lag chart, each view's
tick history and the expectation results of what it reads (ui/data.py, ui/pages.py).
Every endpoint requires Airflow's authentication (ui/auth.py); every link is relative,
so the plugin works under a base URL.

The catalog is read per request (no Spark: an index's frontier comes from its Delta log
via delta-rs), for the home the api-server is configured with (``MZFLOW_HOME`` …).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from mzflow.airflow.ui import auth, data, pages

URL_PREFIX = "/mzflow"

app = FastAPI(title="mzflow catalog")


@app.get("/api/catalog")
def api_catalog(access: auth.AccessDep) -> dict[str, Any]:
    access.plugin()
    return data.catalog_view()


@app.get("/api/cluster/{name}")
def api_cluster(name: str, access: auth.AccessDep) -> dict[str, Any]:
    return _cluster(access, name, None)


@app.get("/", response_class=HTMLResponse)
def page(access: auth.AccessDep) -> str:
    access.plugin()
    return pages.catalog_page(data.catalog_view())


@app.get("/cluster/{name}", response_class=HTMLResponse)
def cluster_page(name: str, access: auth.AccessDep) -> HTMLResponse:
    return _html(access, name, None)


@app.get("/dag/{dag_id}", response_class=HTMLResponse)
def dag_tab(dag_id: str, access: auth.AccessDep) -> HTMLResponse:
    """The tab on every DAG: Airflow puts it on all of them, so a DAG that is not a
    cluster's says so."""
    return _html(access, None, dag_id)


def _cluster(access: auth.Access, name: str | None, dag: str | None) -> dict[str, Any]:
    access.plugin()
    view = data.cluster_view(name, dag=dag)
    if view is None:
        raise HTTPException(404, f"unknown cluster '{name}'" if dag is None
                            else f"'{dag}' is not an mzflow cluster's DAG")
    access.dag(view["cluster"]["dag"])
    return view


def _html(access: auth.Access, name: str | None, dag: str | None) -> HTMLResponse:
    try:
        return HTMLResponse(pages.cluster_page(_cluster(access, name, dag)))
    except HTTPException as e:
        if e.status_code != 404:
            raise
        return HTMLResponse(pages.not_found_page(str(e.detail)), status_code=404)


class MzflowPlugin(AirflowPlugin):
    name = "mzflow"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "mzflow catalog"}]
    # Relative hrefs: Airflow's UI resolves an iframe's src against its <base href>,
    # which carries [api] base_url; "/mzflow/" would escape it.
    external_views = [
        {"name": "mzflow catalog", "href": URL_PREFIX.lstrip("/") + "/",
         "destination": "nav", "category": "browse", "url_route": "mzflow"},
        {"name": "mzflow cluster", "href": URL_PREFIX.lstrip("/") + "/dag/{DAG_ID}",
         "destination": "dag", "url_route": "mzflow-cluster"},
    ]
