"""The catalog on a real PostgreSQL server (the production store), not SQLite.

Each test gets its own fresh database on the one server ``pg_url`` starts, so the
tests are independent and can run in any order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

import mzflow
from mzflow.catalog import migrations
from mzflow_dev import pg_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def catalog_url(pg_url: str) -> str:
    """A fresh, empty database on the test server."""
    return pg_server.create_database(pg_url)


def _connect(tmp_path: Path, url: str) -> mzflow.Connection:
    return mzflow.connect(str(tmp_path), catalog_url=url)


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    """Read the catalog tables directly, bypassing mzflow."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(sql)]
    finally:
        engine.dispose()


def _run_together(fns: list[Callable[[], None]]) -> list[BaseException]:
    """Run ``fns`` in threads that start at the same moment; return what they raised."""
    barrier = threading.Barrier(len(fns))
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a catalog writer hung"
    return errors


def test_catalog_lives_in_postgres_and_starts_with_default_cluster(
        tmp_path: Path, catalog_url: str) -> None:
    with _connect(tmp_path, catalog_url) as conn:
        assert conn.store.engine.dialect.name == "postgresql"
        assert conn.execute("SELECT * FROM mz_clusters").rows == [(1, "default")]
        assert conn.execute("SHOW CLUSTERS").rows == [("default",)]
    assert not (tmp_path / "catalog.db").exists()
    assert _rows(catalog_url, "SELECT id, name, virtual, size FROM clusters") == [
        (1, "default", False, None)]


def test_cluster_spark_endpoint_is_stored_in_postgres(tmp_path: Path, catalog_url: str) -> None:
    # Migration 6's ALTER TABLE ran on PostgreSQL; the column round-trips through it.
    url = "sc://spark.example:15002/;token=abc"
    with _connect(tmp_path, catalog_url) as conn:
        conn.execute(f"CREATE CLUSTER etl (SIZE 'small', SPARK '{url}')")
        conn.execute("ALTER CLUSTER etl SET (SIZE 'large')")
    assert _rows(catalog_url, "SELECT name, size, spark FROM clusters ORDER BY id") == [
        ("default", None, None), ("etl", "large", url)]
    with _connect(tmp_path, catalog_url) as conn:
        assert conn.execute("SHOW CREATE CLUSTER etl").rows == [
            ("etl", f"CREATE CLUSTER \"etl\" (SIZE = 'large', SPARK = '{url}')")]
        conn.execute("ALTER CLUSTER etl RESET (SPARK)")
        assert conn.execute("SELECT name, spark FROM mz_clusters ORDER BY id").rows == [
            ("default", None), ("etl", None)]


def test_ddl_round_trip(tmp_path: Path, catalog_url: str) -> None:
    with _connect(tmp_path, catalog_url) as conn:
        conn.execute("CREATE CLUSTER etl SIZE 'small'")
        conn.execute("CREATE CLUSTER scratch VIRTUAL")
        conn.execute("CREATE TABLE t (a int NOT NULL, b text)")
        conn.execute("CREATE MATERIALIZED VIEW mv IN CLUSTER etl AS "
                     "SELECT a, count(*) AS n FROM t GROUP BY a")
        conn.execute("CREATE INDEX mv_idx IN CLUSTER etl ON mv (a)")

        assert conn.execute("SELECT id, name, virtual, size FROM mz_clusters").rows == [
            (1, "default", False, None), (2, "etl", False, "small"), (3, "scratch", True, None)]
        assert conn.execute("SHOW MATERIALIZED VIEWS").rows == [("mv",)]
        assert conn.execute("SHOW COLUMNS FROM t").rows == [
            ("a", False, "integer", ""), ("b", True, "text", "")]
        assert conn.execute("SHOW INDEXES").rows == [
            ("etl", "mv", "mv_primary_idx", 1, "a", None, False, True),
            ("etl", "mv", "mv_primary_idx", 2, "n", None, False, True),
            ("etl", "mv", "mv_idx", 1, "a", None, False, True),
        ]

        with pytest.raises(mzflow.DependentObjects):
            conn.execute("DROP CLUSTER etl")
        conn.execute("DROP CLUSTER etl CASCADE")
        assert conn.execute("SHOW CLUSTERS").rows == [("default",), ("scratch",)]
        assert conn.execute("SHOW MATERIALIZED VIEWS").rows == []
        assert conn.execute("SHOW INDEXES").rows == []
        assert conn.execute("SELECT name FROM mz_objects").rows == [("t",)]
    # Nothing left behind in the tables themselves (no orphaned keys or columns).
    assert _rows(catalog_url, "SELECT count(*) FROM index_keys") == [(0,)]
    assert _rows(catalog_url, "SELECT count(*) FROM dependencies") == [(0,)]


