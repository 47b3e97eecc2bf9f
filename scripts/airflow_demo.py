"""`make demo`'s Airflow part: the example pipeline's next batch, ticked through Airflow.

    .venv/bin/python scripts/airflow_demo.py HOME

Uses an Airflow home beside the mzflow home (``HOME/../airflow``, its SQLite database
migrated on first use), syncs the pools from the catalog, applies a third batch of
orders, then runs the generated ``mzflow_analytics`` DAG in-process with
``dag.test()`` — the same DAG file, operators and tick as under a scheduler — and
prints the task states and the maintained view.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BATCH = ("INSERT INTO orders VALUES (105, 3, 410.00, '2026-11-05 09:30:00'), "
         "(106, 1, 12.50, '2026-11-05 10:00:00')")


def main() -> int:
    home = Path(sys.argv[1]).resolve()
    af = home.parent / "airflow"
    (af / "dags").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dags" / "mzflow_catalog.py", af / "dags")
    # Airflow reads these once, when first imported (below).
    os.environ.update({"MZFLOW_HOME": str(home), "AIRFLOW_HOME": str(af),
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                       "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",  # keep the demo readable
                       "AIRFLOW__CORE__DAGS_FOLDER": str(af / "dags"),
                       "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{af / 'airflow.db'}"})
    bindir = Path(sys.executable).parent
    if not (af / "airflow.db").exists():
        print(f"== migrating an Airflow database in {af}")
        subprocess.run([str(bindir / "airflow"), "db", "migrate"], check=True,
                       capture_output=True)
    print("== pools from the catalog's clusters (mzflow airflow sync)")
    subprocess.run([str(bindir / "mzflow"), "airflow", "sync"], check=True)

    import mzflow

    with mzflow.connect(str(home)) as conn:
        conn.execute(BATCH)
    print("== a third batch, then the generated DAG mzflow_analytics via dag.test()")
    from mzflow.airflow.dags import load

    dag = load()["mzflow_analytics"]
    started = time.monotonic()
    run = dag.test(run_conf={"objects": [], "full_refresh": False, "at": None})
    took = time.monotonic() - started
    for ti in sorted(run.get_task_instances(), key=lambda t: t.task_id):
        print(f"   {ti.task_id:<28} {str(ti.state).split('.')[-1].lower()}")
    print(f"   run {str(run.state).split('.')[-1].lower()} in {took:.1f} s")
    with mzflow.connect(str(home)) as conn:
        conn.execute("SET cluster = analytics")
        result = conn.execute("SELECT * FROM customer_totals ORDER BY id")
    from mzflow.cli import format_table

    print(format_table(result.columns, result.rows))
    return 0 if str(run.state).endswith("success") else 1


if __name__ == "__main__":
    sys.exit(main())
