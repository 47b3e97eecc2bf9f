"""Airflow: DAGs and pools generated from the catalog, and ticks run through Airflow.

Airflow reads AIRFLOW_HOME and its database URL once, when first imported, so this
module points both at a throwaway folder before anything imports Airflow. One
``airflow db migrate`` (about 3.5 s) serves the whole session; tests that run Airflow
in a child process copy that database into their own home.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

_AIRFLOW_HOME = throwaway_airflow_home(reuse=False)
assert _AIRFLOW_HOME is not None

from scenario import expect_result  # noqa: E402

import mzflow  # noqa: E402
from mzflow.airflow import graph, pools  # noqa: E402
from mzflow_dev.airflow_server import AirflowServer, airflow_env, parse_dag_file  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
LOADER = REPO / "dags" / "mzflow_catalog.py"

CATALOG = """
CREATE CLUSTER a SIZE 'small';
CREATE CLUSTER b SIZE 'medium';
CREATE TABLE t (k int, v int);
CREATE VIEW v0 AS SELECT k, v FROM t WHERE v > 0;
CREATE MATERIALIZED VIEW m1 IN CLUSTER a AS SELECT k, v FROM v0;
CREATE VIEW plain AS SELECT k, v * 2 AS w FROM m1;
CREATE MATERIALIZED VIEW m2 IN CLUSTER a AS SELECT k, w FROM plain;
CREATE MATERIALIZED VIEW m3 IN CLUSTER b AS SELECT k, count(*) AS n FROM m2 GROUP BY k;
CREATE INDEX m1_by_v IN CLUSTER a ON m1 (v);
CREATE INDEX t_by_k IN CLUSTER b ON t (k);
CREATE INDEX v0_by_k IN CLUSTER a ON v0 (k);
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG)
    return h


# -- generation (no Airflow database needed) ---------------------------------------------


