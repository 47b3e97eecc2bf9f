"""ON COMMIT through Airflow's data-aware scheduling (issue 36, item 2).

Fast: which assets each cluster's DAG is scheduled on (graph.py's plain data, and the
Airflow DAG built from it, through Airflow's own serializer), and the table watcher's
trigger against real Delta commits made by mzflow's writes. Slow: a real Airflow 3
(api-server, scheduler, dag-processor, triggerer) runs a cluster's DAG on its own after
``mzflow sql`` commits, once for writes that arrive while a run is busy, and the view's
rows then match DuckDB's answer over the same rows.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

_OWN_HOME = throwaway_airflow_home("assets-")

import mzflow  # noqa: E402
from mzflow.airflow import graph  # noqa: E402
from mzflow_dev.airflow_server import AirflowServer, airflow_env  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
LOADER = REPO / "dags" / "mzflow_catalog.py"

CATALOG = """
CREATE CLUSTER c SIZE 'small';
CREATE CLUSTER d SIZE 'small';
CREATE CLUSTER s SIZE 'small';
CREATE CLUSTER x SIZE 'small';
CREATE TABLE t (k int, v int);
CREATE TABLE u (k int, w int);
CREATE TABLE unread (k int);
CREATE VIEW plain AS SELECT k, v FROM t WHERE v > 0;
CREATE MATERIALIZED VIEW a IN CLUSTER c AS SELECT k, v FROM plain;
CREATE MATERIALIZED VIEW b IN CLUSTER c AS SELECT a.k, v, w FROM a JOIN u ON a.k = u.k;
CREATE MATERIALIZED VIEW e IN CLUSTER d AS SELECT a.k, w FROM a JOIN u ON a.k = u.k;
CREATE MATERIALIZED VIEW sched IN CLUSTER s WITH (REFRESH EVERY '1 day') AS SELECT k FROM t;
CREATE INDEX t_by_k IN CLUSTER x ON t (k);
"""


@pytest.fixture(scope="module", autouse=True)
def _restore_logging() -> Iterator[None]:
    with airflow_in_process(_OWN_HOME):
        yield


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("assets") / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG)
    return h


def _snap(home: Path) -> Any:
    with mzflow.connect(str(home)) as conn:
        return conn.store.snapshot()


def test_table_and_index_uris_are_distinct(home: Path) -> None:
    snap = _snap(home)
    t = next(i for i in snap.items if i.name == "t")
    ix = next(i for i in snap.items if i.name == "t_by_k")
    inst = snap.installation_id
    assert graph.table_asset_uri(inst, t) == f"mzflow://{inst}/public/t"
    assert graph.asset_uri(inst, ix) == f"mzflow://{inst}/materialize.public.t_by_k"
    # Two path segments for a table, one for an index: never the same asset.
    assert graph.table_asset_uri(inst, t).count("/") == graph.asset_uri(inst, ix).count("/") + 1


def test_clusters_are_scheduled_on_the_tables_their_on_commit_objects_read(
        home: Path) -> None:
    snap = _snap(home)
    inst = snap.installation_id
    plans = {p.cluster: p for p in graph.cluster_dags(snap)}
    uris = {c: [t.uri for t in p.tables] for c, p in plans.items()}
    # c: a reads t through a plain view; b reads a (same cluster: a task) and u.
    assert uris["c"] == [f"mzflow://{inst}/public/t", f"mzflow://{inst}/public/u"]
    assert plans["c"].upstream_assets == ()
    # d reads a in another cluster (its asset, not t) and u.
    assert uris["d"] == [f"mzflow://{inst}/public/u"]
    assert plans["d"].upstream_assets == (f"mzflow://{inst}/materialize.public.a_primary_idx",)
    # An index on a table follows that table; a scheduled view waits for its schedule.
    assert uris["x"] == [f"mzflow://{inst}/public/t"]
    assert uris["s"] == [] and plans["s"].refresh is not None


def _serialized_schedule(dag: Any) -> dict[str, Any]:
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.to_dict(dag)["dag"]["timetable"]  # type: ignore[no-any-return]


def test_dag_watches_each_table_with_a_write_trigger(home: Path) -> None:
    from airflow.sdk import AssetAny

    from mzflow.airflow import dags
    from mzflow.airflow.triggers import TableWriteTrigger

    snap = _snap(home)
    built = dags.build(snap, home, warehouse=home / "warehouse")
    schedule = built["mzflow_c"].timetable.asset_condition  # type: ignore[attr-defined]
    assert isinstance(schedule, AssetAny)
    ids = {i.name: i.id for i in snap.items}
    watched = {a.uri: a.watchers[0].trigger for a in schedule.objects}
    assert set(watched) == {t.uri for t in graph.cluster_dags(snap)[0].tables}
    for name in ("t", "u"):
        trigger = watched[f"mzflow://{snap.installation_id}/public/{name}"]
        assert isinstance(trigger, TableWriteTrigger)
        assert Path(trigger.log_dir) == home / "warehouse" / ids[name] / "_delta_log"
    # Airflow's serializer keeps the watchers (what the dag-processor stores).
    text = str(_serialized_schedule(built["mzflow_c"]))
    assert "mzflow.airflow.triggers.TableWriteTrigger" in text
    # A scheduled cluster keeps its timetable, without table assets.
    assert "TableWriteTrigger" not in str(_serialized_schedule(built["mzflow_s"]))


class _StateStore:
    """Airflow's asset state store, as the triggerer hands a watcher one."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_trigger_announces_writes_once_per_poll_and_remembers(tmp_path: Path) -> None:
    from mzflow.airflow.triggers import STATE_KEY, TableWriteTrigger
    from mzflow.storage import commits

    h = tmp_path / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute("CREATE TABLE w (k int)")
        item = next(i for i in conn.store.snapshot().items if i.name == "w")
        log = h / "warehouse" / item.id / "_delta_log"
        trigger = TableWriteTrigger(table="materialize.public.w", log_dir=str(log),
                                    poll_interval=0.05)
        state = _StateStore({})
        trigger.asset_state_store = state  # type: ignore[assignment]

        async def two_writes_then_event() -> Any:
            events = trigger.run()
            first = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0.3)  # the watcher starts from the newest commit
            assert not first.done()
            # Both commits block the loop: the next poll finds both.
            conn.execute("INSERT INTO w VALUES (1)")
            conn.execute("INSERT INTO w VALUES (2)")
            event = await asyncio.wait_for(first, 60)
            # The version is recorded after the event is handed over (at least once).
            more = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0.3)
            assert not more.done()  # nothing new written: no event
            more.cancel()
            return event

        event = asyncio.run(two_writes_then_event())
        newest = commits.newest_version(log)
        assert event.payload == {"table": "materialize.public.w", "version": newest,
                                 "at": conn.store.snapshot().read_ts}
        assert state.values[STATE_KEY] == newest
        # A schema change is a commit but no write: not an event.
        conn.execute("ALTER TABLE w ADD COLUMN z int")
        assert commits.writes_after(log, newest) == (newest + 1, None)
        conn.execute("INSERT INTO w VALUES (3, 3)")
        # A restarted watcher announces what was written while it was away.
        again = TableWriteTrigger(table="materialize.public.w", log_dir=str(log),
                                  poll_interval=0.05)
        again.asset_state_store = _StateStore(dict(state.values))  # type: ignore[assignment]

        async def first_event() -> Any:
            events = again.run()
            got = await asyncio.wait_for(events.__anext__(), 60)
            await events.aclose()
            return got

        missed = asyncio.run(first_event())
        assert missed.payload["version"] == newest + 2
        assert missed.payload["at"] == conn.store.snapshot().read_ts


