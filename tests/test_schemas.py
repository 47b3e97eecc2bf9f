"""Schemas: CREATE and DROP SCHEMA, names qualified by schema (and database), and the
search path, as Materialize defines them (its schemas.slt, and the messages of its
planner) -- in the catalog only, so no Spark; one test at the end writes and reads."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterator

import pytest

import mzflow
from mzflow.catalog import names


@pytest.fixture
def conn() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-schemas-") as home, \
            mzflow.connect(home) as c:
        yield c


def fails(conn: mzflow.Connection, sql: str, code: str, text: str) -> None:
    with pytest.raises(mzflow.Error) as info:
        conn.execute(sql)
    assert (info.value.code, info.value.message) == (code, text), sql


def rows(conn: mzflow.Connection, sql: str) -> list[tuple[object, ...]]:
    return conn.execute(sql).rows


def test_create_and_drop_schema_with_materializes_errors(conn: mzflow.Connection) -> None:
    conn.execute("CREATE SCHEMA s")
    fails(conn, "CREATE SCHEMA s", "42P06", "schema 's' already exists")
    assert conn.execute("CREATE SCHEMA IF NOT EXISTS s").notices == [
        'schema "s" already exists, skipping']
    fails(conn, "CREATE SCHEMA mz_mine", "42939", "unacceptable schema name 'mz_mine'")
    fails(conn, "CREATE SCHEMA pg_catalog", "42P06", "schema 'pg_catalog' already exists")
    fails(conn, "CREATE SCHEMA other.s2", "3D000", "unknown database 'other'")
    conn.execute("CREATE SCHEMA materialize.s2")
    conn.execute("CREATE TABLE s.t (a int)")
    fails(conn, "DROP SCHEMA s", "2BP01",
          "schema 'materialize.s' cannot be dropped without CASCADE while it contains objects")
    fails(conn, "DROP SCHEMA s RESTRICT", "2BP01",
          "schema 'materialize.s' cannot be dropped without CASCADE while it contains objects")
    fails(conn, "DROP SCHEMA mz_catalog", "2BP01",
          "cannot drop schema mz_catalog because it is required by the database system")
    fails(conn, "DROP SCHEMA nope", "3F000", "unknown schema 'nope'")
    assert conn.execute("DROP SCHEMA IF EXISTS nope").notices == [
        'schema "nope" does not exist, skipping']
    conn.execute("DROP SCHEMA s2")
    conn.execute("DROP SCHEMA s CASCADE")
    assert rows(conn, "SELECT name FROM mz_tables") == []
    assert ("s",) not in rows(conn, "SHOW SCHEMAS")


def test_a_dropped_schemas_objects_go_with_it_and_what_reads_them(
        conn: mzflow.Connection) -> None:
    conn.execute("CREATE SCHEMA s")
    conn.execute("CREATE TABLE s.t (a int)")
    conn.execute("CREATE VIEW public.v AS SELECT a FROM s.t")  # another schema reads it
    conn.execute("CREATE TABLE public.keep (b int)")
    conn.execute("DROP SCHEMA s CASCADE")
    assert rows(conn, "SELECT name FROM mz_objects") == [("keep",)]


def test_schemas_are_listed_as_materialize_lists_them(conn: mzflow.Connection) -> None:
    conn.execute("CREATE SCHEMA s")
    assert rows(conn, "SHOW SCHEMAS") == [("public",), ("s",)]
    assert rows(conn, "SHOW SCHEMAS FROM materialize") == [("public",), ("s",)]
    assert rows(conn, "SHOW EXTENDED SCHEMAS") == sorted(
        (n,) for n in [*names.SYSTEM_SCHEMAS, "public", "s"])
    assert rows(conn, "SHOW SOURCES FROM s") == []
    got = dict(rows(conn, "SELECT name, id FROM mz_schemas"))
    # Materialize's ids (its schemas.slt): public is u3, the system schemas s1…s5.
    assert (got["public"], got["mz_catalog"], got["pg_catalog"], got["mz_internal"],
            got["information_schema"]) == ("u3", "s1", "s2", "s4", "s5")
    assert got["s"] not in (got["public"], *(v for k, v in got.items() if k != "s"))
    assert rows(conn, "SELECT name FROM mz_databases") == [("materialize",)]
    assert rows(conn, "SELECT count(*) FROM mz_sources") == [(0,)]


def test_the_same_name_in_two_schemas_is_two_objects(conn: mzflow.Connection) -> None:
    conn.execute("CREATE SCHEMA s")
    conn.execute("CREATE TABLE t (a int)")
    conn.execute("CREATE TABLE s.t (b text)")
    fails(conn, "CREATE TABLE s.t (c int)", "42710", "catalog item 't' already exists")
    assert [r[0] for r in rows(conn, "SHOW COLUMNS FROM s.t")] == ["b"]
    assert [r[0] for r in rows(conn, "SHOW COLUMNS FROM materialize.public.t")] == ["a"]
    assert rows(conn, "SHOW TABLES FROM s") == [("t",)]
    by_schema = {r[0]: r[1] for r in rows(
        conn, "SELECT s.name, o.name FROM mz_objects o JOIN mz_schemas s ON o.schema_id = s.id")}
    assert by_schema == {"public": "t", "s": "t"}
    fails(conn, "SELECT * FROM nosch.t", "3F000", "unknown schema 'nosch'")
    fails(conn, "SELECT * FROM other.public.t", "3D000", "unknown database 'other'")
    fails(conn, "SHOW TABLES FROM nosch", "3F000", "unknown schema 'nosch'")


def test_the_search_path_finds_names_and_places_new_objects(
        conn: mzflow.Connection) -> None:
    """Materialize's schemas.slt: a search path of schemas that do not exist has no
    current schema, and nothing can be created without saying where."""
    conn.execute("SET search_path = 'ba r', foo, 'x, y', \"a, b\"")
    assert rows(conn, "SHOW search_path") == [('"ba r", foo, "x, y", "a, b"',)]
    assert rows(conn, "SELECT current_schema()") == [(None,)]
    assert rows(conn, "SELECT current_schemas(false)") == [([],)]
    assert rows(conn, "SELECT current_schemas(true)") == [(["mz_catalog", "pg_catalog"],)]
    fails(conn, "CREATE TABLE t (i int)", "3F000", "no schema has been selected to create in")
    # Nor listed without saying where (Materialize's resolve_active_schema).
    for show in ("SHOW TABLES", "SHOW OBJECTS", "SHOW VIEWS", "SHOW SOURCES", "SHOW SINKS"):
        fails(conn, show, "3F000", "no valid schema selected")
    assert rows(conn, "SHOW TABLES FROM public") == []
    conn.execute("CREATE SCHEMA foo")
    assert rows(conn, "SELECT current_schema()") == [("foo",)]
    assert rows(conn, "SELECT current_schemas(true)") == [
        (["mz_catalog", "pg_catalog", "foo"],)]
    conn.execute("CREATE TABLE t (i int)")
    assert rows(conn, "SELECT s.name FROM mz_tables t JOIN mz_schemas s "
                      "ON t.schema_id = s.id") == [("foo",)]
    conn.execute("SET search_path = pg_catalog")
    assert rows(conn, "SELECT current_schema()") == [("pg_catalog",)]
    assert rows(conn, "SELECT current_schemas(false)") == [(["pg_catalog"],)]
    fails(conn, "CREATE TABLE u (i int)", "42501", "system schema 'pg_catalog' cannot be "
          "modified")
    conn.execute("RESET search_path")
    assert rows(conn, "SELECT current_schema()") == [("public",)]


def test_unqualified_names_resolve_in_search_path_order(conn: mzflow.Connection) -> None:
    for sql in ("CREATE SCHEMA a", "CREATE SCHEMA b", "CREATE TABLE b.t (x int)",
                "CREATE TABLE a.t (y int)", "SET search_path = b, a"):
        conn.execute(sql)
    assert [r[0] for r in rows(conn, "SHOW COLUMNS FROM t")] == ["x"]
    conn.execute("SET search_path = a, b")
    assert [r[0] for r in rows(conn, "SHOW COLUMNS FROM t")] == ["y"]
    # An index lives in its relation's schema; a rename keeps the schema.
    conn.execute("CREATE INDEX t_idx ON t (y)")
    conn.execute("ALTER TABLE b.t RENAME TO t2")
    conn.execute("CREATE VIEW b.v AS SELECT x FROM b.t2")
    got = set(rows(conn, "SELECT o.name, s.name FROM mz_objects o JOIN mz_schemas s "
                         "ON o.schema_id = s.id"))
    assert got == {("t", "a"), ("t2", "b"), ("t_idx", "a"), ("v", "b")}
    create = rows(conn, "SHOW CREATE VIEW b.v")[0][1]
    assert '"materialize"."b"."t2"' in str(create)
    fails(conn, "DROP TABLE t2", "2BP01", "cannot drop materialize.b.t2: still depended upon "
          "by catalog item 'materialize.b.v'")
    conn.execute("SET search_path = a")
    fails(conn, "DROP TABLE t2", "42704", "unknown catalog item 't2'")
    conn.execute("DROP VIEW b.v")
    conn.execute("DROP TABLE b.t2")


def test_catalog_functions_answer_for_the_session(conn: mzflow.Connection) -> None:
    got = conn.execute("SELECT version(), current_database(), current_user, "
                       "current_setting('search_path'), pg_catalog.version()")
    assert got.columns == ["version", "current_database", "current_user",
                           "current_setting", "version"]
    assert got.types == ["text", "name", "name", "text", "text"]
    version, database, user, path, again = got.rows[0]
    assert str(version).startswith("PostgreSQL 9.5 on ") and "mzflow" in str(version)
    assert (database, user, path, again) == ("materialize", "materialize", "public", version)
    assert rows(conn, "SELECT set_config('search_path', 'pg_catalog', false)") == [
        ("pg_catalog",)]
    assert rows(conn, "SHOW search_path") == [("pg_catalog",)]
    assert rows(conn, "SELECT current_setting('nope', true)") == [(None,)]
    fails(conn, "SELECT current_setting('nope')", "42704",
          'unrecognized configuration parameter "nope"')


def test_regclass_names_relations_by_the_search_path(conn: mzflow.Connection) -> None:
    for sql in ("CREATE SCHEMA s", "CREATE TABLE s.t (a int)", "CREATE TABLE u (b int)"):
        conn.execute(sql)
    oid = rows(conn, "SELECT oid FROM mz_tables WHERE name = 't'")[0][0]
    got = conn.execute(f"SELECT {oid}::regclass, 's.t'::regclass::oid, 'u'::regclass")
    assert got.types == ["regclass", "oid", "regclass"]
    assert got.rows == [("s.t", oid, "u")]
    conn.execute("SET search_path = s, public")
    assert rows(conn, f"SELECT {oid}::regclass::text") == [("t",)]
    fails(conn, "SELECT 'nope'::regclass", "42P01", 'relation "nope" does not exist')


def test_what_duckdb_might_answer_differently_is_refused_by_name(
        conn: mzflow.Connection) -> None:
    fails(conn, "SELECT relnatts / 2 FROM pg_catalog.pg_class", "0A000",
          "operator div in a query of system catalogs is not supported yet")
    fails(conn, "SELECT clock_timestamp() FROM pg_catalog.pg_class", "0A000",
          "function clock_timestamp in a query of system catalogs is not supported yet")
    # now() is the statement's time: one value for every row (dbt-materialize's
    # deploy_promote asks for it; deploy_await compares mz_now() with one).
    before = dt.datetime.now(dt.UTC)
    got = {r[0] for r in conn.execute("SELECT now() FROM pg_catalog.pg_namespace").rows}
    assert len(got) == 1 and before <= got.pop() <= dt.datetime.now(dt.UTC)


@pytest.mark.slow
@pytest.mark.spark
def test_writes_reads_and_maintenance_in_a_schema(conn: mzflow.Connection) -> None:
    for sql in ("CREATE SCHEMA s", "CREATE TABLE s.t (a int, b text)",
                "CREATE TABLE t (a int)", "INSERT INTO s.t VALUES (1, 'x'), (2, 'y')",
                "INSERT INTO t VALUES (10)",
                "CREATE MATERIALIZED VIEW s.m AS SELECT count(*) AS n FROM s.t",
                "UPDATE s.t SET b = 'z' WHERE a = 2",
                "DELETE FROM materialize.s.t WHERE a = 1",
                "INSERT INTO s.t VALUES (3, 'w')"):
        conn.execute(sql)
    assert rows(conn, "SELECT a, b FROM s.t ORDER BY a") == [(2, "z"), (3, "w")]
    assert rows(conn, "SELECT a FROM t") == [(10,)]
    assert rows(conn, "SELECT n FROM s.m") == [(2,)]
    conn.execute("SET search_path = s")
    assert rows(conn, "SELECT n FROM m") == [(2,)]
    assert rows(conn, "SELECT count(*) FROM t") == [(2,)]


def test_text_names_of_objects_outside_public_resolve(conn: mzflow.Connection) -> None:
    """The CLI, Airflow's tasks and DAGs name objects by text: outside public, schema-
    qualified, so they find the object whatever a session's search path."""
    from mzflow.airflow import graph
    from mzflow.maintain import ticks

    conn.execute("CREATE SCHEMA s")
    conn.execute("CREATE TABLE s.t (a int)")
    conn.execute("CREATE MATERIALIZED VIEW s.m AS SELECT count(*) AS n FROM s.t")
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT 1 AS one")
    snap = conn.store.snapshot()
    tasks = {t.index: t for d in graph.cluster_dags(snap) for t in d.tasks}
    assert set(tasks) == {"s.m_primary_idx", "m_primary_idx"}
    for name in tasks:
        (index,) = ticks.indexes_to_tick(snap, None, name)
        assert names.short(index) == name
    assert ticks.default_index_name(snap, "s.m") == "s.m_primary_idx"