def test_graph_orders_tasks_and_links_clusters_by_assets(home: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        snap = conn.store.snapshot()
    dags = {d.cluster: d for d in graph.cluster_dags(snap)}
    assert set(dags) == {"a", "b"}  # 'default' maintains nothing: a pool, but no DAG
    a, b = dags["a"], dags["b"]
    assert (a.dag_id, a.pool, a.slots, b.pool, b.slots) == (
        "mzflow_a", "mzflow_a", 2, "mzflow_b", 4)
    # v0_by_k was created last but m1 reads v0: the order follows reads, not creation.
    assert [t.task_id for t in a.tasks] == ["v0_by_k", "m1", "m1_by_v", "m2"]
    up = {t.task_id: t.upstream for t in a.tasks}
    assert up == {"v0_by_k": (), "m1": ("v0_by_k",), "m1_by_v": ("v0_by_k",),
                  # m2 reads m1 through the plain view: both of m1's indexes come first
                  "m2": ("m1", "m1_by_v")}
    m3 = next(t for t in b.tasks if t.task_id == "m3")
    assert m3.index == "m3_primary_idx" and m3.upstream == ()
    m2 = next(t for t in a.tasks if t.task_id == "m2")
    assert m3.upstream_assets == (m2.asset,)
    assert m2.asset == f"mzflow://{snap.installation_id}/materialize.public.m2_primary_idx"
    # An index on a table has no inputs to wait for.
    assert next(t for t in b.tasks if t.task_id == "t_by_k").upstream_assets == ()
    assert graph.pools(snap) == {"mzflow_default": 2, "mzflow_a": 2, "mzflow_b": 4}


def test_airflow_dags_have_pools_params_and_asset_schedules(home: Path) -> None:
    from airflow.sdk import AssetAny

    from mzflow.airflow import dags

    built = dags.load(str(home))
    assert set(built) == {"mzflow_a", "mzflow_b", "mzflow_compact"}  # t: compaction's DAG
    a, b = built["mzflow_a"], built["mzflow_b"]
    assert {t.task_id: t.pool for t in a.tasks} == {
        "v0_by_k": "mzflow_a", "m1": "mzflow_a", "m1_by_v": "mzflow_a", "m2": "mzflow_a"}
    # No task runs before the ticks: the first records the run's time (catalog/runs.py).
    assert a.get_task("m2").upstream_task_ids == {"m1", "m1_by_v"}
    assert a.get_task("v0_by_k").upstream_task_ids == set()
    assert a.get_task("m1").downstream_task_ids == {"m2"}
    # ON COMMIT: both run on table t's writes (tests/test_airflow_assets.py); b also on
    # the index of a's it reads.
    with mzflow.connect(str(home)) as conn:
        table = f"mzflow://{conn.store.snapshot().installation_id}"
    assert isinstance(a.schedule, AssetAny)
    assert [x.uri for x in a.schedule.objects] == [f"{table}/public/t"]
    assert isinstance(b.schedule, AssetAny)
    assert [x.uri for x in b.schedule.objects] == [a.get_task("m2").outlets[0].uri,
                                                   f"{table}/public/t"]
    assert a.get_task("m2").index == "m2_primary_idx"
    p = a.params
    assert (p["full_refresh"], p["objects"], p["at"]) == (False, [], None)
    assert p.get_param("objects").schema["type"] == "array"
    assert "m2" in p.get_param("objects").schema["examples"]
    assert p.get_param("at").schema["type"] == ["null", "integer"]
    assert a.max_active_runs == 1 and "mzflow" in a.tags


def test_a_home_without_catalog_gives_no_dags(tmp_path: Path) -> None:
    from mzflow.airflow import dags

    assert dags.load(str(tmp_path / "nothing")) == {}
    assert not (tmp_path / "nothing" / "catalog.db").exists()


@pytest.mark.slow
def test_parsing_the_dag_file_never_loads_spark_delta_or_expectations(home: Path) -> None:
    assert parse_dag_file(LOADER, home) == ("['mzflow_a', 'mzflow_b', 'mzflow_compact']",
                                            "[]")


def test_pool_plan_keeps_foreign_pools() -> None:
    snap = _snapshot_with(clusters=[("a", "small"), ("b", "large")])
    mine = pools.marker(snap.installation_id)
    existing = {"default_pool": (128, "Default pool"), "mzflow_a": (1, f"x {mine}"),
                "mzflow_gone": (4, f"mzflow cluster 'gone' {mine}"),
                "mzflow_other": (2, "mzflow cluster 'other' [mzflow another-catalog]")}
    changes = {(c.action, c.pool, c.slots) for c in pools.plan(snap, existing)}
    assert changes == {("create", "mzflow_default", 2), ("resize", "mzflow_a", 2),
                       ("create", "mzflow_b", 8), ("delete", "mzflow_gone", 4)}


def _snapshot_with(clusters: list[tuple[str, str]]) -> object:
    from mzflow.catalog.model import Cluster, Snapshot

    cs = (Cluster(1, "default"),) + tuple(
        Cluster(i + 2, name, size=size) for i, (name, size) in enumerate(clusters))
    return Snapshot(version=1, clusters=cs, items=(), installation_id="inst-1")


# -- against a real Airflow database ----------------------------------------------------


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's migrated Airflow database (this module's AIRFLOW_HOME)."""
    db = _AIRFLOW_HOME / "airflow.db"
    if not db.exists():
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                       check=True, capture_output=True, timeout=300)
    return db


def _airflow_pools() -> dict[str, int]:
    from airflow.models.pool import Pool

    return {p.pool: p.slots for p in Pool.get_pools() if p.pool}


@pytest.mark.slow
def test_pools_follow_create_alter_drop_cluster(home: Path, airflow_db: Path) -> None:
    from airflow.models.pool import Pool

    Pool.create_or_update_pool("mzflow_handmade", 3, "not ours", include_deferred=False)
    with mzflow.connect(str(home)) as conn:
        pools.sync(conn.store.snapshot())
        got = _airflow_pools()
        assert {k: v for k, v in got.items() if k.startswith("mzflow_")} == {
            "mzflow_default": 2, "mzflow_a": 2, "mzflow_b": 4, "mzflow_handmade": 3}
        # Deferred ticks keep their slot (issue 36, item 6); a pool made before that
        # counted them is brought in line without a resize.
        assert {p.pool: p.include_deferred for p in Pool.get_pools()
                if p.pool.startswith("mzflow_")} == {
            "mzflow_default": True, "mzflow_a": True, "mzflow_b": True,
            "mzflow_handmade": False}
        Pool.create_or_update_pool("mzflow_a", 2, "cluster a", include_deferred=False)
        kept = pools.sync(conn.store.snapshot())
        assert {c.pool: c.action for c in kept}["mzflow_a"] == "keep"
        assert Pool.get_pool("mzflow_a").include_deferred  # type: ignore[union-attr]
        conn.execute("ALTER CLUSTER a SET (SIZE 'large'); CREATE CLUSTER c SIZE 'xsmall'")
        conn.execute("DROP CLUSTER b CASCADE")
        changes = pools.sync(conn.store.snapshot())
    assert {(c.action, c.pool) for c in changes if c.action != "keep"} == {
        ("resize", "mzflow_a"), ("create", "mzflow_c"), ("delete", "mzflow_b")}
    got = _airflow_pools()
    assert {k: v for k, v in got.items() if k.startswith("mzflow_")} == {
        "mzflow_default": 2, "mzflow_a": 8, "mzflow_c": 1, "mzflow_handmade": 3}


@pytest.mark.slow
def test_airflow_sync_command(home: Path, airflow_db: Path, tmp_path: Path) -> None:
    af = _own_airflow_home(airflow_db, tmp_path)
    env = {**os.environ, "MZFLOW_HOME": str(home)}
    cmd = [sys.executable, "-m", "mzflow.cli", "airflow", "sync", "--airflow-home", str(af)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_airflow_env(env, af),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert " create | mzflow_b" in out.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, env=_airflow_env(env, af),
                           timeout=120)
    assert " keep   | mzflow_b" in again.stdout and "create" not in again.stdout


def _own_airflow_home(airflow_db: Path, tmp_path: Path) -> Path:
    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(airflow_db, af / "airflow.db")
    return af


_airflow_env = airflow_env


# -- ticks through dag.test() -----------------------------------------------------------

_RUN = """
import json, runpy, sys
import mzflow
from airflow.sdk import DAG
g = {v.dag_id: v for v in runpy.run_path(sys.argv[1]).values() if isinstance(v, DAG)}
out = []
def rows(sql):
    with mzflow.connect() as conn:
        conn.execute("SET transaction_isolation = 'serializable'")
        return [list(r) for r in conn.execute(sql).rows]
