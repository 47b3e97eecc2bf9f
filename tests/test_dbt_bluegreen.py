"""dbt-materialize's blue/green deployment against ``mzflow serve`` (issue 38, item 4), as
Materialize's guide runs it: ``dbt run-operation deploy_init``, ``dbt run --vars 'deploy:
True'``, ``deploy_await``, ``deploy_promote``, ``deploy_cleanup``, over the project in
tests/dbt_bluegreen (a view and a materialized view with an index, in the schema and
cluster ``analytics``, over a table loaded outside dbt).

Checked through SQL after each step: the deployment schema and cluster are made like
production's, with its grants and default privileges; deploy_await waits while the
staged objects are not hydrated (mzflow hydrates a cluster when it ticks: here the test
ticks it, as the cluster's Airflow DAG would) and returns once they are; after the
promotion the production names hold the new definitions, whose rows equal DuckDB's
answer over the same table (rows written during the deployment included), and the old
objects, the same ids, sit in the deployment schema and cluster until deploy_cleanup
drops them. A role given SELECT by a default privilege reads the new version."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import mzflow
from mzflow_dev import dbt

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PROJECT = Path(__file__).resolve().parent / "dbt_bluegreen"
PASSWORD = dbt.PASSWORD
DEPLOY = "analytics_dbt_deploy"
ORDERS = [(1, 1, Decimal("10.50"), "placed"), (2, 1, Decimal("3.00"), "returned"),
          (3, 2, Decimal("7.25"), "shipped"), (4, 3, Decimal("1.00"), "placed")]
LATER = [(5, 1, Decimal("20.00"), "shipped"), (6, 4, Decimal("2.50"), "placed")]
V1 = "select customer_id, count(*) as orders, sum(amount) as total"
V2 = "select customer_id, count(*) as orders, sum(amount) as total, max(amount) as biggest"


class Served(dbt.Served):
    def objects(self) -> dict[tuple[str, str], tuple[str, str | None]]:
        """(schema, name) → (id, cluster) of every user object but the source table."""
        rows = self.sql("SELECT s.name, o.name, o.id, c.name FROM mz_objects o "
                        "JOIN mz_schemas s ON o.schema_id = s.id "
                        "LEFT JOIN mz_clusters c ON c.id::text = o.cluster_id "
                        "WHERE o.id LIKE 'u%' AND s.name <> 'raw'")
        return {(str(s), str(n)): (str(i), None if c is None else str(c))
                for s, n, i, c in rows}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("bluegreen")
    home, project = base / "home", base / "project"
    shutil.copytree(PROJECT, project)
    rows = ", ".join(f"({o}, {c}, {a}, '{s}')" for o, c, a, s in ORDERS)
    with mzflow.connect(str(home)) as conn:
        conn.execute(
            f"CREATE ROLE dbt WITH LOGIN SUPERUSER PASSWORD '{PASSWORD}';"
            f"CREATE ROLE reader WITH LOGIN PASSWORD '{PASSWORD}';"
            "CREATE SCHEMA raw; CREATE TABLE raw.orders (order_id bigint, customer_id bigint, "
            f"amount numeric(10,2), status text); INSERT INTO raw.orders VALUES {rows};"
            "CREATE SCHEMA analytics; CREATE CLUSTER analytics SIZE 'xsmall';"
            # what a reader of production is given: its schema and cluster, and SELECT on
            # whatever dbt creates there from now on
            "GRANT USAGE ON SCHEMA raw TO reader; GRANT SELECT ON raw.orders TO reader;"
            "GRANT USAGE ON SCHEMA analytics TO reader; GRANT USAGE ON CLUSTER analytics "
            "TO reader; ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA analytics "
            "GRANT SELECT ON TABLES TO reader")
    with dbt.serving(home, project) as s:
        yield Served(s.port, s.home, s.project, s.env, s.dbt)


def expected(query: str, orders: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The materialized view's rows, from DuckDB over the same orders."""
    with duckdb.connect() as db:
        db.execute("CREATE TABLE orders (order_id BIGINT, customer_id BIGINT, "
                   "amount DECIMAL(10,2), status VARCHAR)")
        db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
        return db.execute(f"{query} FROM (SELECT * FROM orders WHERE status <> 'returned') "
                          "GROUP BY customer_id ORDER BY customer_id").fetchall()


def totals(served: Served, user: str = "dbt") -> list[tuple[object, ...]]:
    return served.sql("SELECT * FROM analytics.customer_totals ORDER BY customer_id",
                      cluster="analytics", user=user)


def grants_to(served: Served, kind: str, name: str, grantee: str) -> set[str]:
    """What ``grantee`` holds on a schema or cluster, read as deploy_init reads it."""
    table = "mz_schemas" if kind == "schema" else "mz_clusters"
    return {str(p) for (p,) in served.sql(
        f"SELECT a.privilege_type FROM (SELECT mz_internal.mz_aclexplode(privileges).* "
        f"FROM {table} WHERE name = '{name}') a JOIN mz_roles r ON a.grantee = r.id "
        f"WHERE r.name = '{grantee}'")}


