"""DAG-as-code example: a user task loads CSV files into an mzflow table, then the
``example_analytics`` cluster's maintenance tasks bring its materialized views up to
date. Everything mzflow-side is declared below; ``deploy`` creates what is missing.

Run it once by hand: ``python dags/examples/orders_pipeline.py`` (``dag.test()``), with
``MZFLOW_HOME`` naming the home and ``ORDERS_INCOMING`` the folder of CSV files.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from mzflow.airflow.dsl import Catalog

INCOMING = Path(os.environ.get("ORDERS_INCOMING", Path(__file__).parent / "data"))

mz = Catalog()  # the configured home (MZFLOW_HOME / conf/mzflow.toml)

# Declarations are plain Python: nothing touches the catalog until deploy runs.
analytics = mz.cluster("example_analytics", size="small")
orders = mz.table("example_orders",
                  "id bigint NOT NULL, customer text NOT NULL, amount int NOT NULL")
big = mz.view("example_big_orders",
              "SELECT id, customer, amount FROM example_orders WHERE amount >= 100")
totals = mz.materialized_view(
    "example_customer_totals",
    "SELECT customer, count(*) AS orders, sum(amount) AS total "
    "FROM example_orders GROUP BY customer", analytics)
big_customers = mz.materialized_view(
    "example_big_customers",
    "SELECT customer, count(*) AS big_orders FROM example_big_orders GROUP BY customer",
    analytics)
mz.index("example_customer_totals_by_total", totals, ["total"], analytics)
# Reads a maintained view: ticks after example_customer_totals.
mz.materialized_view(
    "example_top_customers",
    "SELECT customer, total FROM example_customer_totals WHERE total >= 100", analytics)

with DAG("example_orders", schedule=None, catchup=False, tags=["mzflow", "example"],
         params=mz.params()) as dag:

    @task
    def load_csv_files() -> list[str]:
        """The user's own task: COPY every CSV file not loaded yet. The idempotency key
        (one per file) makes a retried or repeated run load each file exactly once."""
        import mzflow

        loaded = []
        with mzflow.connect(mz.resolved_home, catalog_url=mz.catalog_url) as conn:
            for path in sorted(INCOMING.glob("*.csv")):
                result = conn.execute(
                    f"COPY {orders} FROM '{path}' WITH (FORMAT csv, HEADER true)",
                    idempotency_key=(f"example-orders/{path.name}", 1))
                loaded.append(f"{path.name}: {result.status}")
        return loaded

    mz.deploy() >> load_csv_files() >> mz.maintain(analytics)


if __name__ == "__main__":
    dag.test()