for step in json.loads(sys.argv[2]):
    if "sql" in step:
        with mzflow.connect() as conn:
            conn.execute(step["sql"])
        continue
    if "read" in step:
        out.append(rows(step["read"]))
        continue
    if "write_file" in step:
        open(step["write_file"], "w").write(step["text"])
        continue
    run = g[step["dag"]].test(run_conf=step.get("conf"))
    states = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()}
    out.append([str(run.state).split(".")[-1].lower(), states])
RESULT(out)
"""


def run_dag_steps(home: Path, airflow_db: Path, tmp_path: Path, dag_file: Path,
                  steps: list[dict[str, object]],
                  extra_env: dict[str, str] | None = None) -> tuple[list[object], str]:
    """Run ``steps`` (DAG tests, SQL, serializable reads) in one child process: one
    JVM for all of them, and Airflow configured for this test's own database."""
    af = _own_airflow_home(airflow_db, tmp_path)
    shutil.copy(dag_file, af / "dags" / dag_file.name)
    env = _airflow_env({**os.environ, "MZFLOW_HOME": str(home), **(extra_env or {})}, af)
    result, log = expect_result(_RUN, str(af / "dags" / dag_file.name), json.dumps(steps),
                                env=env, timeout=900, cwd=tmp_path)
    assert isinstance(result, list)
    return result, log


@pytest.mark.slow
@pytest.mark.spark
def test_a_cluster_dag_run_advances_its_sources_once(tmp_path: Path, airflow_db: Path
                                                     ) -> None:
    """Each run of a cluster's DAG advances the cluster's sources one step, however
    many of its tasks tick (session/sources.py keys the step by the run's time)."""
    h = tmp_path / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute("CREATE CLUSTER a SIZE 'small'; "
                     "CREATE SOURCE c IN CLUSTER a FROM LOAD GENERATOR COUNTER; "
                     "CREATE MATERIALIZED VIEW total IN CLUSTER a AS "
                     "SELECT count(*) AS n, sum(counter) AS s FROM c; "
                     "CREATE MATERIALIZED VIEW top IN CLUSTER a AS "
                     "SELECT max(counter) AS m FROM c")
    none = {"objects": [], "full_refresh": False, "at": None}
    read = "SELECT counter FROM c ORDER BY 1"
    res, _ = run_dag_steps(h, airflow_db, tmp_path, LOADER, [
        {"dag": "mzflow_a", "conf": none}, {"read": read},
        {"dag": "mzflow_a", "conf": none}, {"read": read},
        {"read": "SET cluster = a; SELECT n, s::bigint FROM total"}])
    first, after_one, second, after_two, total = res
    assert first[0] == second[0] == "success"
    assert after_one == [[1]] and after_two == [[1], [2]]
    # A run's views read its time, picked before its sources' step: they lag one run.
    assert total == [[1, 1]]


