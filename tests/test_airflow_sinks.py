"""Sinks as Airflow DAGs: one DAG per sink on its schedule, runs that export files.

Airflow reads AIRFLOW_HOME once, when first imported. ``tests/test_airflow.py`` points
it at a throwaway folder; run alone, this module does the same (and never touches the
user's ~/airflow). Nothing here uses the in-process Airflow database: the real run
happens in a child process with its own migrated database, so this module does not
depend on (or outlive) test_airflow.py's session database.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

# Unless test_airflow.py's throwaway home is already in place (its tests need it kept).
_OWN_HOME = throwaway_airflow_home("sinks-")

from scenario import expect_result  # noqa: E402

import mzflow  # noqa: E402
from mzflow.airflow import graph, tasks  # noqa: E402
from mzflow.catalog import schedules  # noqa: E402
from mzflow_dev.airflow_server import airflow_env, parse_dag_file  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
LOADER = REPO / "dags" / "mzflow_catalog.py"
BERLIN = "Europe/Berlin"


@pytest.fixture(scope="module", autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo Airflow's logging and drop our Airflow home (airflow_in_process)."""
    with airflow_in_process(_OWN_HOME):
        yield


# -- a. Airflow's intervals == mzflow's ---------------------------------------------------


def _airflow_intervals(schedule: str, tz: str, start: dt.datetime, n: int
                       ) -> list[tuple[int, int]]:
    """``n`` data intervals of the timetable the sink DAG gets, as the scheduler steps
    them with catch-up from ``start`` (the DAG's start_date)."""
    import pendulum
    from airflow.sdk import CronDataIntervalTimetable
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    timetable = coerce_to_core_timetable(
        CronDataIntervalTimetable(schedules.cron(schedule), timezone=tz))
    restriction = TimeRestriction(earliest=pendulum.instance(start), latest=None,
                                  catchup=True)
    out, last = [], None
    for _ in range(n):
        info = timetable.next_dagrun_info(last_automated_data_interval=last,
                                          restriction=restriction)
        assert info is not None and info.data_interval is not None
        last = info.data_interval
        out.append((schedules.to_ms(last.start), schedules.to_ms(last.end)))
    return out


def _mzflow_intervals(schedule: str, tz: str, start: dt.datetime, n: int
                      ) -> list[tuple[int, int]]:
    it = schedules.following(schedule, tz, start)
    return [tuple(schedules.to_ms(x) for x in next(it)) for _ in range(n)]  # type: ignore


@pytest.mark.parametrize("tz", [BERLIN, "UTC"])
@pytest.mark.parametrize("schedule", ["@hourly", "30 2 * * *", "0 */6 * * *"])
@pytest.mark.parametrize("around", [(2026, 10, 25), (2026, 3, 29)],
                         ids=["2026-10-25", "2026-03-29"])
