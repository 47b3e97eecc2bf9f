"""Sources as catalog objects (issue 37, items 2 and 3): CREATE SOURCE … FROM LOAD
GENERATOR and FROM FILES, fed by their cluster's tick one step at a time, exactly once
per step; SHOW SOURCES, mz_sources, DROP SOURCE and refused writes. Expected rows come
from the generator itself (sources/loadgen.py) and from DuckDB reading the same files,
never from constants."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import mzflow
from mzflow.errors import DependentObjects, Error, UnknownObject, WrongObjectType
from mzflow.sources import loadgen
from mzflow.sql import ast
from mzflow.sql.parse import parse_one
from mzflow.storage import paths

AUCTION = "CREATE SOURCE a IN CLUSTER work FROM LOAD GENERATOR AUCTION FOR ALL TABLES"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        c.execute("CREATE CLUSTER work")
        yield c


def _gen(sql: str) -> loadgen.Generator:
    stmt = parse_one(sql)
    assert isinstance(stmt, ast.CreateSource)
    return loadgen.of(stmt)


def _expected(gen: loadgen.Generator, steps: int) -> dict[str, Counter[tuple[object, ...]]]:
    """Every row steps 0 … steps-1 generate, per table (a multiset)."""
    out: dict[str, Counter[tuple[object, ...]]] = {t: Counter() for t in gen.tables}
    for n in range(steps):
        for table, data in gen.step(n).items():
            out[table].update(tuple(r.values()) for r in data.to_pylist())
    return out


def _rows(conn: mzflow.Connection, table: str, columns: list[str]
          ) -> Counter[tuple[object, ...]]:
    return Counter(conn.execute(f"SELECT {', '.join(columns)} FROM {table}").rows)


def _counter(conn: mzflow.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT counter FROM c ORDER BY 1").rows]


def test_create_source_round_trips_its_statement() -> None:
    from mzflow.catalog import normalize

    for sql in ("CREATE SOURCE c IN CLUSTER w FROM LOAD GENERATOR COUNTER (UP TO 3)",
                "CREATE SOURCE f FROM FILES '/land' (FORMAT csv, PATTERN '*.csv') "
                "(a INT, b TEXT) WITH (SCHEMA EVOLUTION = 'add columns')"):
        once = normalize.sql(parse_one(sql))
        assert normalize.sql(parse_one(once)) == once


def test_a_cluster_tick_advances_a_counter_by_exactly_one_step(conn: mzflow.Connection
                                                               ) -> None:
    conn.execute("CREATE SOURCE c IN CLUSTER work FROM LOAD GENERATOR COUNTER "
                 "(TICK INTERVAL '1s')")
    gen = _gen("CREATE SOURCE c FROM LOAD GENERATOR COUNTER")
    assert _counter(conn) == []  # Materialize's counter: an empty snapshot
    conn.tick(cluster="work")
    assert _counter(conn) == [v for t in gen.step(1).values() for v in t.column(0).to_pylist()]
    conn.tick(cluster="default")  # another cluster's tick leaves the source alone
    assert len(_counter(conn)) == 1
    conn.tick(cluster="work")
    conn.tick()  # every cluster's tick: every source's step
    assert _counter(conn) == sorted(r[0] for r in _expected(gen, 4)["counter"])


def test_a_retried_tick_does_not_duplicate(conn: mzflow.Connection) -> None:
    conn.execute(AUCTION)
    gen = _gen(AUCTION)
    source = conn.store.snapshot().find("a", "public", )
    assert source is not None and source.is_source
    # An Airflow run's tick carries its time: the same run retried advances nothing.
    at = conn.store.snapshot().read_ts
    conn.tick(cluster="work", at=at)
    conn.tick(cluster="work", at=at)
    # A tick killed after its commits but before its progress: the next repeats the
    # step (its rows land once: the txn ids), then goes on.
    paths.source_progress(conn.config.warehouse, source.id).write_text(
        json.dumps({"step": 0, "tick": None}))
    conn.tick(cluster="work")
    # A tick killed between two tables' commits: auctions of step 2 are in, bids not.
    conn.writes.append(parse_one("SELECT * FROM auctions").args["from_"].this,
                       gen.step(2)["auctions"], (f"source-{source.id}", 2))
    conn.tick(cluster="work")
    expected = _expected(gen, 3)
    for table, cols in gen.tables.items():
        assert _rows(conn, table, [c for c, _ in cols]) == expected[table], table


def test_show_sources_mz_sources_and_drop(conn: mzflow.Connection) -> None:
    conn.execute("CREATE SCHEMA other")
    conn.execute("CREATE SOURCE c FROM LOAD GENERATOR COUNTER")
    conn.execute(AUCTION)
    conn.execute("CREATE SOURCE other.c2 IN CLUSTER work FROM LOAD GENERATOR COUNTER")
    assert sorted(conn.execute("SHOW SOURCES").rows) == [
        ("a", "load-generator", "work", ""), ("c", "load-generator", "default", "")]
    assert conn.execute("SHOW SOURCES IN CLUSTER work").rows == [
        ("a", "load-generator", "work", "")]
    assert [r[0] for r in conn.execute("SHOW SOURCES FROM other").rows] == ["c2"]
    # A source is not a table; its subsources are (Materialize's tables from sources).
    assert sorted(r[0] for r in conn.execute("SHOW TABLES").rows) == sorted(
        loadgen.AUCTION_TABLES)
    rows = conn.execute("SELECT s.name, s.type, s.cluster_id = c.id::text, s.owner_id, "
                        "s.create_sql FROM mz_sources s JOIN mz_clusters c "
                        "ON c.name = 'work' WHERE s.name = 'a'").rows
    assert rows[0][:4] == ("a", "load-generator", True, "u1")
    assert "LOAD GENERATOR" in rows[0][4] and "FOR ALL TABLES" in rows[0][4]
    columns = conn.execute("SELECT * FROM mz_sources LIMIT 0").columns
    assert columns == ["id", "oid", "schema_id", "name", "type", "connection_id", "size",
                       "envelope_type", "key_format", "value_format", "cluster_id",
                       "owner_id", "privileges", "create_sql", "redacted_create_sql"]
    types = dict(conn.execute("SELECT name, type FROM mz_objects WHERE name IN ('a', 'c', "
                              "'bids')").rows)
    assert types == {"a": "source", "c": "source", "bids": "table"}
    assert {"a", "c", "bids"} <= {r[0] for r in conn.execute("SHOW OBJECTS").rows}
    # A source's owner holds what a source allows: SELECT, never INSERT.
    acl = dict(conn.execute("SELECT name, privileges FROM mz_sources").rows)
    assert acl["c"] == acl["a"] == "{u1=r/u1}"
    assert "LOAD GENERATOR COUNTER" in conn.execute("SHOW CREATE SOURCE c").rows[0][1]
    conn.execute("CREATE VIEW big AS SELECT * FROM bids WHERE amount > 50")
    with pytest.raises(DependentObjects, match="still depended upon by catalog item"):
        conn.execute("DROP SOURCE a")
    with pytest.raises(DependentObjects, match="fed by source"):
        conn.execute("DROP TABLE bids")
    with pytest.raises(WrongObjectType, match="is not a table"):
        conn.execute("DROP TABLE c")
    with pytest.raises(WrongObjectType, match="is not a source"):
        conn.execute("DROP SOURCE big")
    with pytest.raises(UnknownObject, match="unknown catalog item 'nope'"):
        conn.execute("DROP SOURCE nope")
    assert conn.execute("DROP SOURCE IF EXISTS nope").notices == [
        'source "nope" does not exist, skipping']
    conn.execute("DROP SOURCE a CASCADE")
    names = {r[0] for r in conn.execute("SELECT name FROM mz_objects").rows}
    assert names.isdisjoint({"a", "big", *loadgen.AUCTION_TABLES})
    conn.execute("DROP SOURCE c")
    assert conn.execute("SHOW SOURCES").rows == []
    conn.tick()  # no source left to feed: nothing fails


def test_writes_to_a_sources_tables_are_refused(conn: mzflow.Connection,
                                                tmp_path: Path) -> None:
    conn.execute("CREATE SOURCE c FROM LOAD GENERATOR COUNTER")
    conn.execute(AUCTION)
    (tmp_path / "one.csv").write_text("7\n")
    for sql, verb in (("INSERT INTO c VALUES (1)", "insert into"),
                      ("INSERT INTO bids (id) VALUES (1)", "insert into"),
                      ("UPDATE users SET name = 'x'", "update"),
                      ("DELETE FROM c", "delete from"),
                      (f"COPY c FROM '{tmp_path / 'one.csv'}'", "copy into")):
        with pytest.raises(WrongObjectType, match=f"cannot {verb} source"):
            conn.execute(sql)
    conn.execute("BEGIN")
    with pytest.raises(WrongObjectType, match="cannot insert into source"):
        conn.execute("INSERT INTO c VALUES (2)")
    conn.execute("ROLLBACK")
    assert _counter(conn) == []
    with pytest.raises(Error, match="already exists"):
        conn.execute("CREATE TABLE users (x int)")
    assert conn.execute("CREATE SOURCE IF NOT EXISTS c FROM LOAD GENERATOR COUNTER"
                        ).notices == ['source "c" already exists, skipping']


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _duck(files: list[Path], columns: str) -> Counter[tuple[object, ...]]:
    rel = duckdb.sql(f"SELECT {columns} FROM read_csv({[str(f) for f in files]!r}, "
                     "header = true, union_by_name = true)")
    return Counter(rel.fetchall())


def _history(conn: mzflow.Connection) -> dict[str, tuple[object, object]]:
    return {Path(str(p)).name: (s, e) for p, s, e in conn.execute(
        "SELECT path, status, error FROM mz_internal.mz_copy_history").rows}


def test_files_source_loads_each_new_file_once_and_a_bad_file_fails_alone(
        conn: mzflow.Connection, tmp_path: Path) -> None:
    land = tmp_path / "land"
    first = _csv(land / "f1.csv", "id,name", ["1,a", "2,b"])
    conn.execute(f"CREATE SOURCE f IN CLUSTER work FROM FILES '{land}' "
                 "(FORMAT csv, PATTERN '*.csv')")
    # The columns come from the first file.
    assert conn.execute("SHOW COLUMNS FROM f").rows == [
        ("id", True, "bigint", ""), ("name", True, "text", "")]
    assert _rows(conn, "f", ["id", "name"]) == _duck([first], "id, name")
    second = _csv(land / "f2.csv", "id,name", ["3,c"])
    bad = _csv(land / "f3.csv", "id,name", ["4,d,extra"])
    wider = _csv(land / "f4.csv", "id,name,city", ["5,e,x"])
    (land / "notes.txt").write_text("not matched by the pattern\n")
    conn.tick(cluster="work")
    conn.tick(cluster="work")  # nothing new: nothing loads twice
    assert _rows(conn, "f", ["id", "name"]) == _duck([first, second], "id, name")
    history = _history(conn)
    assert history["f1.csv"][0] == history["f2.csv"][0] == "loaded"
    assert history["f3.csv"][0] == "failed" and "f3.csv" in str(history["f3.csv"][1])
    assert history["f4.csv"][0] == "failed"
    assert 'has column "city"' in str(history["f4.csv"][1])
    # A fixed file with the same name loads once it changes.
    _csv(land / "f3.csv", "id,name", ["4,d"])
    conn.tick(cluster="work")
    assert _rows(conn, "f", ["id", "name"]) == _duck([first, second, bad], "id, name")
    with pytest.raises(WrongObjectType, match="cannot insert into source"):
        conn.execute("INSERT INTO f VALUES (9, 'z')")
    assert wider.exists()


def test_files_source_schema_evolution_adds_columns(conn: mzflow.Connection,
                                                    tmp_path: Path) -> None:
    land = tmp_path / "land"
    first = _csv(land / "f1.csv", "id,name", ["1,a"])
    conn.execute(f"CREATE SOURCE f IN CLUSTER work FROM FILES '{land}' "
                 "(FORMAT csv, PATTERN '*.csv') WITH (SCHEMA EVOLUTION = 'add columns')")
    conn.execute("CREATE VIEW v AS SELECT * FROM f")  # pinned to the first version
    wider = _csv(land / "f2.csv", "id,name,city", ["2,b,berlin"])
    conn.tick(cluster="work")
    assert [r[0] for r in conn.execute("SHOW COLUMNS FROM f").rows] == ["id", "name", "city"]
    assert _rows(conn, "f", ["id", "name", "city"]) == _duck([first, wider],
                                                             "id, name, city")
    assert conn.execute("SELECT * FROM v LIMIT 0").columns == ["id", "name"]
    assert {s for s, _ in _history(conn).values()} == {"loaded"}
    assert "FROM FILES" in conn.execute("SHOW CREATE SOURCE f").rows[0][1]


def test_files_source_errors(conn: mzflow.Connection, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Error, match="cannot infer the columns"):
        conn.execute(f"CREATE SOURCE f FROM FILES '{empty}' (FORMAT csv)")
    with pytest.raises(Error, match="unknown FILES format XML"):
        conn.execute(f"CREATE SOURCE f FROM FILES '{empty}' (FORMAT xml) (a int)")
    with pytest.raises(Error, match="invalid SCHEMA EVOLUTION"):
        conn.execute(f"CREATE SOURCE f FROM FILES '{empty}' (FORMAT csv) (a int) "
                     "WITH (SCHEMA EVOLUTION = 'anything')")
    conn.execute(f"CREATE SOURCE f FROM FILES '{empty}' (FORMAT parquet) (a int)")
    assert conn.execute("SELECT count(*) FROM f").rows == [(0,)]


@pytest.mark.slow  # starts tpchgen-cli, and Spark for the deletes
@pytest.mark.spark
def test_tpch_source_has_the_8_tables_and_ticks_add_refresh_batches(
        conn: mzflow.Connection) -> None:
    sql = "CREATE SOURCE t FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.001) FOR ALL TABLES"
    conn.execute(sql)
    gen = _gen(sql)
    tables = gen.step(0)
    for step in (1, 2):  # each refresh: RF1's new orders and line items, RF2's deletes
        conn.tick()
        for t, rows in gen.step(step).items():
            tables[t] = pa.concat_tables([tables[t], rows])
        for t, (column, keys) in gen.removals(step).items():
            tables[t] = tables[t].filter(pc.invert(pc.is_in(tables[t].column(column),
                                                            value_set=pa.array(keys))))
        assert gen.removals(step)["orders"][1], step  # the step does delete
        got = {t: conn.execute(f"SELECT count(*) FROM {t}").rows[0][0] for t in tables}
        assert got == {t: rows.num_rows for t, rows in tables.items()}, step
    keys = sorted(r[0] for r in conn.execute("SELECT o_orderkey FROM orders").rows)
    assert keys == sorted(tables["orders"].column("o_orderkey").to_pylist())


@pytest.mark.slow  # ticks a maintained view on Spark
@pytest.mark.spark
def test_a_materialized_view_over_auction_equals_a_recompute_and_duckdb(
        conn: mzflow.Connection) -> None:
    view = ("SELECT u.org_id, count(*) AS n, sum(b.amount) AS total FROM bids b "
            "JOIN users u ON u.id = b.buyer GROUP BY u.org_id")
    conn.execute(AUCTION)
    conn.execute(f"CREATE MATERIALIZED VIEW per_org IN CLUSTER work AS {view}")
    gen = _gen(AUCTION)
    db = duckdb.connect()
    for steps in (2, 4):
        while True:  # ticks until the source has committed steps 0 … steps-1
            progress = json.loads(paths.source_progress(
                conn.config.warehouse, conn.store.snapshot().find("a").id).read_text())
            if progress["step"] >= steps - 1:
                break
            reports = conn.tick(cluster="work")
            assert all(r.error is None for r in reports)
        for table in ("bids", "users"):
            batches = [gen.step(n)[table] for n in range(steps) if table in gen.step(n)]
            db.register(table, pa.concat_tables(batches))
        conn.execute("SET cluster = work; SET transaction_isolation = 'serializable'")
        maintained = sorted(conn.execute("SELECT * FROM per_org").rows)
        conn.execute("RESET transaction_isolation; SET cluster = default")
        recomputed = sorted(conn.execute(view).rows)
        oracle = sorted(db.execute(view).fetchall())
        norm = [[tuple(int(v) for v in r) for r in rows]
                for rows in (maintained, recomputed, oracle)]
        assert norm[0] == norm[1] == norm[2]


def test_every_tick_entry_point_advances_the_clusters_sources(conn: mzflow.Connection
                                                              ) -> None:
    """``mzflow tick``, the cluster's tick service (which Airflow's tasks ask) and an
    Airflow run's time: one step per cluster tick, none more for the same run."""
    from mzflow import cli
    from mzflow.session import tick_server

    conn.execute("CREATE SOURCE c IN CLUSTER work FROM LOAD GENERATOR COUNTER")
    work = conn.store.snapshot().cluster_by_name("work").id
    cli._tick(conn, "work", None, None)
    assert len(_counter(conn)) == 1
    tick_server.handle(conn, work, {"op": "tick", "object": None, "at": None})
    assert len(_counter(conn)) == 2
    at = conn.store.snapshot().read_ts
    for _ in range(3):  # one run's tasks (or its retries) share its time
        answer = tick_server.handle(conn, work, {"op": "tick", "object": None, "at": at})
        assert "error" not in answer
    assert _counter(conn) == [1, 2, 3]
    cli._tick(conn, "default", None, None)  # another cluster's tick
    assert len(_counter(conn)) == 3