@pytest.mark.slow
@pytest.mark.spark
def test_dag_test_ticks_views_and_honours_params(home: Path, airflow_db: Path,
                                                  tmp_path: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (1, 10), (2, -5), (3, 7)")
    read_m2 = "SET cluster = a; SELECT k, w FROM m2 ORDER BY k"
    # dag.test() in one process shares the DAG's Param objects between runs and a run's
    # conf overwrites their values in place: every run spells out all three params.
    none = {"objects": [], "full_refresh": False, "at": None}
    steps: list[dict[str, object]] = [
        {"dag": "mzflow_a", "conf": none},
        {"read": read_m2},
        {"sql": "INSERT INTO t VALUES (4, 1), (5, 2)"},
        # Restricted to m1: m2 is skipped and keeps its old contents.
        {"dag": "mzflow_a", "conf": {**none, "objects": ["m1"]}},
        {"read": read_m2},
        {"dag": "mzflow_a", "conf": {**none, "full_refresh": True}},
        # Nothing new: every tick finds its index up to date and skips.
        {"dag": "mzflow_a", "conf": none},
        {"read": read_m2},
        {"dag": "mzflow_b", "conf": none},
        {"read": "SET cluster = b; SELECT k, n FROM m3 ORDER BY k"},
    ]
    # Batches never count as large here, so only full_refresh makes a tick recompute.
    res, log = run_dag_steps(home, airflow_db, tmp_path, LOADER, steps,
                             {"MZFLOW_RECOMPUTE_SHARE": "1000"})
    first, m2_1, restricted, m2_2, full, idle, m2_3, b_run, m3 = res
    assert first == ["success", {"v0_by_k": "success", "m1": "success",
                                 "m1_by_v": "success", "m2": "success"}]
    assert m2_1 == [[1, 20], [3, 14]]
    assert restricted[0] == "success"
    # "m1" picks m1's indexes (as `mzflow tick --object m1` does), not what reads it.
    assert restricted[1]["m1"] == restricted[1]["m1_by_v"] == "success"
    assert restricted[1]["m2"] == restricted[1]["v0_by_k"] == "skipped"
    assert m2_2 == m2_1
    assert full[1]["m2"] == "success" and full[1]["m1"] == "skipped"  # m1 already there
    assert m2_3 == [[1, 20], [3, 14], [4, 2], [5, 4]]
    assert idle[0] == "success" and set(idle[1].values()) == {"skipped"}
    assert b_run[0] == "success" and m3 == [[1, 1], [3, 1], [4, 1], [5, 1]]
    # The task log says what the tick read and wrote.
    assert "mzflow tick: materialize.public.m2_primary_idx: upper " in log
    assert " rows in " in log and "version " in log
    m2_ticks = [line for line in log.splitlines()
                if "mzflow tick: materialize.public.m2_primary_idx" in line]
    # first run, full refresh, idle run (logged, then skipped as up to date)
    assert len(m2_ticks) == 3 and "recompute" in m2_ticks[1]
    assert "0 rows changed" in m2_ticks[2]
    m1_ticks = [line for line in log.splitlines()
                if "mzflow tick: materialize.public.m1_primary_idx" in line]
    assert "recompute" not in m1_ticks[-1]  # the restricted run's m1: incremental


@pytest.mark.slow
@pytest.mark.spark
def test_a_failing_expectation_fails_the_tick_task(tmp_path: Path, airflow_db: Path) -> None:
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE CLUSTER q SIZE 'small'; CREATE TABLE t (k int, v int); "
                     "CREATE MATERIALIZED VIEW totals IN CLUSTER q WITH (EXPECT positive "
                     "(total > 0) ON VIOLATION FAIL) AS SELECT k, sum(v) AS total FROM t "
                     "GROUP BY k")
        conn.execute("INSERT INTO t VALUES (1, 5), (2, -3)")
    none = {"objects": [], "full_refresh": False, "at": None}
    steps: list[dict[str, object]] = [
        {"dag": "mzflow_q", "conf": none},
        {"sql": "DELETE FROM t WHERE v < 0"},
        {"dag": "mzflow_q", "conf": none},
        {"read": "SET cluster = q; SELECT k, total FROM totals ORDER BY k"},
    ]
    (failed, fixed, rows), log = run_dag_steps(home, airflow_db, tmp_path, LOADER, steps)
    assert failed[0] == "failed" and failed[1]["totals"] == "failed", failed
    assert 'violates expectation "positive"' in log
    assert "Failing row contains (k=2, total=-3)" in log
    assert fixed[0] == "success" and rows == [[1, 5]]


@pytest.fixture(scope="module", autouse=True)
def _cleanup_airflow_home() -> Iterator[None]:
    with airflow_in_process(_AIRFLOW_HOME):
        yield


# -- DAG-as-code -------------------------------------------------------------------------

EXAMPLES = REPO / "dags" / "examples"


def test_dsl_declarations_order_ticks_without_touching_the_catalog(tmp_path: Path) -> None:
    from mzflow.airflow.dsl import Catalog

    mz = Catalog(home=str(tmp_path / "h"))
    a = mz.cluster("a", size="xsmall")
    mz.table("t", "k int, v int")
    m1 = mz.materialized_view("m1", "SELECT k, v FROM t", a)
    mz.view("through", "WITH x AS (SELECT k FROM m1) SELECT k FROM x")
    mz.materialized_view("m2", "SELECT k FROM through", a)
    mz.index("m1_by_v", m1, ["v"], "a")
    mz.materialized_view("elsewhere", "SELECT k FROM m1", "b")
    assert [(t.task_id, t.upstream) for t in mz.plan("a")] == [
        ("m1", ()), ("m1_by_v", ()), ("m2", ("m1", "m1_by_v"))]
    assert [d["kind"] for d in mz.decls()] == [
        "cluster", "table", "materialized-view", "view", "materialized-view", "index",
        "materialized-view"]
    assert mz.decls()[0]["sql"] == "CREATE CLUSTER a SIZE 'xsmall'"
    assert not (tmp_path / "h").exists()  # declaring writes nothing
    with pytest.raises(mzflow.Error, match="unknown cluster size 'huge'"):
        mz.cluster("z", size="huge")


def test_a_maintain_groups_ticks_share_a_time_of_their_own(tmp_path: Path) -> None:
    # No pick task: the group's first tick records the time under the run and the
    # group (a load earlier in the same run, or another group, has its own).
    from types import SimpleNamespace

    from airflow.sdk import DAG

    from mzflow.airflow import tasks
    from mzflow.airflow.dsl import Catalog

    mz = Catalog(home=str(tmp_path / "h"))
    a = mz.cluster("a")
    mz.table("t", "k int")
    mz.materialized_view("m1", "SELECT k FROM t", a)
    mz.materialized_view("m2", "SELECT k FROM m1", a)
    with DAG("d", schedule=None) as dag:
        mz.maintain(a)
    ops = {t.task_id: t for t in dag.tasks}
    assert set(ops) == {"maintain_a.m1", "maintain_a.m2"}
    assert ops["maintain_a.m2"].upstream_task_ids == {"maintain_a.m1"}
    assert {(o.run_scope, o.time_task_id) for o in ops.values()} == {("maintain_a", None)}
    ti = SimpleNamespace(dag_id="d", run_id="manual__x")
    assert tasks.run_key({"ti": ti}, "maintain_a") == "d/manual__x/maintain_a"
    assert tasks.run_key({"ti": ti}) == "d/manual__x"


