"""ALTER SCHEMA … SWAP WITH and ALTER CLUSTER … SWAP WITH (issue 38, item 3): Materialize's
swap.slt scenario, references that keep pointing at the same objects (as Materialize's
do, by id), the Airflow DAGs and pools that follow a cluster swap, privileges and errors.
A maintained view is compared with DuckDB over the same rows across a swap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import mzflow
from mzflow.airflow import graph
from mzflow.errors import Error
from mzflow.sql.parse import parse_one


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        c.execute("CREATE SCHEMA blue; CREATE TABLE blue.t1 (x int);"
                  "INSERT INTO blue.t1 VALUES (1), (2), (3);"
                  "CREATE SCHEMA green; CREATE TABLE green.t2 (y int);"
                  "INSERT INTO green.t2 VALUES (4), (5), (6)")
        yield c


def rows(conn: mzflow.Connection, sql: str) -> list[tuple[object, ...]]:
    return sorted(conn.execute(sql).rows)


def test_materializes_swap_slt(conn: mzflow.Connection) -> None:
    """test/sqllogictest/swap.slt of Materialize, statement for statement."""
    with pytest.raises(Error) as e:
        conn.execute("SELECT * FROM blue.t2")
    assert e.value.message == "unknown catalog item 'blue.t2'"
    assert conn.execute("ALTER SCHEMA blue SWAP WITH green").status == "ALTER SCHEMA"
    assert rows(conn, "SELECT * FROM blue.t2") == [(4,), (5,), (6,)]
    conn.execute('CREATE SCHEMA "!\\_""w3😊_weird_name"')
    conn.execute('ALTER SCHEMA blue SWAP WITH "!\\_""w3😊_weird_name"')
    assert rows(conn, 'SELECT * FROM "!\\_""w3😊_weird_name".t2') == [(4,), (5,), (6,)]
    conn.execute("CREATE CLUSTER foo SIZE = 'small'; CREATE CLUSTER bar SIZE = 'small';"
                 "CREATE INDEX green_idx IN CLUSTER foo ON green.t1 (x)")
    where = ("SELECT name FROM mz_clusters JOIN (SELECT cluster_id FROM mz_indexes "
             "WHERE name = 'green_idx') my_index ON mz_clusters.id = my_index.cluster_id")
    assert conn.execute(where).rows == [("foo",)]
    assert conn.execute("ALTER CLUSTER foo SWAP WITH bar").status == "ALTER CLUSTER"
    assert conn.execute(where).rows == [("bar",)]
    conn.execute("DROP CLUSTER foo CASCADE; DROP CLUSTER bar CASCADE")


def test_references_follow_the_objects_not_the_names(conn: mzflow.Connection) -> None:
    conn.execute("CREATE VIEW public.v AS SELECT x FROM blue.t1;"
                 "CREATE VIEW green.w AS SELECT y * 10 AS z FROM green.t2;"
                 "CREATE VIEW public.both AS SELECT z FROM green.w")
    before = {v: rows(conn, f"SELECT * FROM {v}") for v in ("public.v", "public.both")}
    ids = dict(conn.execute("SELECT name, id FROM mz_objects WHERE name IN ('t1', 't2', 'w')"
                            ).rows)
    conn.execute("ALTER SCHEMA blue SWAP WITH green")
    # The same objects under the other schema's name: ids, rows and readers unchanged.
    assert dict(conn.execute("SELECT name, id FROM mz_objects WHERE name IN "
                             "('t1', 't2', 'w')").rows) == ids
    assert {v: rows(conn, f"SELECT * FROM {v}") for v in before} == before
    assert rows(conn, "SELECT * FROM blue.w") == [(40,), (50,), (60,)]
    (_, create), = conn.execute("SHOW CREATE VIEW public.v").rows
    assert '"materialize"."green"."t1"' in create
    (_, create), = conn.execute("SHOW CREATE VIEW public.both").rows
    assert '"materialize"."blue"."w"' in create
    # Every stored statement still parses and names only what exists.
    for item in conn.store.snapshot().items:
        parse_one(item.create_sql)
    # Swapping back restores every name.
    conn.execute("ALTER SCHEMA green SWAP WITH blue")
    (_, create), = conn.execute("SHOW CREATE VIEW public.v").rows
    assert '"materialize"."blue"."t1"' in create


def test_a_cluster_swap_moves_dags_and_pools(conn: mzflow.Connection) -> None:
    conn.execute("CREATE CLUSTER live SIZE = 'small'; CREATE CLUSTER staging SIZE = 'medium';"
                 "CREATE MATERIALIZED VIEW blue.m IN CLUSTER live AS SELECT sum(x) AS s "
                 "FROM blue.t1; CREATE INDEX t2_idx IN CLUSTER staging ON green.t2 (y)")
    before = {d.cluster: [t.index for t in d.tasks] for d in
              graph.cluster_dags(conn.store.snapshot())}
    pools = graph.pools(conn.store.snapshot())
    conn.execute("ALTER CLUSTER live SWAP WITH staging")
    snap = conn.store.snapshot()
    after = {d.cluster: [t.index for t in d.tasks] for d in graph.cluster_dags(snap)}
    assert after == {"staging": before["live"], "live": before["staging"]}
    # A pool's slots come with its cluster's size: the names exchanged them.
    assert graph.pools(snap)["mzflow_live"] == pools["mzflow_staging"]
    assert graph.pools(snap)["mzflow_staging"] == pools["mzflow_live"]
    (_, create), = conn.execute("SHOW CREATE MATERIALIZED VIEW blue.m").rows
    assert 'IN CLUSTER "staging"' in create


@pytest.mark.slow
@pytest.mark.spark
def test_a_maintained_view_stays_right_across_a_swap(conn: mzflow.Connection) -> None:
    conn.execute("CREATE CLUSTER c1 SIZE = 'small';"
                 "CREATE MATERIALIZED VIEW green.totals IN CLUSTER c1 AS "
                 "SELECT y % 2 AS k, count(*) AS n, sum(y) AS s FROM green.t2 GROUP BY y % 2")
    conn.tick()
    conn.execute("ALTER SCHEMA blue SWAP WITH green; INSERT INTO blue.t2 VALUES (7), (8)")
    conn.tick()
    got = rows(conn, "SELECT k, n, s FROM blue.totals")
    table = rows(conn, "SELECT y FROM blue.t2")
    oracle = duckdb.sql("SELECT y % 2, count(*), sum(y) FROM (VALUES "
                        + ", ".join(f"({y})" for (y,) in table) + ") v(y) GROUP BY 1").fetchall()
    assert got == sorted(oracle)


def test_errors_and_privileges(conn: mzflow.Connection, tmp_path: Path) -> None:
    cases = {
        "ALTER SCHEMA blue SWAP WITH blue": "cannot swap schema 'blue' with itself",
        "ALTER SCHEMA blue SWAP WITH nope": "unknown schema 'nope'",
        "ALTER SCHEMA mz_catalog SWAP WITH blue": "cannot swap system schema 'mz_catalog'",
        "ALTER CLUSTER default SWAP WITH nope": "unknown cluster 'nope'",
    }
    for sql, message in cases.items():
        with pytest.raises(Error) as e:
            conn.execute(sql)
        assert e.value.message == message, sql
    with pytest.raises(Error) as e:
        conn.execute("ALTER SCHEMA blue RENAME TO pink")
    assert "Expected SWAP WITH" in e.value.message
    conn.execute("CREATE ROLE joe LOGIN; GRANT CREATE ON DATABASE materialize TO joe")
    with mzflow.connect(str(tmp_path / "home"), role="joe") as joe:
        joe.execute("CREATE SCHEMA mine")
        with pytest.raises(mzflow.InsufficientPrivilege) as denied:
            joe.execute("ALTER SCHEMA mine SWAP WITH blue")  # joe does not own blue
        assert "must be owner of" in denied.value.message
    assert rows(conn, "SELECT * FROM blue.t1") == [(1,), (2,), (3,)]


def test_a_transaction_of_swaps_commits_them_together(conn: mzflow.Connection) -> None:
    """dbt-materialize's deploy_promote: BEGIN; the schemas' swaps; the clusters'; COMMIT."""
    conn.execute("CREATE CLUSTER prod SIZE = 'small'; CREATE CLUSTER prod_dbt_deploy "
                 "SIZE = 'medium'; CREATE VIEW blue.v IN CLUSTER prod AS SELECT x FROM blue.t1;"
                 "CREATE INDEX v_idx IN CLUSTER prod ON blue.v (x)")
    conn.execute("CREATE SCHEMA blue_dbt_deploy; CREATE TABLE blue_dbt_deploy.t1 (x int);"
                 "INSERT INTO blue_dbt_deploy.t1 VALUES (10)")
    version = conn.store.snapshot().version
    assert conn.execute("BEGIN").status == "BEGIN"
    assert conn.execute('ALTER SCHEMA "blue" SWAP WITH "blue_dbt_deploy"').status == (
        "ALTER SCHEMA")
    assert conn.execute('ALTER CLUSTER "prod" SWAP WITH "prod_dbt_deploy"').status == (
        "ALTER CLUSTER")
    # Nothing has happened yet, for this session or any other.
    assert conn.store.snapshot().version == version
    with pytest.raises(Error) as e:
        conn.execute("CREATE TABLE public.x (a int)")
    assert e.value.message == "this transaction can only execute a single statement"
    conn.execute("ROLLBACK")
    assert rows(conn, "SELECT * FROM blue.t1") == [(1,), (2,), (3,)]
    conn.execute('BEGIN; ALTER SCHEMA "blue" SWAP WITH "blue_dbt_deploy"; '
                 'ALTER CLUSTER "prod" SWAP WITH "prod_dbt_deploy"; COMMIT')
    assert conn.store.snapshot().version == version + 1  # one catalog transaction
    assert rows(conn, "SELECT * FROM blue.t1") == [(10,)]
    assert rows(conn, "SELECT * FROM blue_dbt_deploy.v") == [(1,), (2,), (3,)]
    (_, create), = conn.execute("SHOW CREATE INDEX blue_dbt_deploy.v_idx").rows
    assert 'IN CLUSTER "prod_dbt_deploy"' in create
    assert '"materialize"."blue_dbt_deploy"."v"' in create
    # A failing swap undoes the ones before it in its transaction.
    with pytest.raises(Error) as e:
        conn.execute("BEGIN; ALTER SCHEMA blue SWAP WITH green; "
                     "ALTER CLUSTER prod SWAP WITH nope; COMMIT")
    assert e.value.message == "unknown cluster 'nope'"
    conn.execute("ROLLBACK")
    assert rows(conn, "SELECT * FROM green.t2") == [(4,), (5,), (6,)]
    assert conn.store.snapshot().version == version + 1
