"""Parse time of the generated-DAG file (dags/mzflow_catalog.py) for a 200-object catalog.

    python bench/dag_parse.py [--objects 200] [--clusters 5] [--runs 7]

Target (issue 5): under one second. The figure is what a dag-processor pays per parse
of the file: each run is a fresh child process that has already imported Airflow
(as the dag-processor has) and then times loading the DAG file — importing mzflow,
reading the catalog, building the DAGs. Also printed: a warm re-parse in the same
process, and Airflow's own DagBag timing of the file (cold, same child).

The catalog: a few tables, then chains of materialized views (each a view plus its
default index: two objects) spread over the clusters, every third one reading the
previous view of another cluster, so DAGs have in-DAG and cross-cluster edges.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mzflow

LOADER = Path(__file__).resolve().parents[1] / "dags" / "mzflow_catalog.py"

_CHILD = """
import json, runpy, sys, time
import airflow.sdk  # the dag-processor has Airflow loaded before it parses a file
from airflow.sdk import DAG
t0 = time.perf_counter()
g = runpy.run_path(sys.argv[1])
cold = time.perf_counter() - t0
dags = [v for v in g.values() if isinstance(v, DAG)]
t0 = time.perf_counter()
runpy.run_path(sys.argv[1])
warm = time.perf_counter() - t0
heavy = [m for m in ("pyspark", "deltalake", "great_expectations") if m in sys.modules]
from airflow.dag_processing.dagbag import DagBag
t0 = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
dagbag = time.perf_counter() - t0
print(json.dumps({"cold": cold, "warm": warm, "dagbag": dagbag, "dags": len(dags),
                  "tasks": sum(len(d.tasks) for d in dags), "heavy": heavy,
                  "errors": list(bag.import_errors.values())}))
"""


def build_catalog(home: str, objects: int, clusters: int) -> int:
    tables = max(2, objects // 20)
    with mzflow.connect(home) as conn:
        for c in range(clusters):
            conn.execute(f"CREATE CLUSTER c{c} SIZE 'small'")
        for t in range(tables):
            conn.execute(f"CREATE TABLE t{t} (k int, v int)")
        count, i = tables, 0
        while count + 2 <= objects:
            c = i % clusters
            if i >= clusters and i % 3 == 0:
                src = f"mv{i - 1}"  # the previous view: another cluster's
            elif i >= clusters:
                src = f"mv{i - clusters}"  # same cluster, earlier in its chain
            else:
                src = f"t{i % tables}"
            conn.execute(f"CREATE MATERIALIZED VIEW mv{i} IN CLUSTER c{c} AS "
                         f"SELECT k, v + {i} AS v FROM {src} WHERE v > {i % 7}")
            count, i = count + 2, i + 1
        while count < objects:  # an odd remainder: a plain view
            conn.execute(f"CREATE VIEW pv{count} AS SELECT k FROM t0")
            count += 1
        return int(conn.execute("SELECT count(*) FROM mz_objects").rows[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="mzflow-bench-dags-")
    started = time.perf_counter()
    n = build_catalog(home, args.objects, args.clusters)
    print(f"catalog: {n} objects in {args.clusters} clusters "
          f"(built in {time.perf_counter() - started:.1f} s)")
    airflow_home = tempfile.mkdtemp(prefix="mzflow-bench-airflow-")
    env = {**os.environ, "MZFLOW_HOME": home, "AIRFLOW_HOME": airflow_home,
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    runs = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(LOADER)], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr[-3000:])
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    last = runs[-1]
    if last["heavy"] or last["errors"]:
        sys.exit(f"parse loaded {last['heavy']} / failed: {last['errors']}")
    for key, what in (("cold", "cold parse (fresh process, Airflow loaded)"),
                      ("warm", "warm re-parse (same process)"),
                      ("dagbag", "Airflow DagBag of the file (after a parse)")):
        ms = sorted(r[key] * 1000 for r in runs)
        print(f"{what:<44} median {statistics.median(ms):7.1f} ms   max {ms[-1]:7.1f} ms")
    print(f"{last['dags']} DAGs, {last['tasks']} tasks; target: cold parse < 1000 ms")


if __name__ == "__main__":
    main()