# -- a real Airflow: api-server, scheduler, dag-processor and triggerer ------------------

VIEW = ("CREATE MATERIALIZED VIEW j IN CLUSTER c AS SELECT t.k, sum(v) AS s, count(*) AS n "
        "FROM t JOIN u ON t.k = u.k GROUP BY t.k")


def _mzflow_sql(home: Path, sql: str) -> None:
    out = subprocess.run([sys.executable, "-m", "mzflow.cli", "--home", str(home), "sql",
                          "-c", sql], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def _view_rows(home: Path) -> list[tuple[int, int, int]]:
    """What j's index holds (serializable: no catch-up tick of the read's own)."""
    with mzflow.connect(str(home)) as conn:
        conn.execute("SET transaction_isolation = 'serializable'")
        got = conn.execute("SELECT k, s, n FROM j ORDER BY k")
    return [tuple(int(x) for x in r) for r in got.rows]  # type: ignore[misc]


def _expected(t: list[tuple[int, int]], u: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    import duckdb

    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, v int); CREATE TABLE u (k int, w int)")
    db.executemany("INSERT INTO t VALUES (?, ?)", t)
    db.executemany("INSERT INTO u VALUES (?, ?)", u)
    return [tuple(r) for r in db.execute(  # type: ignore[misc]
        "SELECT t.k, sum(v), count(*) FROM t JOIN u ON t.k = u.k GROUP BY t.k ORDER BY 1"
    ).fetchall()]


def _values(rows: list[tuple[int, int]]) -> str:
    return ", ".join(f"({a}, {b})" for a, b in rows)


def _asset_runs(server: AirflowServer) -> list[dict[str, Any]]:
    return [r for r in server.runs("mzflow_c") if r["run_type"] == "asset_triggered"]


def _done(server: AirflowServer, n: int) -> bool:
    runs = _asset_runs(server)
    return len(runs) >= n and all(r["state"] in ("success", "failed") for r in runs)


@pytest.mark.slow
@pytest.mark.spark
def test_committed_writes_run_the_cluster_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    t_rows, u_rows = [(1, 10), (2, 20)], [(1, 100), (2, 200), (3, 300)]
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE CLUSTER c SIZE 'small'; CREATE TABLE t (k int, v int); "
                     f"CREATE TABLE u (k int, w int); {VIEW}; "
                     f"INSERT INTO t VALUES {_values(t_rows)}; "
                     f"INSERT INTO u VALUES {_values(u_rows)}")
    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(LOADER, af / "dags")
    env = {**os.environ, "MZFLOW_HOME": str(home), "MZFLOW_CLUSTER_SPARK": "in-process"}
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=airflow_env(env, af), check=True,
                   capture_output=True, timeout=600)
    server = AirflowServer(af, env)
    subprocess.run([sys.executable, "-m", "mzflow.cli", "airflow", "sync", "--airflow-home",
                    str(af)], env=server.env, check=True, capture_output=True, timeout=120)
    server.start(triggerer=True)
    try:
        server.wait_for("the DAG", lambda: server.exists("/api/v2/dags/mzflow_c"), 300)
        # Both tables' watchers running in the triggerer.
        server.wait_for("the watchers", lambda: (af / "triggerer.log").read_text(
            errors="replace").count(" starting") >= 2, 300)
        assert _asset_runs(server) == []  # nothing written since: nothing ran

        # One commit through `mzflow sql`: the DAG runs on its own, once.
        t_rows.append((3, 30))
        _mzflow_sql(home, "INSERT INTO t VALUES (3, 30)")
        server.wait_for("the asset-triggered run", lambda: _done(server, 1), 600)
        assert [r["state"] for r in _asset_runs(server)] == ["success"], server.logs()
        assert _view_rows(home) == _expected(t_rows, u_rows)

        # Writes to both tables while a run is busy (its pool emptied, so its tick
        # waits): one run follows, consuming both events, ticking both writes.
        _pool_slots(server, 0)
        busy = server.request("POST", "/api/v2/dags/mzflow_c/dagRuns",
                              {"logical_date": None, "conf": {}})
        t_rows.append((2, 21))
        u_rows.append((1, 101))
        _mzflow_sql(home, "INSERT INTO t VALUES (2, 21)")
        _mzflow_sql(home, "INSERT INTO u VALUES (1, 101)")
        server.wait_for("both writes' events", lambda: len(_table_events(server)) >= 3, 120)
        assert len(_asset_runs(server)) == 1  # deferred: the DAG is at max_active_runs
        _pool_slots(server, 2)
        server.wait_for("the busy run", lambda: server.run_state(
            "mzflow_c", busy["dag_run_id"]), 600)  # type: ignore[index]
        server.wait_for("the run after it", lambda: _done(server, 2), 600)
        runs = _asset_runs(server)
        assert len(runs) == 2 and runs[1]["state"] == "success", server.logs()
        consumed = server.request(
            "GET", f"/api/v2/dags/mzflow_c/dagRuns/{runs[1]['dag_run_id']}/upstreamAssetEvents")
        uris = sorted(e["uri"].rsplit("/", 1)[1]
                      for e in consumed["asset_events"])  # type: ignore[index]
        assert uris == ["t", "u"]
        assert _view_rows(home) == _expected(t_rows, u_rows)
    finally:
        server.stop()


def _pool_slots(server: AirflowServer, slots: int) -> None:
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "pools", "set", "mzflow_c", str(slots), "cluster c"],
                   env=server.env, check=True, capture_output=True, timeout=120)


def _table_events(server: AirflowServer) -> list[dict[str, Any]]:
    got = server.request("GET", "/api/v2/assets/events?limit=100")
    return [e for e in got["asset_events"]  # type: ignore[index]
            if e["uri"].rsplit("/", 2)[1] == "public"]