@pytest.mark.slow
@pytest.mark.spark
def test_example_orders_pipeline_with_dag_test(tmp_path: Path, airflow_db: Path) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    shutil.copy(EXAMPLES / "data" / "orders-2026-11-01.csv", incoming)
    batch2 = "id,customer,amount\n5,grace,300\n6,barbara,150\n7,ada,10\n"
    totals = "SET cluster = example_analytics; SELECT * FROM example_customer_totals ORDER BY 1"
    top = "SET cluster = example_analytics; SELECT * FROM example_top_customers ORDER BY 1"
    none = {"objects": [], "full_refresh": False, "at": None}
    steps: list[dict[str, object]] = [
        {"dag": "example_orders", "conf": none},
        {"read": totals},
        {"write_file": str(incoming / "orders-2026-11-02.csv"), "text": batch2},
        {"dag": "example_orders", "conf": none},
        {"read": totals},
        # A second run with no new file loads nothing twice.
        {"dag": "example_orders", "conf": none},
        {"read": totals},
        {"read": top},
    ]
    res, log = run_dag_steps(tmp_path / "home", airflow_db, tmp_path,
                             EXAMPLES / "orders_pipeline.py", steps,
                             {"ORDERS_INCOMING": str(incoming)})
    first, t1, second, t2, third, t3, top_rows = res
    assert first[0] == "success" and set(first[1].values()) == {"success"}
    assert t1 == [["ada", 2, 290], ["edsger", 1, 99], ["grace", 1, 120]]
    assert second[0] == "success"
    assert t2 == [["ada", 3, 300], ["barbara", 1, 150], ["edsger", 1, 99], ["grace", 2, 420]]
    assert third[0] == "success" and t3 == t2
    assert top_rows == [["ada", 300], ["barbara", 150], ["grace", 420]]
    assert "created cluster example_analytics" in log
    assert "was already applied" in log or "COPY 0" in log


@pytest.mark.slow
def test_cluster_ddl_syncs_pools_when_an_airflow_home_is_set(
        tmp_path: Path, airflow_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    af = _own_airflow_home(airflow_db, tmp_path)
    for key, value in _airflow_env({}, af).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MZFLOW_AIRFLOW_HOME", str(af))

    def slots() -> dict[str, int]:
        with sqlite3.connect(af / "airflow.db") as db:
            return dict(db.execute("SELECT pool, slots FROM slot_pool WHERE pool LIKE 'mzflow%'"))

    with mzflow.connect(str(tmp_path / "home")) as conn:
        created = conn.execute("CREATE CLUSTER etl SIZE 'medium'")
        assert "Airflow pool mzflow_etl: create (4 slots)" in created.notices
        assert slots() == {"mzflow_default": 2, "mzflow_etl": 4}
        conn.execute("ALTER CLUSTER etl SET (SIZE 'xsmall')")
        assert slots()["mzflow_etl"] == 1
        dropped = conn.execute("DROP CLUSTER etl")
        assert "Airflow pool mzflow_etl: delete (1 slots)" in dropped.notices
        assert slots() == {"mzflow_default": 2}
        # Other DDL never starts a sync.
        assert conn.execute("CREATE TABLE t (a int)").notices == []
    monkeypatch.setenv("MZFLOW_AIRFLOW_HOME", str(tmp_path / "no-airflow-here"))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                       f"sqlite:///{tmp_path / 'missing' / 'airflow.db'}")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        # The DDL stands; the notice says how to catch the pools up.
        notices = conn.execute("CREATE CLUSTER late").notices
    assert any("run `mzflow airflow sync`" in n for n in notices), notices


# -- a real Airflow: api-server, scheduler, dag-processor -------------------------------