def test_airflow_timetable_yields_the_sinks_intervals(
        schedule: str, tz: str, around: tuple[int, int, int]) -> None:
    import pendulum

    # From three days before the DST change (Berlin: 2026-10-25 03:00 CEST -> 02:00
    # CET, 2026-03-29 02:00 CET -> 03:00 CEST) to four days after it.
    begin = pendulum.datetime(*around, tz=tz).subtract(days=3).add(minutes=7)
    start, _ = schedules.containing(schedule, tz, schedules.to_ms(begin))
    n = {"@hourly": 7 * 24, "30 2 * * *": 7, "0 */6 * * *": 7 * 4}[schedule]
    ours = _mzflow_intervals(schedule, tz, start, n)
    theirs = _airflow_intervals(schedule, tz, start, n)
    assert theirs == ours
    if tz == BERLIN and schedule == "@hourly":
        lengths = [(e - s) // 3_600_000 for s, e in ours]
        assert lengths == [1] * n  # 23 or 25 intervals on the DST day, all of one hour


def test_sink_interval_maps_airflow_runs_at_dst() -> None:
    """A cron point inside the skipped or repeated hour (``30 2 * * *`` in Berlin): the
    sink's intervals are Airflow's, so every run's interval goes to the runtime as is
    (the task's mapping to the sink's last ended interval is only a safety net)."""
    import pendulum

    for month, day in ((10, 25), (3, 29)):
        begin = pendulum.datetime(2026, month, day, tz=BERLIN).subtract(days=3)
        start, _ = schedules.containing("30 2 * * *", BERLIN, schedules.to_ms(begin))
        airflow = _airflow_intervals("30 2 * * *", BERLIN, start, 7)
        lengths = sorted({(e - s) // 3_600_000 for s, e in airflow})
        assert lengths == ([24, 25] if month == 10 else [23, 24])
        for s, e in airflow:
            mapped = tasks.sink_interval("30 2 * * *", BERLIN, schedules.from_ms(s),
                                         schedules.from_ms(e))
            assert tuple(schedules.to_ms(x) for x in mapped) == (s, e)


# -- b. DAG shape -------------------------------------------------------------------------

CATALOG = """
CREATE CLUSTER etl SIZE 'small';
CREATE TABLE t (k int, v text);
CREATE MATERIALIZED VIEW m IN CLUSTER etl AS SELECT k, v FROM t WHERE k > 0;
CREATE SINK berlin IN CLUSTER etl FROM m INTO PARQUET '{out}'
  WITH (ENVELOPE = APPEND, SCHEDULE = '0 */6 * * *', TIMEZONE = 'Europe/Berlin');
CREATE SINK plain FROM t INTO CSV '{out}';
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG.format(out=tmp_path / "out"))
    return h


def test_each_sink_is_a_dag_on_its_schedule_in_its_clusters_pool(home: Path) -> None:
    import pendulum
    from airflow.sdk import CronDataIntervalTimetable

    from mzflow.airflow import dags
    from mzflow.catalog import sinks

    with mzflow.connect(str(home)) as conn:
        snap = conn.store.snapshot()
    specs = {s.name: s for s in sinks.specs(snap)}
    built = dags.load(str(home))
    assert set(built) == {"mzflow_etl", "mzflow_sink_berlin", "mzflow_sink_plain",
                          "mzflow_compact"}
    for name, schedule, tz, pool in [("berlin", "0 */6 * * *", BERLIN, "mzflow_etl"),
                                     ("plain", "@hourly", "UTC", "mzflow_default")]:
        dag = built[f"mzflow_sink_{name}"]
        assert isinstance(dag.timetable, CronDataIntervalTimetable)
        assert dag.timetable.expression == schedules.cron(schedule)
        assert str(dag.timetable.timezone) == tz and dag.timezone.name == tz
        first = schedules.containing(schedule, tz, specs[name].start_ts)
        assert dag.start_date == first[0]
        assert (dag.catchup, dag.max_active_runs) == (True, 1)
        assert {"mzflow", "sink"} <= set(dag.tags)
        assert [t.task_id for t in dag.tasks] == ["export"]
        export = dag.get_task("export")
        assert (export.pool, export.pool_slots, export.retries) == (pool, 1, 2)
        assert getattr(export, "sink", None) == name
    assert "cluster:etl" in built["mzflow_sink_berlin"].tags
    assert "cluster:default" in built["mzflow_sink_plain"].tags
    # Local midnight, 06:00, ...: the first interval starts on a 6-hour point in Berlin.
    start_date = built["mzflow_sink_berlin"].start_date
    assert start_date is not None
    start = pendulum.instance(start_date).in_timezone(BERLIN)
    assert (start.hour % 6, start.minute) == (0, 0)
    # The scheduler's view: the serialized DAG's timetable is Airflow's own, same cron.
    from airflow.serialization.serialized_objects import DagSerialization

    s = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(
        built["mzflow_sink_berlin"]))
    assert (s.timetable.summary, str(s.timezone)) == ("0 */6 * * *", BERLIN)
    # The plain data behind them, and the CLI's listing.
    assert [(d.dag_id, d.pool, d.cluster) for d in graph.sink_dags(snap)] == [
        ("mzflow_sink_berlin", "mzflow_etl", "etl"),
        ("mzflow_sink_plain", "mzflow_default", "default")]


def test_a_cluster_named_like_a_sink_dag_keeps_its_dag(tmp_path: Path) -> None:
    import logging

    from mzflow.airflow import dags

    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("CREATE CLUSTER sink_s SIZE 'small'; CREATE TABLE t (k int); "
                     "CREATE MATERIALIZED VIEW m IN CLUSTER sink_s AS SELECT k FROM t; "
                     f"CREATE SINK s FROM t INTO CSV '{tmp_path / 'out'}'")
    # Airflow (re)configures the root logger when first imported: listen on ours.
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore
    dags.log.addHandler(handler)
    try:
        built = dags.load(str(tmp_path / "h"))
    finally:
        dags.log.removeHandler(handler)
    assert list(built) == ["mzflow_sink_s", "mzflow_compact"]
    assert built["mzflow_sink_s"].get_task("m")
    assert "mzflow: sink s gets no DAG: mzflow_sink_s is taken" in seen


def test_airflow_dags_command_lists_sinks(home: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    from mzflow import cli

    assert cli.main(["--home", str(home), "airflow", "dags"]) == 0
    out = capsys.readouterr().out
    assert " mzflow_etl " in out and " m " in out
    line = next(x for x in out.splitlines() if "mzflow_sink_berlin" in x)
    cells = [c.strip() for c in line.split("|")]
    assert cells[:6] == ["mzflow_sink_berlin", "mzflow_etl", "export", "berlin",
                         "0 */6 * * *", BERLIN]
    assert any("mzflow_sink_plain" in x and "@hourly" in x for x in out.splitlines())


@pytest.mark.slow
def test_parsing_sink_dags_never_loads_spark_or_delta(home: Path) -> None:
    # (mzflow.session itself is imported: ``import mzflow`` loads the session, which
    # imports no engine; the export task's own imports stay in the callable.)
    assert parse_dag_file(LOADER, home) == (
        "['mzflow_compact', 'mzflow_etl', 'mzflow_sink_berlin', 'mzflow_sink_plain']", "[]")


# -- c. a real run through dag.test() -----------------------------------------------------

# The whole scenario runs in one child process: pendulum.travel_to (time-machine) moves
# the clock for mzflow and Airflow alike, which only a process of our own may do.
_SCENARIO = """
import hashlib, json, runpy, sys
from pathlib import Path
import pendulum
import mzflow

home, out, dag_file = sys.argv[1:4]
times = {}
def at(h, m, label=None, sql=None, day=(2026, 1, 1), tz="UTC"):
    pendulum.travel_to(pendulum.datetime(*day, h, m, tz=tz), freeze=False)
    if sql:
        with mzflow.connect(home) as c:
            c.execute(sql)
            times[label] = c.store.snapshot().read_ts

at(10, 5, "table", "CREATE TABLE t (k int, v text)")
at(10, 6, "insert", "INSERT INTO t VALUES (1, 'a'), (2, 'b')")
at(10, 7, "sink", f"CREATE SINK s FROM t INTO PARQUET '{out}' "
                  "WITH (ENVELOPE = APPEND, SCHEDULE = '@hourly')")
at(10, 40, "delete", "DELETE FROM t WHERE k = 1")
at(10, 41, "insert2", "INSERT INTO t VALUES (3, 'c')")
at(11, 20, "insert3", "INSERT INTO t VALUES (4, 'd')")
at(12, 30)  # [10:00, 11:00) and [11:00, 12:00) have ended

from airflow.models.dag import DagModel
from airflow.sdk import DAG

dags = {v.dag_id: v for v in runpy.run_path(dag_file).values() if isinstance(v, DAG)}
dag = dags["mzflow_sink_s"]
def run_dag(dag, logical_date, out):
    run = dag.test(logical_date=logical_date)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(Path(out).iterdir())}
    return {"state": str(run.state).split(".")[-1].lower(),
            "interval": [run.data_interval_start.isoformat(),
                         run.data_interval_end.isoformat()],
            "tasks": {ti.task_id: str(ti.state).split(".")[-1].lower()
                      for ti in run.get_task_instances()},
            "files": files}

# dag.test() runs a manual run, whose data interval Airflow infers as the last complete
# interval before logical_date: logical_date=11:00 runs [10:00, 11:00).
steps = [run_dag(dag, pendulum.datetime(2026, 1, 1, hour, tz="UTC"), out)
         for hour in (11, 11, 12)]
model = DagModel.get_current("mzflow_sink_s")
first = [model.next_dagrun_data_interval_start.isoformat(),
         model.next_dagrun_data_interval_end.isoformat()]

# '30 2 * * *' in Berlin on the night summer time ends: Airflow's run [10-24 02:30
# CEST, 10-25 02:30 CET) is a 25-hour interval, and the sink's interval too.
out_dst = out + "-dst"
berlin = dict(day=(2026, 10, 24), tz="Europe/Berlin")
at(12, 0, "dst_table", "CREATE TABLE t2 (k int)", **berlin)
at(12, 1, "dst_sink", f"CREATE SINK dst FROM t2 INTO PARQUET '{out_dst}' WITH "
                      "(SCHEDULE = '30 2 * * *', TIMEZONE = 'Europe/Berlin')", **berlin)
at(13, 0, "dst_insert", "INSERT INTO t2 VALUES (1)", **berlin)
at(0, 45, "dst_insert2", "INSERT INTO t2 VALUES (2)", day=(2026, 10, 25))  # 02:45 CEST
at(4, 0, day=(2026, 10, 26), tz="Europe/Berlin")
dags = {v.dag_id: v for v in runpy.run_path(dag_file).values() if isinstance(v, DAG)}
dst = run_dag(dags["mzflow_sink_dst"], pendulum.datetime(2026, 10, 25, 1, 30, tz="UTC"),
              out_dst)
RESULT({"times": times, "steps": steps, "scheduler_first": first, "dst": dst})
"""


@pytest.fixture(scope="module")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated Airflow database of this module's own (copied per test)."""
    af = tmp_path_factory.mktemp("airflow-db")
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, capture_output=True, timeout=300,
                   env=airflow_env({**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"},
                                   af))
    return af / "airflow.db"


@pytest.mark.slow
def test_sink_dag_run_exports_its_interval_once(tmp_path: Path, airflow_db: Path) -> None:
    import pyarrow.parquet as pq

    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(airflow_db, af / "airflow.db")
    shutil.copy(LOADER, af / "dags" / LOADER.name)
    home, out = tmp_path / "home", tmp_path / "out"
    env = airflow_env({**os.environ, "MZFLOW_HOME": str(home),
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}, af)
    res, log = expect_result(_SCENARIO, str(home), str(out), str(af / "dags" / LOADER.name),
                             env=env, timeout=900, cwd=tmp_path)
    assert isinstance(res, dict)
    times, (first, again, second) = res["times"], res["steps"]

    # The scheduler would start with the sink's first interval, too.
    assert res["scheduler_first"] == ["2026-01-01T10:00:00+00:00",
                                      "2026-01-01T11:00:00+00:00"]
    f1 = "s-20260101T100000Z-20260101T110000Z.parquet"
    f2 = "s-20260101T110000Z-20260101T120000Z.parquet"
    assert first["state"] == "success" and first["tasks"] == {"export": "success"}
    assert first["interval"] == ["2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00"]
    assert list(first["files"]) == [f1]
    # A rerun of the interval rewrites the same bytes and writes nothing else.
    assert again["state"] == "success" and again["interval"] == first["interval"]
    assert again["files"] == first["files"]
    assert second["state"] == "success"
    assert list(second["files"]) == [f1, f2] and second["files"][f1] == first["files"][f1]
    assert hashlib.sha256((out / f1).read_bytes()).hexdigest() == first["files"][f1]

    # APPEND: the snapshot at the sink's creation, then every change, in time order.
    t1 = pq.read_table(out / f1)
    assert t1.column_names == ["mz_timestamp", "mz_diff", "k", "v"]
    assert [tuple(r.values()) for r in t1.to_pylist()] == [
        (times["sink"], 1, 1, "a"), (times["sink"], 1, 2, "b"),
        (times["delete"], -1, 1, "a"), (times["insert2"], 1, 3, "c")]
    assert [tuple(r.values()) for r in pq.read_table(out / f2).to_pylist()] == [
        (times["insert3"], 1, 4, "d")]
    # Airflow's run across the DST change (a 25-hour day, 02:30 once, at the second
    # 02:30) is exactly one of the sink's intervals: one file, both inserts.
    dst = res["dst"]
    assert dst["state"] == "success", log[-6000:]
    assert dst["interval"] == ["2026-10-24T00:30:00+00:00", "2026-10-25T01:30:00+00:00"]
    d1 = "dst-20261024T003000Z-20261025T013000Z.parquet"
    assert list(dst["files"]) == [d1]
    dst_out = Path(f"{out}-dst")
    assert [tuple(r.values()) for r in pq.read_table(dst_out / d1).to_pylist()] == [
        (times["dst_insert"], 1, 1), (times["dst_insert2"], 1, 2)]
    assert "is not one of sink dst's intervals" not in log
    # The task logged what it exported: the first interval twice (the rerun really
    # exported it again), then, in the last run, as already there before the second.
    span1 = "[2026-01-01T10:00:00+00:00 .. 2026-01-01T11:00:00+00:00]"
    assert log.count(f"mzflow sink: s {span1}: 4 records from 4 changes -> {out / f1}") == 2
    assert f"mzflow sink: s {span1}: already exported to {out / f1}" in log
    assert "mzflow sink: s [2026-01-01T11:00:00+00:00 .. 2026-01-01T12:00:00+00:00]: " \
           "1 records from 1 changes" in log
