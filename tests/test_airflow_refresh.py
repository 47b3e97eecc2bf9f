"""Refresh policies and compaction as Airflow schedules (issue 36, items 1 and 3).

In process: the generated DAGs' timetables, and the runs Airflow's own timetable code
computes from them, against the points each policy names. In a child process with a
real Airflow 3 database: ``dag.test()`` of ``mzflow_compact`` compacts, and the
database it syncs the DAG file to schedules each cluster's next run where its policy
says. Airflow reads AIRFLOW_HOME once, when first imported: as test_airflow_sinks.py
does, this module points it at a throwaway folder unless test_airflow.py already has.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

# Unless test_airflow.py's throwaway home is already in place (its tests need it kept).
_OWN_HOME = throwaway_airflow_home("refresh-")

from scenario import expect_result  # noqa: E402

import mzflow  # noqa: E402
from mzflow_dev.airflow_server import airflow_env, parse_dag_file  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
LOADER = REPO / "dags" / "mzflow_catalog.py"
BERLIN = "Europe/Berlin"
HOUR = 3_600_000

CATALOG = f"""
CREATE CLUSTER nightly SIZE 'small';
CREATE CLUSTER often SIZE 'small';
CREATE CLUSTER once SIZE 'small';
CREATE CLUSTER berlin SIZE 'small';
CREATE TABLE t (k int, v int) WITH (RETAIN HISTORY FOR '20 minutes');
CREATE MATERIALIZED VIEW daily IN CLUSTER nightly
  WITH (REFRESH EVERY '1 day' ALIGNED TO '2024-01-01 03:00', REFRESH AT CREATION)
  AS SELECT k, sum(v) AS s FROM t GROUP BY k;
CREATE MATERIALIZED VIEW follows IN CLUSTER nightly AS SELECT k FROM daily;
CREATE MATERIALIZED VIEW ninety IN CLUSTER often
  WITH (REFRESH EVERY '90 minutes' ALIGNED TO '2024-01-01 00:30') AS SELECT k, s FROM daily;
CREATE MATERIALIZED VIEW twice IN CLUSTER once
  WITH (REFRESH AT CREATION, REFRESH AT '2031-01-01 00:00') AS SELECT v FROM t;
CREATE INDEX t_by_k IN CLUSTER berlin ON t (k)
  WITH (REFRESH ON SCHEDULE '@daily' TIMEZONE '{BERLIN}');
