"""Screenshots of the Airflow 3 UI showing generated mzflow DAGs and their pools.

    apt-get install chromium-headless-shell      # Debian's headless Chromium
    .venv/bin/python scripts/airflow_screenshot.py [--out docs/img]

Builds the example catalog (conf/example/catalog.sql) in a temporary home, syncs the
pools, starts a real Airflow (api-server, scheduler, dag-processor) on a temporary
AIRFLOW_HOME, triggers the analytics cluster's DAG once through the REST API, and has
headless Chromium capture the DAG, its graph, the pools page and the plugin's pages (the
catalog, the DAG's "mzflow cluster" tab, a cluster's lag chart). Not run by the tests
(tests/test_airflow_ui.py clicks through the plugin).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from mzflow_dev.airflow_server import AirflowServer

REPO = Path(__file__).resolve().parents[1]

CHROMIUM = ("chromium-headless-shell", "chromium", "chromium-browser")


def shoot(browser: str, url: str, out: Path, budget_ms: int = 25000) -> None:
    subprocess.run([browser, "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1600,1000", f"--virtual-time-budget={budget_ms}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=180)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "img"))
    args = parser.parse_args()
    browser = next((b for b in CHROMIUM if shutil.which(b)), None)
    if browser is None:
        sys.exit("no headless Chromium: apt-get install chromium-headless-shell")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mzflow-screenshot-"))
    home, af = work / "home", work / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(REPO / "dags" / "mzflow_catalog.py", af / "dags")
    mz = [sys.executable, "-m", "mzflow.cli", "--home", str(home)]
    server = AirflowServer(af, {**os.environ, "MZFLOW_HOME": str(home)})
    subprocess.run(mz + ["sql", "-f", str(REPO / "conf" / "example" / "catalog.sql")],
                   check=True, capture_output=True)
    subprocess.run(mz + ["sql", "-f", str(REPO / "conf" / "example" / "data.sql")],
                   check=True, capture_output=True)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   env=server.env, check=True, capture_output=True)
    subprocess.run(mz + ["airflow", "sync", "--airflow-home", str(af)], env=server.env,
                   check=True, capture_output=True)
    server.start()
    try:
        server.wait_for("the DAG", lambda: server.exists("/api/v2/dags/mzflow_analytics"), 180)
        # Two runs, the second batch between them: a lag point needs a tick before it.
        for batch in (None, "more.sql"):
            if batch is not None:
                subprocess.run(mz + ["sql", "-f", str(REPO / "conf" / "example" / batch)],
                               check=True, capture_output=True)
            run = server.request("POST", "/api/v2/dags/mzflow_analytics/dagRuns",
                                 {"logical_date": None, "conf": {}})
            run_id = run["dag_run_id"]  # type: ignore[index]
            server.wait_for("the run", lambda r=run_id: server.run_state("mzflow_analytics", r),
                            600)
        time.sleep(3)
        login = f"{server.base}/auth/token/login?next="
        shoot(browser, login + f"{server.base}/dags/mzflow_analytics", out / "airflow-dag.png")
        # The run's task instances (run ids hold '+', which must reach the UI encoded).
        shoot(browser, login + quote(f"{server.base}/dags/mzflow_analytics/runs/"
                                     f"{quote(run_id, safe='')}", safe=":/"),
              out / "airflow-dag-run.png")
        shoot(browser, login + f"{server.base}/pools", out / "airflow-pools.png")
        # The plugin inside Airflow's UI: Browse -> mzflow catalog, and the DAG's tab.
        shoot(browser, login + f"{server.base}/plugin/mzflow", out / "airflow-mzflow-catalog.png")
        shoot(browser, login + f"{server.base}/dags/mzflow_analytics/plugin/mzflow-cluster",
              out / "airflow-mzflow-cluster.png")
        # The cluster's page on its own, its lag chart at the top.
        shoot(browser, login + f"{server.base}/mzflow/cluster/analytics",
              out / "airflow-lag-chart.png", 5000)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
