"""ON COMMIT through Airflow (issue 36, item 2): a write's commit to the view holding it.

    .venv/bin/python bench/on_commit.py [--rounds 5]

A warm cluster (its Spark Connect server and tick service up) maintains one
materialized view over a table; a real Airflow 3 (api-server, scheduler, dag-processor,
triggerer) schedules the cluster's DAG on the table's asset, whose watcher turns each
commit into an asset event. Each round commits one INSERT through ``mzflow sql`` and
measures, from the commit's time (the write's catalog timestamp, wall-clock ms), until
the view's index holds it (its newest tick's time reaches the commit's). Nobody presses
Trigger. Target: at most 10 s. The first round is a warm-up, not counted. Where the time
goes comes from Airflow's own records: the asset event's time, the run's queued, start
and end times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mzflow
from mzflow_dev.airflow_server import AirflowServer, airflow_env

REPO = Path(__file__).resolve().parent.parent
MZFLOW = [sys.executable, "-m", "mzflow.cli"]
TARGET_S = 10.0
CATALOG = """
CREATE CLUSTER c (SIZE = 'small');
CREATE TABLE t (k int, v int);
CREATE MATERIALIZED VIEW agg IN CLUSTER c AS SELECT k % 10 AS g, sum(v) AS s, count(*) AS n
  FROM t GROUP BY k % 10;
INSERT INTO t VALUES """ + ", ".join(f"({x}, {2 * x})" for x in range(1, 1001))


def _ms(text: str | None) -> float | None:
    return None if not text else dt.datetime.fromisoformat(text).timestamp() * 1000


def done_through(home: Path) -> int:
    from mzflow.maintain import ticks

    with mzflow.connect(str(home)) as conn:
        snap = conn.store.snapshot()
        index = next(i for i in snap.items if i.name == "agg_primary_idx")
        return ticks.index_shard(conn.config.warehouse, index).state().done_through


def commit_ts(home: Path) -> int:
    with mzflow.connect(str(home)) as conn:
        return conn.store.snapshot().read_ts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mzflow-on-commit-bench-"))
    home = work / "home"
    env = {**os.environ, "MZFLOW_HOME": str(home), "MZFLOW_CLUSTER_SPARK": "managed"}
    with mzflow.connect(str(home)) as conn:
        conn.execute(CATALOG)
    subprocess.run([*MZFLOW, "cluster", "start", "c"], env=env, check=True, timeout=600,
                   capture_output=True)
    subprocess.run([*MZFLOW, "tick", "--cluster", "c"], env=env, check=True, timeout=600,
                   capture_output=True)
    af = work / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(REPO / "dags" / "mzflow_catalog.py", af / "dags")
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=airflow_env(env, af), check=True,
                   capture_output=True, timeout=600)
    server = AirflowServer(af, env)
    subprocess.run([*MZFLOW, "airflow", "sync", "--airflow-home", str(af)], env=server.env,
                   check=True, capture_output=True, timeout=120)
    server.start(triggerer=True)
    lat: list[float] = []
    parts: list[tuple[float, float, float, float]] = []
    try:
        server.wait_for("the DAG", lambda: server.exists("/api/v2/dags/mzflow_c"), 300)
        server.wait_for("the watcher", lambda: " starting" in (af / "triggerer.log")
                        .read_text(errors="replace"), 300)
        print("warm cluster c, Airflow with a triggerer up; one INSERT per round", flush=True)
        for r in range(args.rounds + 1):
            before = len(server.runs("mzflow_c"))
            out = subprocess.run([*MZFLOW, "sql", "-c", f"INSERT INTO t VALUES ({5000 + r}, 1)"],
                                 env=env, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr
            ts = commit_ts(home)
            while done_through(home) < ts:
                if time.time() * 1000 - ts > 120_000:
                    print(server.logs())
                    raise SystemExit(f"round {r}: not visible after 120 s")
                time.sleep(0.1)
            took = (time.time() * 1000 - ts) / 1000
            run = server.wait_for("the run's record", lambda b=before: (
                runs := server.runs("mzflow_c"))[b:] and runs[-1]["end_date"] and runs[-1], 60,
                every=0.2)
            # The table's event (the run's own tick emits the index's, later).
            events = server.request("GET", "/api/v2/assets/events?order_by=-timestamp&limit=10")
            event = _ms(next(e["timestamp"] for e in events["asset_events"]  # type: ignore[index]
                             if e["uri"].endswith("/public/t")))
            queued, start, end = (_ms(run[k]) for k in (  # type: ignore[index]
                "queued_at", "start_date", "end_date"))
            assert None not in (event, queued, start, end)
            split = (event - ts, queued - event, start - queued, end - start)  # type: ignore[operator]
            print(f"  round {r}: commit → visible {took:.1f} s  (commit → asset event "
                  f"{split[0] / 1000:.1f} s, → run queued {split[1] / 1000:.1f} s, → run "
                  f"started {split[2] / 1000:.1f} s, run {split[3] / 1000:.1f} s; "
                  f"{run['run_type']})" + (" (warm-up)" if r == 0 else ""),  # type: ignore[index]
                  flush=True)
            if r:
                lat.append(took)
                parts.append(split)
    finally:
        server.stop()
        subprocess.run([*MZFLOW, "cluster", "stop", "c"], env=env, timeout=120,
                       capture_output=True)
    med = statistics.median(lat)
    names = ("commit → asset event", "event → run queued", "queued → started", "run")
    print(f"\nmedian of {len(lat)} rounds: commit → visible {med:.1f} s; target <= "
          f"{TARGET_S:.0f} s: {'met' if med <= TARGET_S else f'MISSED by {med - TARGET_S:.1f} s'}")
    for i, name in enumerate(names):
        print(f"  {name:<22} {statistics.median(p[i] for p in parts) / 1000:5.1f} s")
    return 0



if __name__ == "__main__":
    sys.exit(main())