CREATE MATERIALIZED VIEW free AS SELECT k FROM t;
"""


@pytest.fixture(scope="module", autouse=True)
def _restore_logging() -> Iterator[None]:
    with airflow_in_process(_OWN_HOME):
        yield


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("refresh") / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG)
    return h


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def _runs(dag: object, start: dt.datetime, n: int) -> list[int]:
    """The first ``n`` run times (ms) Airflow's scheduler computes for ``dag``'s
    timetable from ``start``, catching up (its core timetable, as the scheduler holds
    it after deserializing the DAG)."""
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    timetable = coerce_to_core_timetable(dag.timetable)  # type: ignore[attr-defined]
    restriction = TimeRestriction(earliest=pendulum.instance(start), latest=None,
                                  catchup=True)
    out, last = [], None
    for _ in range(n):
        info = timetable.next_dagrun_info(last_automated_data_interval=last,
                                          restriction=restriction)
        assert info is not None and info.data_interval is not None
        last = info.data_interval
        out.append(_ms(info.run_after))
    return out


def test_cluster_dags_run_on_their_policies(home: Path) -> None:
    from airflow.sdk import (
        AssetOrTimeSchedule,
        CronTriggerTimetable,
        MultipleCronTriggerTimetable,
    )
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.events import EventsTimetable

    from mzflow.airflow import dags

    built = dags.load(str(home))
    assert set(built) == {"mzflow_nightly", "mzflow_often", "mzflow_once", "mzflow_berlin",
                          "mzflow_default", "mzflow_compact"}
    nightly, often, once, berlin = (built[f"mzflow_{c}"] for c in (
        "nightly", "often", "once", "berlin"))
    assert isinstance(nightly.timetable, CronTriggerTimetable)
    assert not nightly.catchup  # a late scheduler runs the latest due point once
    # 'often' reads 'daily' (another cluster's): its own times or that asset's updates.
    assert isinstance(often.timetable, AssetOrTimeSchedule)
    assert isinstance(often.timetable.timetable, MultipleCronTriggerTimetable)
    assert [a.uri for a in often.timetable.asset_condition.objects] == [
        nightly.get_task("daily").outlets[0].uri]
    assert isinstance(once.timetable, EventsTimetable) and once.catchup
    assert isinstance(berlin.timetable, CronTriggerTimetable)
    # ON COMMIT only: on the writes to the table it reads (tests/test_airflow_assets.py).
    free = built["mzflow_default"].timetable.asset_condition  # type: ignore[attr-defined]
    assert [a.uri.rsplit("/", 2)[1:] for a in free.objects] == [["public", "t"]]
    # Every DAG serializes and reads back as the scheduler and the dag-processor hold it.
    for dag in built.values():
        DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))

    start = dt.datetime(2026, 3, 27, 12, 7, tzinfo=dt.UTC)  # Berlin's DST starts 03-29
    aligned = _ms(dt.datetime(2024, 1, 1, 3, tzinfo=dt.UTC))
    got = _runs(nightly, start, 5)
    first = aligned + -(-(_ms(start) - aligned) // (24 * HOUR)) * 24 * HOUR
    assert got == [first + k * 24 * HOUR for k in range(5)]
    aligned = _ms(dt.datetime(2024, 1, 1, 0, 30, tzinfo=dt.UTC))
    got = _runs(often, start, 40)
    first = aligned + -(-(_ms(start) - aligned) // (90 * 60_000)) * 90 * 60_000
    assert got == [first + k * 90 * 60_000 for k in range(40)]
    # ON SCHEDULE '@daily' in Berlin: local midnight, on both sides of the DST change.
    import pendulum

    local = [pendulum.from_timestamp(t / 1000).in_timezone(BERLIN) for t in
             _runs(berlin, start, 4)]
    assert [(x.day, x.hour, x.minute) for x in local] == [(28, 0, 0), (29, 0, 0), (30, 0, 0),
                                                          (31, 0, 0)]
    assert {x.utcoffset() for x in local} == {dt.timedelta(hours=1), dt.timedelta(hours=2)}
    # AT CREATION and AT '2031-01-01': those two runs, and no third.
    with mzflow.connect(str(home)) as conn:
        created = conn.store.snapshot().resolve("twice").created_ts
    assert created is not None
    assert _runs(once, dt.datetime(2024, 1, 1, tzinfo=dt.UTC), 2) == [
        created, _ms(dt.datetime(2031, 1, 1, tzinfo=dt.UTC))]
    assert once.start_date is not None and _ms(once.start_date) <= created


def test_the_compaction_dag_runs_at_the_shortest_retention(home: Path) -> None:
    from airflow.sdk import DeltaTriggerTimetable

    from mzflow.airflow import dags

    compact = dags.load(str(home))["mzflow_compact"]
    assert isinstance(compact.timetable, DeltaTriggerTimetable)
    assert compact.timetable.delta == dt.timedelta(minutes=20)  # t's RETAIN HISTORY
    assert [t.task_id for t in compact.tasks] == ["compact"]
    assert compact.get_task("compact").pool == "default_pool"
    assert (compact.max_active_runs, compact.catchup) == (1, False)


def test_airflow_dags_command_lists_what_runs_on_its_own(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mzflow import cli

    assert cli.main(["--home", str(home), "airflow", "dags"]) == 0
    rows = {cells[0]: cells[1:] for line in capsys.readouterr().out.splitlines()
            if len(cells := [c.strip() for c in line.split("|")]) == 3}
    assert rows["mzflow_nightly"] == ["on cron '0 3 * * *' in UTC", "REFRESH policies"]
    assert rows["mzflow_berlin"] == ["on cron '0 0 * * *' in Europe/Berlin",
                                     "REFRESH policies"]
    assert rows["mzflow_compact"] == ["every 00:20:00", "RETAIN HISTORY of materialize.public.t"]
    # ON COMMIT: on the writes to the tables it reads (the asset watchers).
    assert rows["mzflow_default"] == ["on writes to materialize.public.t", "REFRESH ON COMMIT"]


@pytest.mark.slow
def test_parsing_scheduled_dags_never_loads_spark_or_delta(home: Path) -> None:
    assert parse_dag_file(LOADER, home) == (
        "['mzflow_berlin', 'mzflow_compact', 'mzflow_default', 'mzflow_nightly', "
        "'mzflow_often', 'mzflow_once']", "[]")


# -- a real Airflow database --------------------------------------------------------------

_SCENARIO = """
import json, runpy, sys
from airflow.models.dag import DagModel
from airflow.sdk import DAG