def await_deployment(served: Served) -> tuple[subprocess.Popen[str], list[str]]:
    """deploy_await, started; returns once it has reported the cluster hydrating."""
    proc = subprocess.Popen(
        [str(served.dbt), "run-operation", "deploy_await", "--args", "{poll_interval: 1}",
         "--no-version-check"], cwd=served.project, env=served.env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if f"{DEPLOY}: hydrating (0/2 objects)" in line:
            return proc, lines
    raise AssertionError("deploy_await ended without waiting: " + "".join(lines)[-3000:])


def test_blue_green_deployment_with_dbt_materialize(served: Served) -> None:
    served.dbt_run("run")
    assert totals(served) == expected(V1, ORDERS)
    v1 = served.objects()
    assert v1[("analytics", "customer_totals_primary_idx")][1] == "analytics"
    assert totals(served, user="reader") == expected(V1, ORDERS)

    # The change: a new column. deploy_init stages a schema and a cluster like
    # production's, with its grants and default privileges.
    model = served.project / "models" / "customer_totals.sql"
    model.write_text(model.read_text().replace(V1, V2))
    served.dbt_run("run-operation", "deploy_init")
    assert served.sql(f"SELECT size, replication_factor, managed FROM mz_clusters WHERE "
                      f"name IN ('analytics', '{DEPLOY}')") == [("xsmall", 1, True)] * 2
    assert grants_to(served, "schema", DEPLOY, "reader") == {"USAGE"}
    assert grants_to(served, "cluster", DEPLOY, "reader") == {"USAGE"}
    assert served.sql("SELECT schema, object_type, grantee, privilege_type FROM "
                      "mz_internal.mz_show_default_privileges ORDER BY schema") == [
        ("analytics", "table", "reader", "SELECT"), (DEPLOY, "table", "reader", "SELECT")]

    served.dbt_run("run", "--vars", "deploy: True")
    staged = {key: value for key, value in served.objects().items() if key not in v1}
    assert {key for key in staged} == {(DEPLOY, name) for _, name in v1}
    assert {cluster for _, cluster in staged.values()} == {None, DEPLOY}
    assert totals(served) == expected(V1, ORDERS)  # production is untouched

    # deploy_await polls while the staged objects have not hydrated; writes go on.
    proc, lines = await_deployment(served)
    later = ", ".join(f"({o}, {c}, {a}, '{s}')" for o, c, a, s in LATER)
    served.sql(f"INSERT INTO raw.orders VALUES {later}")
    with mzflow.connect(str(served.home)) as conn:
        ticked = conn.tick(cluster=DEPLOY)  # what the cluster's Airflow DAG does
    assert len(ticked) == 2 and all(r.error is None for r in ticked)
    out, _ = proc.communicate(timeout=600)
    lines.append(out)
    assert proc.returncode == 0, "".join(lines)[-3000:]
    assert f"{DEPLOY}: ready (hydration: 2/2" in "".join(lines)

    served.dbt_run("run-operation", "deploy_promote")
    after = served.objects()
    assert after.keys() == v1.keys() | staged.keys()
    # Production's names hold the staged objects, in the cluster now called analytics;
    # the old ones, the same ids, are in the deployment schema and cluster.
    for (_, name), (item_id, cluster) in staged.items():
        assert after[("analytics", name)] == (item_id, cluster and "analytics")
    for (_, name), (item_id, cluster) in v1.items():
        assert after[(DEPLOY, name)] == (item_id, cluster and DEPLOY)
    (definition,), = served.sql("SELECT definition FROM mz_materialized_views m "
                                "JOIN mz_schemas s ON m.schema_id = s.id "
                                "WHERE s.name = 'analytics'")
    assert "max(amount) as biggest" in str(definition).lower()
    everything = ORDERS + LATER
    assert totals(served) == expected(V2, everything)
    assert served.sql(f"SELECT * FROM {DEPLOY}.customer_totals ORDER BY customer_id",
                      cluster=DEPLOY) == expected(V1, everything)
    # The reader reads the new version: SELECT from the default privilege deploy_init
    # copied, USAGE on the schema and cluster from the grants it copied.
    assert totals(served, user="reader") == expected(V2, everything)
    (comment,), = served.sql("SELECT c.comment FROM mz_internal.mz_comments c "
                             "JOIN mz_schemas s ON c.id = s.id WHERE s.name = 'analytics'")
    assert "Deployment by dbt" in str(comment)

    served.dbt_run("run-operation", "deploy_cleanup")
    assert served.objects() == {key: after[key] for key in after if key[0] == "analytics"}
    assert served.sql(f"SELECT count(*) FROM mz_clusters WHERE name = '{DEPLOY}'") == [(0,)]
    assert served.sql(f"SELECT count(*) FROM mz_schemas WHERE name = '{DEPLOY}'") == [(0,)]
    assert totals(served) == expected(V2, everything)

