"""The plugin inside Airflow 3's UI (issue 36, item 7): a page per cluster, frontiers as
times, the lag chart's axes, each view's tick history, expectation results, relative
links, and endpoints that require Airflow's authentication.

The pure parts (ui/data.py, ui/pages.py, lagchart.py) are tested on a home alone; the
endpoints through Airflow's own auth manager in-process (a real JWT, signed and checked
by Airflow); and, marked slow, a real api-server that a headless Chromium clicks through.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

_AIRFLOW_HOME = throwaway_airflow_home("ui-")
# Airflow signs and checks the UI's tokens with this (read per use, not at import).
os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "mzflow-ui-test-" + "k" * 64)

import mzflow  # noqa: E402
from mzflow.airflow import lagchart  # noqa: E402
from mzflow.airflow.ui import data, pages  # noqa: E402
from mzflow.incremental.decide import (  # noqa: E402
    EXECUTOR_KEY,
    MODE_KEY,
    READ_KEY,
    SECONDS_KEY,
)
from mzflow.storage.delta import ERROR_KEY, TS_KEY  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
CATALOG = """
CREATE CLUSTER a SIZE 'small';
CREATE CLUSTER b SIZE 'medium';
CREATE TABLE t (k int, v int);
CREATE TABLE u (x int);
CREATE MATERIALIZED VIEW m1 IN CLUSTER a AS SELECT k, v FROM t WHERE v > 0;
CREATE MATERIALIZED VIEW m2 IN CLUSTER b AS SELECT count(*) AS n FROM u;
ALTER TABLE t ADD CONSTRAINT pos EXPECT (v > 0) ON VIOLATION QUARANTINE;
"""


@pytest.fixture(scope="module", autouse=True)
def _airflow_cleanup() -> Iterator[None]:
    with airflow_in_process(_AIRFLOW_HOME):
        yield


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG)
        conn.execute("INSERT INTO t VALUES (1, 5), (2, -1)")
    return h


# -- pure data ---------------------------------------------------------------------------


def test_frontiers_are_times() -> None:
    ms = 1_790_000_123_456
    want = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    assert data.as_time(ms) == f"{want:%Y-%m-%d %H:%M:%S}.456 UTC"
    assert data.as_time(0) == "1970-01-01 00:00:00.000 UTC"
    assert data.as_time(-1) is None and data.as_time(None) is None


def test_tick_history_reads_what_ticks_record_in_commit_info() -> None:
    newest_first = [
        {TS_KEY: "30", "timestamp": 3000, ERROR_KEY: "division by zero"},
        {TS_KEY: "20", "timestamp": 2000, MODE_KEY: "incremental", EXECUTOR_KEY: "local",
         SECONDS_KEY: "0.250", READ_KEY: "12"},
        {TS_KEY: "10", "timestamp": 1000, MODE_KEY: "rebuild", EXECUTOR_KEY: "spark",
         SECONDS_KEY: "4.000", READ_KEY: "1000"},
        {TS_KEY: "-1", "timestamp": 500},  # the shard's creation: not a tick
    ]
    rows = data.tick_history(newest_first)
    assert [(r["through"], r["mode"], r["executor"], r["seconds"], r["rows_read"], r["error"])
            for r in rows] == [(30, None, None, None, None, "division by zero"),
                               (20, "incremental", "local", 0.25, 12, None),
                               (10, "rebuild", "spark", 4.0, 1000, None)]
    assert rows[1]["through_time"] == data.as_time(20)
    assert rows[1]["committed_time"] == data.as_time(2000)


def test_tick_history_keys_are_the_ones_a_tick_commits() -> None:
    """The keys read are those maintain/tick/commit.py writes (no drift)."""
    from mzflow.incremental.decide import Decision
    from mzflow.incremental.modes import Mode
    from mzflow.maintain.tick.commit import metadata
    from mzflow.maintain.tick.execute import Counters

    n = Counters(rows_read=7, input_rows=1000)  # read 7 of its inputs' 1000 rows
    meta = metadata(Decision(Mode.DELTA), 3, 7, n, 1.5, "", None)
    (row,) = data.tick_history([{TS_KEY: "4", "timestamp": 9, **meta, EXECUTOR_KEY: "local"}])
    assert (row["mode"], row["seconds"], row["rows_read"], row["executor"]) == (
        "delta", 1.5, 7, "local")


def test_lag_chart_has_axes_with_units() -> None:
    now = dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=dt.UTC)
    day = lagchart.DAY.total_seconds()
    svg = lagchart.svg({"m1": [(day - 3600, 2.0), (day - 60, 8.0)]}, now)
    yticks = re.findall(r'class="ytick"[^>]*>([^<]*)</text>', svg)
    xticks = re.findall(r'class="xtick"[^>]*>([^<]*)</text>', svg)
    assert yticks == [f"{8.0 * q / lagchart.TICKS:.3g} s" for q in range(lagchart.TICKS + 1)]
    first = now - dt.timedelta(seconds=3600)
    assert xticks[0] == f"{first:%H:%M:%S}" and xticks[-1] == f"{now:%H:%M:%S}"
    assert len(xticks) == lagchart.TICKS + 1
    assert ">lag (s)</text>" in svg and f">time (UTC, {first:%Y-%m-%d})</text>" in svg


# -- views of a home ---------------------------------------------------------------------


def test_cluster_view_holds_its_indexes_and_the_expectations_they_read(home: Path) -> None:
    a = data.cluster_view("a", str(home))
    assert a is not None and a["cluster"]["dag"] == "mzflow_a"
    assert [i["index"] for i in a["indexes"]] == ["m1_primary_idx"]
    assert a["indexes"][0]["frontier"] is None and a["indexes"][0]["upper"] == 0  # no tick
    assert a["ticks"] == {"m1_primary_idx": []}
    assert [(q["object"], q["failed_rows"], q["quarantined_rows"]) for q in a["quality"]] == [
        ("t", 1, 1)]
    b = data.cluster_view(home=str(home), dag="mzflow_b")
    assert b is not None and b["cluster"]["name"] == "b"
    assert [i["index"] for i in b["indexes"]] == ["m2_primary_idx"]
    assert b["quality"] == []  # m2 reads u, which has no expectations
    assert data.cluster_view("nope", str(home)) is None
    assert data.cluster_view(home=str(home), dag="some_other_dag") is None


def _hrefs(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


def test_pages_link_relatively_so_a_base_url_holds(home: Path) -> None:
    catalog = pages.catalog_page(data.catalog_view(str(home)))
    cluster = data.cluster_view("a", str(home))
    assert cluster is not None
    page = pages.cluster_page(cluster)
    assert "Tick history" in page and "Data quality: expectation results" in page
    base = "https://example.org/airflow/"  # Airflow under [api] base_url
    for at, html in [("mzflow/", catalog), ("mzflow/cluster/a", page),
                     ("mzflow/dag/mzflow_a", page)]:
        links = _hrefs(html)
        assert links and not [h for h in links if h.startswith(("/", "http:", "https:"))]
        for h in links:
            assert urljoin(urljoin(base, at), h).startswith(base), (at, h)
    resolved = {urljoin(urljoin(base, "mzflow/"), h) for h in _hrefs(catalog)}
    assert {base + "mzflow/cluster/a", base + "dags/mzflow_a"} <= resolved
    resolved = {urljoin(urljoin(base, "mzflow/dag/mzflow_a"), h) for h in _hrefs(page)}
    assert {base + "mzflow/", base + "mzflow/cluster/b", base + "dags/mzflow_a"} <= resolved


def test_plugin_is_in_airflows_navigation_and_on_each_dag() -> None:
    from mzflow.airflow.plugin import MzflowPlugin

    views = {v["destination"]: v for v in MzflowPlugin.external_views}
    assert views["nav"]["href"] == "mzflow/" and views["dag"]["href"] == "mzflow/dag/{DAG_ID}"
    assert MzflowPlugin.fastapi_apps[0]["url_prefix"] == "/mzflow"


# -- authentication, through Airflow's own auth manager -----------------------------------


@pytest.fixture
def client(home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin's app with Airflow's (simple) auth manager, as the api-server sets it up;
    its token revocation table is the only part of Airflow's database a check reads."""
    from airflow import settings
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.models.revoked_token import RevokedToken
    from fastapi.testclient import TestClient

    from mzflow.airflow.plugin import app

    monkeypatch.setenv("MZFLOW_HOME", str(home))
    # The auth manager appends to its password file, by default in the AIRFLOW_HOME this
    # process's Airflow read at import: another module's throwaway home, possibly gone by
    # now (CI at stop 49: FileNotFoundError). A file of this test's own does not depend
    # on which module imported Airflow first.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
                       str(home.parent / "passwords.json.generated"))
    RevokedToken.__table__.create(settings.engine, checkfirst=True)  # type: ignore[attr-defined]
    client = TestClient(app)
    client.auth_manager = init_auth_manager()
    return client