dags = {v.dag_id: v for v in runpy.run_path(sys.argv[1]).values() if isinstance(v, DAG)}
run = dags["mzflow_compact"].test()
out = {"state": str(run.state).split(".")[-1].lower(),
       "tasks": {ti.task_id: str(ti.state).split(".")[-1].lower()
                 for ti in run.get_task_instances()}, "models": {}}
# dag.test() synced the whole DAG file to the database: every DAG's next run is there.
for dag_id in dags:
    m = DagModel.get_current(dag_id)
    out["models"][dag_id] = [m.timetable_summary, m.next_dagrun and
                             m.next_dagrun_create_after.isoformat()]
RESULT(out)
"""


@pytest.mark.slow
def test_dag_test_compacts_and_the_database_schedules_each_cluster(
        home: Path, tmp_path: Path) -> None:
    import time

    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(LOADER, af / "dags" / LOADER.name)
    env = airflow_env({**os.environ, "MZFLOW_HOME": str(home)}, af)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, capture_output=True, timeout=300, env=env)
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (1, 2)")
    before = time.time()
    res, log = expect_result(_SCENARIO, str(af / "dags" / LOADER.name), env=env,
                             timeout=600, cwd=tmp_path)
    assert isinstance(res, dict)
    after = time.time()
    assert res["state"] == "success" and res["tasks"] == {"compact": "success"}, log[-6000:]
    assert "mzflow compact: materialize.public.t (table): since " in log
    models = res["models"]
    assert models["mzflow_compact"][0] == "0:20:00"
    # ON COMMIT: the default cluster runs on its tables' asset events, at no set time.
    assert models["mzflow_default"] == ["Asset", None]
    # Without catch-up a new cron DAG runs its latest due point at once: for 'nightly'
    # the last 03:00 UTC, for 'often' the last point of its 90 minutes from 00:30.
    for dag_id, step, aligned in (("mzflow_nightly", 24 * HOUR, dt.datetime(2024, 1, 1, 3)),
                                  ("mzflow_often", 90 * 60_000, dt.datetime(2024, 1, 1, 0, 30))):
        summary, next_run = models[dag_id]
        at = _ms(dt.datetime.fromisoformat(next_run))
        phase = _ms(aligned.replace(tzinfo=dt.UTC))
        assert (at - phase) % step == 0, (dag_id, next_run)
        assert before * 1000 - step < at <= after * 1000, (dag_id, next_run)
    assert models["mzflow_nightly"][0] == "0 3 * * *"
    # The list of instants catches up: its first is the view's creation.
    with mzflow.connect(str(home)) as conn:
        created = conn.store.snapshot().resolve("twice").created_ts
    assert _ms(dt.datetime.fromisoformat(models["mzflow_once"][1])) == created
    berlin = dt.datetime.fromisoformat(models["mzflow_berlin"][1]).astimezone(
        __import__("zoneinfo").ZoneInfo(BERLIN))
    assert (berlin.hour, berlin.minute) == (0, 0)