def test_two_connections_see_each_others_ddl(tmp_path: Path, catalog_url: str) -> None:
    with _connect(tmp_path / "a", catalog_url) as a, _connect(tmp_path / "b", catalog_url) as b:
        assert b.execute("SHOW CLUSTERS").rows == [("default",)]  # b caches a snapshot
        a.execute("CREATE CLUSTER etl")
        assert b.execute("SHOW CLUSTERS").rows == [("default",), ("etl",)]
        b.execute("CREATE TABLE t (a int)")
        b.execute("CREATE MATERIALIZED VIEW mv IN CLUSTER etl AS SELECT a FROM t")
        assert a.execute("SHOW MATERIALIZED VIEWS IN CLUSTER etl").rows == [("mv",)]
        a.execute("DROP CLUSTER etl CASCADE")
        assert b.execute("SHOW MATERIALIZED VIEWS").rows == []
        assert b.execute("SHOW CLUSTERS").rows == [("default",)]


def test_snapshot_is_one_consistent_read(tmp_path: Path, catalog_url: str) -> None:
    """A DDL that commits while another session loads the catalog is wholly in or out.

    Loading takes several SELECTs; under READ COMMITTED each would see the latest
    commit, so an item could appear without its columns. Force that interleaving:
    commit a new view just before the reader selects the items table.
    """
    with _connect(tmp_path / "a", catalog_url) as a, _connect(tmp_path / "b", catalog_url) as b:
        a.execute("CREATE TABLE t (a int NOT NULL)")
        armed = True

        @sa.event.listens_for(b.store.engine, "before_cursor_execute")
        def ddl_in_between(*args: object) -> None:
            nonlocal armed
            if armed and "FROM items" in str(args[2]):
                armed = False
                a.execute("CREATE VIEW v AS SELECT a FROM t")

        # b's load started before v existed, so v must be wholly absent from it...
        with pytest.raises(mzflow.UnknownObject):
            b.execute("SHOW COLUMNS FROM v")
        assert not armed
        # ...and the next statement sees v complete.
        assert b.execute("SHOW COLUMNS FROM v").rows == [("a", False, "integer", "")]


def test_catalog_survives_reconnect(tmp_path: Path, catalog_url: str) -> None:
    with _connect(tmp_path, catalog_url) as conn:
        conn.execute("CREATE CLUSTER etl SIZE 'small'")
        conn.execute("CREATE TABLE t (a int NOT NULL, b text)")
        conn.execute("CREATE MATERIALIZED VIEW mv IN CLUSTER etl AS SELECT a, b FROM t")
        conn.execute("CREATE INDEX mv_idx IN CLUSTER etl ON mv (b)")
        conn.execute("ALTER SYSTEM SET cluster = etl")
        installation_id = conn.execute("SELECT mz_legacy_installation_id()").rows
        before = {q: conn.execute(q).rows for q in (
            "SELECT id, name, virtual, size FROM mz_clusters", "SHOW INDEXES",
            "SELECT id, name, nullable, type FROM mz_columns", "SELECT * FROM mz_objects",
            "SELECT * FROM mz_collection_ids", "SHOW CREATE MATERIALIZED VIEW mv")}

    # A different home and a new process-level engine: only PostgreSQL remembers.
    with _connect(tmp_path / "elsewhere", catalog_url) as conn:
        assert conn.execute("SELECT mz_legacy_installation_id()").rows == installation_id
        assert {q: conn.execute(q).rows for q in before} == before
        assert conn.execute("SHOW cluster").rows == [("etl",)]
        # Ids keep counting from where they were, not from the start.
        conn.execute("CREATE CLUSTER later")
        assert conn.execute("SELECT id, name FROM mz_clusters WHERE name = 'later'").rows == [
            (3, "later")]