def _token(client: Any, role: str | None) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return client.auth_manager.generate_jwt(  # type: ignore[no-any-return]
        SimpleAuthManagerUser(username="someone", role=role))


ROUTES = ["/", "/api/catalog", "/cluster/a", "/api/cluster/a", "/dag/mzflow_a"]


def test_endpoints_require_airflows_authentication(client: Any) -> None:
    for path in ROUTES:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer forged"}).status_code == 403
        assert client.get(path, cookies={"_token": "forged"}).status_code == 403
    # A valid token of a user without a role: Airflow's auth manager refuses it.
    nobody = _token(client, None)
    for path in ROUTES:
        got = client.get(path, headers={"Authorization": f"Bearer {nobody}"})
        assert got.status_code == 403, path
    viewer = _token(client, "viewer")
    for path in ROUTES:  # by bearer token (the REST way) and by the UI's cookie
        assert client.get(path, headers={"Authorization": f"Bearer {viewer}"}).status_code == 200
        client.cookies.set("_token", viewer)
        assert client.get(path).status_code == 200, path
        client.cookies.clear()


def test_authenticated_views_show_times_ticks_and_quality(client: Any) -> None:
    client.cookies.set("_token", _token(client, "viewer"))
    view = client.get("/api/catalog").json()
    assert {c["name"]: c["dag"] for c in view["clusters"]} == {
        "default": "mzflow_default", "a": "mzflow_a", "b": "mzflow_b"}
    assert view["read_time"] == data.as_time(view["read_ts"])
    a = client.get("/api/cluster/a").json()
    assert [q["object"] for q in a["quality"]] == ["t"]
    page = client.get("/dag/mzflow_a").text
    assert "<h2>cluster a</h2>" in page and "m1_primary_idx" in page
    assert "<h4>m1_primary_idx</h4><p>No tick yet.</p>" in page
    other = client.get("/dag/not_ours")
    assert other.status_code == 404 and "not an mzflow cluster&#x27;s DAG" in other.text
    assert client.get("/api/cluster/nope").status_code == 404