def test_a_clusters_dag_runs_on_its_sources_tick_interval(conn: mzflow.Connection) -> None:
    """No write triggers a cluster that only reads its own sources: its DAG runs on
    their TICK INTERVAL (a minute at least: cron's grain), its objects' policy first."""
    from mzflow.airflow import graph

    conn.execute("CREATE CLUSTER slow")
    conn.execute("CREATE SOURCE c IN CLUSTER work FROM LOAD GENERATOR COUNTER "
                 "(TICK INTERVAL '5 minutes')")
    conn.execute("CREATE SOURCE d IN CLUSTER slow FROM LOAD GENERATOR COUNTER")
    conn.execute("CREATE MATERIALIZED VIEW n IN CLUSTER work AS SELECT count(*) FROM c")
    conn.execute("CREATE MATERIALIZED VIEW m IN CLUSTER slow WITH (REFRESH EVERY '1 day') "
                 "AS SELECT count(*) FROM d")
    dags = {d.cluster: d for d in graph.cluster_dags(conn.store.snapshot())}
    assert dags["work"].refresh is not None
    assert dags["work"].refresh.crons == ("*/5 * * * *",)
    assert dags["slow"].refresh is not None and dags["slow"].refresh.crons != (
        "* * * * *",)  # REFRESH EVERY keeps its own schedule
    with pytest.raises(Error, match="TICK INTERVAL"):
        conn.execute("CREATE SOURCE e FROM LOAD GENERATOR COUNTER (TICK INTERVAL '0s')")