def _mzflow_sql(home: Path, sql: str) -> str:
    out = subprocess.run([sys.executable, "-m", "mzflow.cli", "--home", str(home), "sql",
                          "-c", sql], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
@pytest.mark.spark
def test_real_airflow_rest_triggered_run_maintains_views(tmp_path: Path,
                                                          airflow_db: Path) -> None:
    import time

    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE CLUSTER a SIZE 'small'; CREATE CLUSTER b SIZE 'xsmall';"
                     "CREATE TABLE t (k int, v int);"
                     "CREATE MATERIALIZED VIEW m1 IN CLUSTER a AS SELECT k, v FROM t WHERE v > 0;"
                     "CREATE MATERIALIZED VIEW m2 IN CLUSTER b AS SELECT count(*) AS n FROM m1;"
                     "INSERT INTO t VALUES (1, 5), (2, -1)")
    af = _own_airflow_home(airflow_db, tmp_path)
    shutil.copy(LOADER, af / "dags" / LOADER.name)
    (af / "plugins").mkdir()
    shutil.copy(REPO / "plugins" / "mzflow_plugin.py", af / "plugins")
    server = AirflowServer(af, {**os.environ, "MZFLOW_HOME": str(home)})
    sync = subprocess.run([sys.executable, "-m", "mzflow.cli", "--home", str(home), "airflow",
                           "sync", "--airflow-home", str(af)], env=server.env,
                          capture_output=True, text=True, timeout=120)
    assert sync.returncode == 0, sync.stderr
    server.start()
    try:
        server.wait_for("the DAGs to be parsed", lambda: all(
            server.exists(f"/api/v2/dags/{d}") for d in ("mzflow_a", "mzflow_b")), 180)
        pools = {p["name"]: p["slots"] for p in server.request(  # type: ignore[index]
            "GET", "/api/v2/pools")["pools"]}  # type: ignore[index]
        assert (pools["mzflow_a"], pools["mzflow_b"]) == (2, 1)

        def trigger() -> float:
            started = time.monotonic()
            run = server.request("POST", "/api/v2/dags/mzflow_a/dagRuns",
                                 {"logical_date": None, "conf": {}})
            run_id = run["dag_run_id"]  # type: ignore[index]
            state = server.wait_for("mzflow_a's run", lambda: server.run_state(
                "mzflow_a", run_id), 600)
            assert state == "success", server.logs()
            return time.monotonic() - started

        first = trigger()
        # mzflow_b reads m1 through its asset: the scheduler starts it on its own.
        server.wait_for("mzflow_b's asset-triggered run", lambda: [
            r for r in server.runs("mzflow_b") if r["state"] == "success"], 600)
        assert server.runs("mzflow_b")[0]["run_type"] == "asset_triggered"
        read = ("SET transaction_isolation = 'serializable'; SET cluster = a; "
                "SELECT k, v FROM m1 ORDER BY k; SET cluster = b; SELECT n FROM m2")
        assert _table_rows(_mzflow_sql(home, read)) == [["1", "5"], ["1"]]

        _mzflow_sql(home, "INSERT INTO t VALUES (3, 7), (4, 8)")
        second = trigger()
        server.wait_for("a second run of mzflow_b", lambda: len(
            [r for r in server.runs("mzflow_b") if r["state"] == "success"]) == 2, 600)
        assert _table_rows(_mzflow_sql(home, read)) == [
            ["1", "5"], ["3", "7"], ["4", "8"], ["3"]]
        # The plugin's catalog view, served by the api-server: m1 is caught up.
        view = server.request("GET", "/mzflow/api/catalog")
        m1 = next(i for i in view["indexes"] if i["index"] == "m1_primary_idx")  # type: ignore[index]
        assert m1["upper"] > 0 and m1["lag_ms"] is not None and m1["error"] is None
        logs = "".join(p.read_text(errors="replace") for p in (af / "logs").rglob("*")
                       if p.is_file())
        assert "mzflow tick: materialize.public.m1_primary_idx: upper " in logs
        print(f"trigger to success: first run {first:.1f} s, second run {second:.1f} s")
    finally:
        server.stop()


def _table_rows(psql: str) -> list[list[str]]:
    """Data rows of every table in ``mzflow sql`` output (header, rule and count cut)."""
    rows, lines = [], psql.splitlines()
    for i, line in enumerate(lines):
        if set(line.strip()) <= set("-+") and line.strip() and i + 1 < len(lines):
            for row in lines[i + 1:]:
                if row.startswith("("):
                    break
                rows.append([c.strip() for c in row.split("|")])
    return rows


# -- Spark from the mzflow_spark connection ----------------------------------------------


def test_spark_connection_follows_the_spark_provider_conventions() -> None:
    from mzflow.airflow.hooks import master_url

    assert master_url("spark", "spark://m", 7077, {}) == "spark://m:7077"
    assert master_url("spark", "m", 7077, {}) == "spark://m:7077"
    assert master_url("spark", "local[*]", None, {}) == "local[*]"
    assert master_url("spark", "yarn", None, {}) == "yarn"
    assert master_url("spark", "", None, {}) == "local[*]"
    assert master_url("spark_connect", "h", None, {}) == "sc://h:15002"
    assert master_url("spark", "sc://h", 4000, {"token": "t", "use_ssl": True}) == \
        "sc://h:4000/;token=t;use_ssl=true"