# -- a real api-server, clicked through by a headless Chromium -----------------------------


@pytest.mark.slow
@pytest.mark.spark
def test_chromium_clicks_through_the_plugin_under_a_base_url(tmp_path: Path) -> None:
    """Airflow served under ``/af`` ([api] base_url with a path): from Airflow's
    navigation to the catalog, a click to cluster a's page (its tick), and the
    "mzflow cluster" tab of mzflow_a's DAG. Without Chromium this fails, never skips."""
    import urllib.error
    import urllib.request

    from mzflow_dev.airflow_server import AirflowServer
    from mzflow_dev.cdp import MISSING, chromium, find_chromium

    browser_bin = find_chromium()
    if browser_bin is None:
        pytest.fail(MISSING)
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute(CATALOG)
        conn.execute("INSERT INTO t VALUES (1, 5), (2, -1), (3, 4)")
    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(REPO / "dags" / "mzflow_catalog.py", af / "dags")
    server = AirflowServer(af, {**os.environ, "MZFLOW_HOME": str(home)})
    root = server.base
    server.base = root + "/af"
    # A real login, not AirflowServer's everyone-is-admin mode (whose middleware hands
    # every request an admin token, so nothing could be refused).
    (af / "passwords.json").write_text('{"admin": "s3cret"}')
    server.env.update({"AIRFLOW__API__BASE_URL": server.base + "/",
                       "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{server.base}/execution/",
                       "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                       "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                       "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE":
                           str(af / "passwords.json")})
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=server.env, check=True,
                   capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "mzflow.cli", "--home", str(home), "airflow", "sync",
                    "--airflow-home", str(af)], env=server.env, check=True,
                   capture_output=True, timeout=120)
    server.start()
    try:
        server.wait_for("the api-server", lambda: urllib.request.urlopen(
            server.base + "/api/v2/monitor/health", timeout=10).status == 200, 300)
        token = server.request("POST", "/auth/token", {"username": "admin",
                                                       "password": "s3cret"})
        server._token = token["access_token"]  # type: ignore[index]
        server.wait_for("the DAG", lambda: server.exists("/api/v2/dags/mzflow_a"), 300)
        # Retried: on SQLite, the dag-processor's writes can lock the trigger out (500).
        run = server.wait_for("a run of mzflow_a", lambda: server.request(
            "POST", "/api/v2/dags/mzflow_a/dagRuns", {"logical_date": None, "conf": {}}), 120)
        state = server.wait_for("mzflow_a's run", lambda: server.run_state(
            "mzflow_a", run["dag_run_id"]), 600)  # type: ignore[index]
        assert state == "success", server.logs()
        with mzflow.connect(str(home)) as conn:
            (in_t,), = conn.execute("SELECT count(*) FROM t").rows
        # Unauthenticated requests to the real server are refused.
        for path in ("/mzflow/", "/mzflow/api/catalog", "/mzflow/dag/mzflow_a"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(server.base + path, timeout=30)
            assert refused.value.code == 401, path

        with chromium(browser_bin) as page:
            # Logged in as the UI is: Airflow's JWT in the _token cookie.
            page.send("Network.setCookie", name="_token", value=server._token,
                      url=root + "/", path="/")
            page.goto(f"{server.base}/plugin/mzflow")

            def frame(suffix: str, text: str) -> str | None:
                for f in page.frames()[1:]:
                    if f["url"].endswith(suffix) and text in (page.evaluate(
                            "document.body ? document.body.innerText : ''", f["id"]) or ""):
                        return f["id"]  # type: ignore[no-any-return]
                return None

            catalog = page.wait_for("the catalog in Airflow's page", lambda: frame(
                "/af/mzflow/", "Maintained indexes"))
            # Inside Airflow's page (which mirrors the iframe's path after its own).
            assert page.evaluate("location.pathname").startswith("/af/plugin/mzflow")
            page.screenshot(tmp_path / "catalog.png")
            page.evaluate("[...document.querySelectorAll('a')]"
                          ".find(a => a.textContent === 'a').click()", catalog)
            cluster = page.wait_for("cluster a's page", lambda: frame(
                "/af/mzflow/cluster/a", "Tick history"))
            ticks = page.evaluate(
                "[...document.querySelectorAll('table')].find(t => t.previousElementSibling"
                ".textContent === 'm1_primary_idx').innerText", cluster)
            header, *rows = ticks.splitlines()
            cols = header.split("\t")
            assert cols[:6] == ["complete through", "committed", "mode", "executor", "seconds",
                                "rows read"]
            first = dict(zip(cols, rows[-1].split("\t"), strict=False))
            # The first tick read all of t (the row that broke `pos` went to quarantine).
            # (executor: recorded by incremental ticks only, not by this first recompute)
            assert first["mode"] == "recompute" and float(first["seconds"]) > 0
            assert first["rows read"] == str(in_t) and first["complete through"].endswith(" UTC")
            cell = page.evaluate("document.querySelector('table td:nth-child(4)').innerText",
                                 cluster)
            assert cell.endswith(" UTC")  # the frontier, as a time
            # The tab on the DAG's page.
            page.goto(f"{server.base}/dags/mzflow_a")
            page.wait_for("the DAG's mzflow tab", lambda: page.evaluate(
                "[...document.querySelectorAll('a,button')]"
                ".some(e => e.textContent.trim() === 'mzflow cluster')"))
            page.evaluate("[...document.querySelectorAll('a,button')]"
                          ".find(e => e.textContent.trim() === 'mzflow cluster').click()")
            page.wait_for("cluster a in the DAG's tab", lambda: frame(
                "/af/mzflow/dag/mzflow_a", "cluster a"))
            page.screenshot(tmp_path / "cluster.png")
            assert (tmp_path / "catalog.png").stat().st_size > 10_000
        # The browser's whole process group is gone (its renderers outlived it once).
        with pytest.raises(ProcessLookupError):
            os.killpg(page.pgid, 0)
    finally:
        server.stop()