def test_duplicate_cluster_is_duplicate_object(tmp_path: Path, catalog_url: str) -> None:
    with _connect(tmp_path / "a", catalog_url) as a, _connect(tmp_path / "b", catalog_url) as b:
        a.execute("CREATE CLUSTER x")
        with pytest.raises(mzflow.DuplicateObject, match="cluster 'x' already exists") as err:
            a.execute("CREATE CLUSTER x")
        assert err.value.code == "42710"
        # b's cached snapshot predates x: the check must still see the committed row.
        with pytest.raises(mzflow.DuplicateObject, match="cluster 'x' already exists"):
            b.execute("CREATE CLUSTER x")
        # The failed statements rolled back cleanly; the session still works.
        b.execute("CREATE CLUSTER y")
        assert a.execute("SHOW CLUSTERS").rows == [("default",), ("x",), ("y",)]


def test_concurrent_writers_serialize(tmp_path: Path, catalog_url: str) -> None:
    conns = [_connect(tmp_path / str(i), catalog_url) for i in range(4)]
    try:
        # Everyone races for the same name: exactly one wins, the rest get DuplicateObject.
        errors = _run_together([lambda c=c: c.execute("CREATE CLUSTER same") for c in conns])
        assert len(errors) == len(conns) - 1
        assert all(isinstance(e, mzflow.DuplicateObject) for e in errors), errors
        # Distinct names race for the id counter: no id is handed out twice.
        errors = _run_together([lambda c=c, i=i: c.execute(f"CREATE CLUSTER c{i}")
                                for i, c in enumerate(conns)])
        assert errors == []
        rows = conns[0].execute("SELECT id, name FROM mz_clusters").rows
        assert sorted(r[0] for r in rows) == [1, 2, 3, 4, 5, 6]
        assert sorted(r[1] for r in rows) == ["c0", "c1", "c2", "c3", "default", "same"]
    finally:
        for c in conns:
            c.close()


def test_concurrent_first_open_migrates_once(tmp_path: Path, catalog_url: str) -> None:
    opened: list[mzflow.Connection] = []

    def open_one(i: int) -> None:
        opened.append(_connect(tmp_path / str(i), catalog_url))

    try:
        errors = _run_together([lambda i=i: open_one(i) for i in range(4)])
    finally:
        for c in opened:
            c.close()
    assert errors == []
    assert _rows(catalog_url, "SELECT version FROM schema_migrations ORDER BY version") == [
        (v,) for v, _, _ in migrations.MIGRATIONS]
    assert _rows(catalog_url, "SELECT id, name FROM clusters") == [(1, "default")]


def test_rerunning_migrations_is_a_no_op(tmp_path: Path, catalog_url: str) -> None:
    dump = ("SELECT 'm', CAST(version AS text), name FROM schema_migrations "
            "UNION ALL SELECT 'k', key, value FROM meta "
            "UNION ALL SELECT 'c', CAST(id AS text), name FROM clusters ORDER BY 1, 2")
    with _connect(tmp_path, catalog_url) as conn:
        conn.execute("CREATE CLUSTER etl")
    before = _rows(catalog_url, dump)
    assert ("m", str(migrations.LATEST), migrations.MIGRATIONS[-1][1]) in before

    engine = sa.create_engine(catalog_url)
    try:
        migrations.upgrade(engine)
        migrations.upgrade(engine)
    finally:
        engine.dispose()
    with _connect(tmp_path, catalog_url) as conn:  # Store() runs upgrade() again too
        assert conn.execute("SHOW CLUSTERS").rows == [("default",), ("etl",)]
    assert _rows(catalog_url, dump) == before


def test_newer_schema_is_refused(tmp_path: Path, catalog_url: str) -> None:
    _connect(tmp_path, catalog_url).close()
    engine = sa.create_engine(catalog_url)
    try:
        with engine.begin() as conn:
            conn.execute(migrations.schema_migrations.insert().values(
                version=migrations.LATEST + 1, name="from the future"))
    finally:
        engine.dispose()
    with pytest.raises(mzflow.CatalogError, match="newer than this mzflow"):
        _connect(tmp_path, catalog_url)