class SparkStandalone:
    """A Spark standalone master and one worker, as separate JVMs on this machine."""

    def __init__(self, work: Path):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"spark://127.0.0.1:{self.port}"
        self.work = work
        import pyspark

        self.spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_WORKER_DIR": str(work / "worker"), "PYSPARK_PYTHON": sys.executable}
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> Path:
        log = self.work / f"{name}.log"
        self.procs.append(subprocess.Popen(
            [self.spark_class, *args], env=self.env, stdout=log.open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True))
        return log

    def start(self, timeout: float = 180) -> None:
        import time

        master = self._start("master", "org.apache.spark.deploy.master.Master", "--host",
                             "127.0.0.1", "--port", str(self.port), "--webui-port", "0")
        worker = self._start("worker", "org.apache.spark.deploy.worker.Worker", "--host",
                             "127.0.0.1", "--cores", "1", "--memory", "2g", "--webui-port",
                             "0", self.url)
        deadline = time.monotonic() + timeout
        while "Successfully registered with master" not in worker.read_text(errors="replace"):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                pytest.fail("Spark standalone did not start:\n" + master.read_text()[-2000:]
                            + worker.read_text()[-2000:])
            time.sleep(1)

    def stop(self) -> None:
        import signal

        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def _tick_m1_through(connection: dict[str, object], home: Path, airflow_db: Path,
                     tmp_path: Path) -> tuple[list, str]:
    """Run cluster a's DAG for m1 with ``connection`` as mzflow_spark, then read m1."""
    none = {"objects": [], "full_refresh": False, "at": None}
    return run_dag_steps(
        home, airflow_db, tmp_path, LOADER,
        [{"dag": "mzflow_a", "conf": {**none, "objects": ["m1"]}},
         {"read": "SET cluster = a; SELECT k, v FROM m1 ORDER BY k"}],
        {"AIRFLOW_CONN_MZFLOW_SPARK": json.dumps(connection)})