def test_a_deploy_plan_leaves_sources_alone(conn: mzflow.Connection) -> None:
    from mzflow.deploy import plan

    conn.execute("CREATE SOURCE c FROM LOAD GENERATOR COUNTER")
    conn.execute(AUCTION)
    made = plan.make(conn.store.snapshot(), conn.config.warehouse,
                     "CREATE CLUSTER work; CREATE TABLE t (a int);")
    assert [(c.action, c.name) for c in made.changes] == [
        ("create", "materialize.public.t")]


def test_a_parquet_files_source_infers_types_and_evolves(conn: mzflow.Connection,
                                                         tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    land = tmp_path / "land"
    land.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "x": [0.5, 1.5]}),
                   land / "a.parquet")
    conn.execute(f"CREATE SOURCE p IN CLUSTER work FROM FILES '{land}' "
                 "(FORMAT parquet) WITH (SCHEMA EVOLUTION = 'add columns')")
    assert conn.execute("SHOW COLUMNS FROM p").rows == [
        ("id", True, "integer", ""), ("x", True, "double precision", "")]
    pq.write_table(pa.table({"id": pa.array([3], pa.int32()), "x": [2.5], "tag": ["new"]}),
                   land / "b.parquet")
    (land / "c.parquet").write_bytes(b"PAR1 not really parquet")
    conn.tick(cluster="work")
    want = Counter(duckdb.sql(f"SELECT id, x, tag FROM read_parquet('{land}/[ab].parquet', "
                              "union_by_name = true)").fetchall())
    assert _rows(conn, "p", ["id", "x", "tag"]) == want
    history = _history(conn)
    assert history["c.parquet"][0] == "failed" and history["b.parquet"][0] == "loaded"