@pytest.mark.slow
@pytest.mark.spark
def test_ticks_run_on_a_spark_standalone_cluster_named_by_the_connection(
        home: Path, airflow_db: Path, tmp_path: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (1, 10), (2, -5), (3, 7)")
    spark = SparkStandalone(tmp_path)
    spark.start()
    try:
        res, log = _tick_m1_through(
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": spark.port},
            home, airflow_db, tmp_path)
    finally:
        spark.stop()
    run, m1 = res
    assert run[0] == "success" and run[1]["m1"] == "success"
    assert m1 == [[1, 10], [3, 7]]
    assert f"Spark master {spark.url} (connection mzflow_spark)" in log
    # The work ran in an executor the worker launched, not in the task's own JVM.
    assert list((tmp_path / "worker").glob("app-*/*/stderr"))



class SparkConnectServer(SparkStandalone):
    """A Spark Connect server (``SparkConnectServer`` via spark-submit) as its own JVM."""

    def __init__(self, work: Path):
        super().__init__(work)
        self.url = f"sc://127.0.0.1:{self.port}"
        self.submit = str(Path(self.spark_class).parent / "spark-submit")

    def start(self, timeout: float = 180) -> None:
        import time

        log = self.work / "connect.log"
        self.procs.append(subprocess.Popen(
            [self.submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--name", "mzflow-connect", "--master", "local[1]",
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.ui.enabled=false", "spark-internal"],
            env=self.env, cwd=self.work, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True))
        deadline = time.monotonic() + timeout
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                pytest.fail("Spark Connect did not start:\n" + log.read_text()[-3000:])
            time.sleep(1)


@pytest.mark.slow
@pytest.mark.spark
def test_ticks_run_on_a_spark_connect_server_named_by_the_connection(
        home: Path, airflow_db: Path, tmp_path: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (4, 40), (5, -1)")
    server = SparkConnectServer(tmp_path)
    server.start()
    try:
        res, log = _tick_m1_through(
            {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": server.port},
            home, airflow_db, tmp_path)
        served = (tmp_path / "connect.log").read_text(errors="replace")
    finally:
        server.stop()
    run, m1 = res
    assert run[0] == "success" and run[1]["m1"] == "success"
    assert m1 == [[4, 40]]
    assert f"Spark master {server.url} (connection mzflow_spark)" in log
    # The tick's queries ran in the server's JVM: it logged executing them (startup alone
    # logs no ExecuteHolder).
    assert "ExecuteHolder ExecuteKey(" in served

@pytest.mark.slow
@pytest.mark.spark
def test_dag_test_ticks_run_on_the_clusters_warm_server(home: Path, airflow_db: Path,
                                                       tmp_path: Path) -> None:
    """Issue 18: the server `mzflow cluster start` warmed serves the DAG's ticks (the
    same process before and after), and each tick's commit says it ran there."""
    from mzflow.maintain.ticks import SPARK_KEY, index_shard

    env = {**os.environ, "MZFLOW_HOME": str(home), "MZFLOW_CLUSTER_SPARK": "managed"}
    mzflow_cmd = str(Path(sys.executable).with_name("mzflow"))
    started = subprocess.run([mzflow_cmd, "cluster", "start", "a"], capture_output=True,
                             text=True, env=env, timeout=300)
    assert started.returncode == 0, started.stderr
    server = home / "clusters" / "2" / "server.json"
    before = json.loads(server.read_text())
    try:
        with mzflow.connect(str(home)) as conn:
            conn.execute("INSERT INTO t VALUES (1, 10), (2, -5), (3, 7)")
        none = {"objects": [], "full_refresh": False, "at": None}
        res, _ = run_dag_steps(home, airflow_db, tmp_path, LOADER,
                               [{"dag": "mzflow_a", "conf": none},
                                {"read": "SET cluster = a; SELECT k, w FROM m2 ORDER BY k"}],
                               {"MZFLOW_CLUSTER_SPARK": "managed"})
        assert res[0][0] == "success" and res[1] == [[1, 20], [3, 14]]
        assert json.loads(server.read_text())["pid"] == before["pid"]
        with mzflow.connect(str(home)) as conn:
            snap = conn.store.snapshot()
            m2 = snap.find("m2")
            assert m2 is not None
            index = next(i for i in snap.indexes_on(m2.id) if i.is_default_index)
            newest = index_shard(conn.config.warehouse, index).ticks(1)[0]
        assert newest[SPARK_KEY] == before["url"]
        # The task ran on the cluster's warm tick service, not in the task's process.
        log = (home / "clusters" / "2" / "server.log").read_text()
        assert "tick service: ticked materialize.public.m2" in log, log[-3000:]
    finally:
        subprocess.run([mzflow_cmd, "cluster", "stop", "a"], env=env, timeout=120)


# -- the plugin's catalog view -----------------------------------------------------------


def test_plugin_serves_a_catalog_view(home: Path) -> None:
    """The catalog view's data and page (its endpoints and their authentication:
    tests/test_airflow_ui.py)."""
    from mzflow.airflow.plugin import MzflowPlugin
    from mzflow.airflow.ui import data, pages

    view = data.catalog_view(str(home))
    assert {c["name"]: (c["pool"], c["slots"]) for c in view["clusters"]} == {
        "default": ("mzflow_default", 2), "a": ("mzflow_a", 2), "b": ("mzflow_b", 4)}
    m2 = next(i for i in view["indexes"] if i["index"] == "m2_primary_idx")
    assert (m2["on"], m2["cluster"], m2["upper"], m2["lag_ms"]) == ("m2", "a", 0, None)
    page = pages.catalog_page(view)
    assert "Maintained indexes" in page and "m1_by_v" in page
    assert view["quality"] == []
    # Failure and quarantine counts per object with expectations.
    with mzflow.connect(str(home)) as conn:
        conn.execute("ALTER TABLE t ADD CONSTRAINT pos EXPECT (v > 0) ON VIOLATION "
                     "QUARANTINE")
        conn.execute("ALTER TABLE t ADD CONSTRAINT small EXPECT (k < 100) ON VIOLATION FAIL")
        conn.execute("INSERT INTO t VALUES (1, 5), (2, -1), (3, -2)")
        with pytest.raises(mzflow.Error):
            conn.execute("INSERT INTO t VALUES (500, 1)")
    view = data.catalog_view(str(home))
    assert view["quality"] == [{"object": "t", "expectations": 2, "batches": 2,
                                "failed_rows": 3, "rejected": 1, "quarantined_rows": 2,
                                "in_quarantine": 2}]
    assert "Data quality" in pages.catalog_page(view)
    assert MzflowPlugin.fastapi_apps[0]["url_prefix"] == "/mzflow"


# -- mzflow serve through Airflow's PostgreSQL provider (issue 35, item 6) ----------------

_SQL_DAG = '''
import pendulum
from airflow.providers.common.sql.operators.sql import SQLCheckOperator, SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("mzflow_sql", schedule=None,
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    write = SQLExecuteQueryOperator(task_id="write", conn_id="mzflow",
                                    sql="INSERT INTO t VALUES (%(k)s, %(v)s)",
                                    parameters={"k": 41, "v": 42})
    check = SQLCheckOperator(task_id="check", conn_id="mzflow",
                             sql="SELECT count(*) = 1 FROM t WHERE k = 41 AND v = 42")
    write >> check
'''

_SQL_RUN = """
import runpy, sys
from airflow.sdk import DAG
dag = next(v for v in runpy.run_path(sys.argv[1]).values() if isinstance(v, DAG))
run = dag.test()
states = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()}
RESULT([str(run.state).split(".")[-1].lower(), sorted(states.items())])
"""


@pytest.mark.slow
@pytest.mark.spark
def test_sql_operators_reach_mzflow_serve_through_the_postgres_hook(
        home: Path, airflow_db: Path, tmp_path: Path) -> None:
    """An Airflow connection of type postgres points at ``mzflow serve``: the common SQL
    provider's operators write a row with bound parameters and check it, through
    PostgresHook (psycopg2) and a SCRAM login."""
    from mzflow import config
    from mzflow.server import make_server

    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE ROLE airflow WITH LOGIN PASSWORD 'af-secret'")
        conn.execute("GRANT INSERT, SELECT ON t TO airflow")
    server = make_server(config.load(str(home)), port=0)
    server.start()
    try:
        af = _own_airflow_home(airflow_db, tmp_path)
        dag_file = af / "dags" / "mzflow_sql.py"
        dag_file.write_text(_SQL_DAG)
        env = _airflow_env({**os.environ, "MZFLOW_HOME": str(home),
                            "AIRFLOW_CONN_MZFLOW": "postgres://airflow:af-secret@127.0.0.1:"
                                                   f"{server.port}/materialize"}, af)
        result, log = expect_result(_SQL_RUN, str(dag_file), env=env, timeout=600,
                                    cwd=tmp_path)
        assert result == ["success", [["check", "success"], ["write", "success"]]], log[-6000:]
    finally:
        server.stop()
    with mzflow.connect(str(home)) as conn:
        assert conn.execute("SELECT k, v FROM t").rows == [(41, 42)]
