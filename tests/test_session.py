"""Session and catalog semantics through the public API, on a real SQLite catalog."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mzflow


@pytest.fixture
def conn(tmp_path: Path):
    with mzflow.connect(str(tmp_path)) as c:
        yield c


def rows(conn: mzflow.Connection, sql: str) -> list[tuple]:
    return conn.execute(sql).rows


def test_catalog_starts_with_the_default_cluster(conn) -> None:
    assert rows(conn, "SELECT * FROM mz_clusters") == [(1, "default")]
    assert conn.execute("SELECT * FROM mz_clusters").columns == ["id", "name"]


def test_hidden_cluster_columns_are_selectable_by_name(conn) -> None:
    conn.execute("CREATE CLUSTER v VIRTUAL; CREATE CLUSTER s SIZE 'large'")
    assert rows(conn, "SELECT name, virtual, size, pool_slots FROM mz_clusters ORDER BY id") == [
        ("default", False, None, 2), ("v", True, None, 1), ("s", False, "large", 8)]


def test_cluster_ids_are_never_reused(conn) -> None:
    conn.execute("CREATE CLUSTER a; DROP CLUSTER a; CREATE CLUSTER b")
    assert rows(conn, "SELECT id FROM mz_clusters WHERE name = 'b'") == [(3,)]


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        ("CREATE CLUSTER default", mzflow.DuplicateObject, "cluster 'default' already exists"),
        ("CREATE CLUSTER x SIZE 'huge'", mzflow.InvalidOption, "unknown cluster size 'huge'"),
        ("CREATE CLUSTER x SIZE 'small', SIZE 'small'", mzflow.InvalidOption,
         "SIZE specified more than once"),
        ("CREATE CLUSTER x VIRTUAL, SIZE 'small'", mzflow.InvalidOption,
         "only one of VIRTUAL, REMOTE, and SIZE may be specified"),
        ("CREATE CLUSTER x FAST", mzflow.InvalidOption, 'unexpected cluster option "FAST"'),
        ("DROP CLUSTER nope", mzflow.UnknownObject, "unknown cluster 'nope'"),
        ("ALTER CLUSTER nope SIZE 'small'", mzflow.UnknownObject, "unknown cluster 'nope'"),
        ("SELECT * FROM nope", mzflow.UnknownObject, "unknown catalog item 'nope'"),
        ("SELECT nope FROM mz_clusters", mzflow.UnknownColumn, 'column "nope" does not exist'),
        ("SET nope = 1", mzflow.Error, 'unrecognized configuration parameter "nope"'),
        ("SET transaction_isolation = 'read sloppy'", mzflow.InvalidOption,
         'invalid value for parameter "transaction_isolation"'),
    ],
)
def test_errors_read_like_materialize(conn, sql, error, message) -> None:
    with pytest.raises(error, match=message):
        conn.execute(sql)


def test_unknown_size_lists_the_valid_ones(conn) -> None:
    with pytest.raises(mzflow.InvalidOption) as info:
        conn.execute("CREATE CLUSTER x SIZE 'huge'")
    assert "'xsmall', 'small', 'medium', 'large', 'xlarge'" in str(info.value)


def test_alter_cluster_resizes(conn) -> None:
    conn.execute("CREATE CLUSTER etl SIZE 'small'; ALTER CLUSTER etl SET (SIZE = 'large')")
    assert rows(conn, "SELECT size, pool_slots FROM mz_clusters WHERE name = 'etl'") == [
        ("large", 8)]


def test_system_default_cluster_and_session_override(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as a:
        a.execute("CREATE CLUSTER etl; ALTER SYSTEM SET cluster = 'etl'")
        assert rows(a, "SHOW cluster") == [("etl",)]
        a.execute("SET cluster = 'default'")
        assert rows(a, "SHOW cluster") == [("default",)]
        a.execute("RESET cluster")
        assert rows(a, "SHOW cluster") == [("etl",)]
    with mzflow.connect(str(tmp_path)) as b:  # the system default is durable
        assert rows(b, "SHOW cluster") == [("etl",)]
        b.execute("ALTER SYSTEM RESET cluster")
        assert rows(b, "SHOW cluster") == [("default",)]


def test_materialized_view_is_a_view_plus_default_index(conn) -> None:
    conn.execute("CREATE CLUSTER c; CREATE MATERIALIZED VIEW mv IN CLUSTER c AS SELECT 1 AS x")
    assert rows(conn, "SHOW INDEXES ON mv") == [
        ("c", "mv", "mv_primary_idx", 1, "x", None, False, True)]
    assert rows(conn, "SELECT name, cluster_id FROM mz_materialized_views") == [("mv", 2)]
    assert rows(conn, "SELECT * FROM mv") == [(1,)]


def test_create_sql_is_normalized(conn) -> None:
    conn.execute("CREATE CLUSTER c; SET cluster = c; CREATE TABLE t (a int NOT NULL, b text);"
                 "CREATE MATERIALIZED VIEW mv AS SELECT a FROM t;"
                 "CREATE SINK s FROM mv INTO CSV '/tmp/x'")
    assert rows(conn, "SHOW CREATE MATERIALIZED VIEW mv")[0][1] == (
        'CREATE MATERIALIZED VIEW "materialize"."public"."mv" IN CLUSTER "c" AS '
        'SELECT a FROM "materialize"."public"."t"')
    assert rows(conn, "SHOW CREATE SINK s")[0][1] == (
        'CREATE SINK "materialize"."public"."s" IN CLUSTER "c" FROM '
        '"materialize"."public"."mv" INTO CSV \'/tmp/x\'')
    assert rows(conn, "SHOW CREATE TABLE t")[0][1] == (
        'CREATE TABLE "materialize"."public"."t" ("a" "pg_catalog"."int4" NOT NULL, '
        '"b" "pg_catalog"."text")')


def test_view_columns_and_types(conn) -> None:
    conn.execute("CREATE TABLE t (a int NOT NULL, b text);"
                 "CREATE VIEW v AS SELECT a, b, a + 1, count(*) AS n, 'x' AS x "
                 "FROM t GROUP BY a, b")
    assert rows(conn, "SHOW COLUMNS FROM v") == [
        ("a", False, "integer", ""), ("b", True, "text", ""), ("?column?", True, "integer", ""),
        ("n", False, "bigint", ""), ("x", False, "text", "")]


def test_computed_view_columns_drop_type_modifiers(conn) -> None:
    # Regression (TPC-H Q1): sum(l_extendedprice * (1 - l_discount)) was typed
    # numeric(15,2), so a materialized view's tick could not store Spark's scale-4 result.
    conn.execute("CREATE TABLE t (n numeric(15,2), s varchar(10));"
                 "CREATE VIEW v AS SELECT n, n * n AS p, sum(n) AS total, max(n) AS hi, "
                 "n::numeric(10,1) AS r, s, x.m FROM t, (SELECT n * 2 AS m FROM t) AS x "
                 "GROUP BY n, s, x.m")
    assert [(name, typ) for name, _, typ, _ in rows(conn, "SHOW COLUMNS FROM v")] == [
        ("n", "numeric(15,2)"), ("p", "numeric"), ("total", "numeric"), ("hi", "numeric"),
        ("r", "numeric(10,1)"), ("s", "character varying(10)"), ("m", "numeric")]


def test_view_output_names_must_be_unique(conn) -> None:
    with pytest.raises(mzflow.DuplicateObject, match='column "\\?column\\?" specified more'):
        conn.execute("CREATE VIEW v AS SELECT 1, 2")


def test_view_column_list_must_match(conn) -> None:
    with pytest.raises(mzflow.InvalidDefinition, match="definition names 2 columns, but view "
                       '"materialize"."public"."v" has 1 column'):
        conn.execute("CREATE VIEW v (a, b) AS SELECT 1")


def test_or_replace_and_if_not_exists(conn) -> None:
    conn.execute("CREATE VIEW v AS SELECT 1 AS a")
    result = conn.execute("CREATE VIEW IF NOT EXISTS v AS SELECT 2 AS a")
    assert result.notices == ['view "v" already exists, skipping']
    assert rows(conn, "SELECT * FROM v") == [(1,)]
    conn.execute("CREATE OR REPLACE VIEW v AS SELECT 2 AS a")
    assert rows(conn, "SELECT * FROM v") == [(2,)]
    with pytest.raises(mzflow.DuplicateObject, match="catalog item 'v' already exists"):
        conn.execute("CREATE VIEW v AS SELECT 3")


def test_drop_checks_dependencies_and_cascades(conn) -> None:
    conn.execute("CREATE TABLE t (a int); CREATE VIEW v AS SELECT a FROM t;"
                 "CREATE MATERIALIZED VIEW mv AS SELECT a FROM v;"
                 "CREATE SINK s FROM mv INTO PARQUET '/tmp/s'")
    with pytest.raises(mzflow.DependentObjects, match="cannot drop materialize.public.t: still "
                       "depended upon by catalog item 'materialize.public.v'"):
        conn.execute("DROP TABLE t")
    with pytest.raises(mzflow.WrongObjectType, match="materialize.public.mv is not a view"):
        conn.execute("DROP VIEW mv")
    conn.execute("DROP TABLE t CASCADE")
    assert rows(conn, "SELECT count(*) FROM mz_objects") == [(0,)]
    assert conn.execute("DROP VIEW IF EXISTS v").notices == ['view "v" does not exist, skipping']


def test_dropping_an_object_drops_its_indexes(conn) -> None:
    conn.execute("CREATE VIEW v AS SELECT 1 AS a; CREATE INDEX v_idx ON v (a); DROP VIEW v")
    assert rows(conn, "SELECT name FROM mz_indexes") == []


def test_drop_cluster_needs_cascade_for_indexes_and_sinks(conn) -> None:
    conn.execute("CREATE CLUSTER c; CREATE VIEW v AS SELECT 1 AS a;"
                 "CREATE SINK s IN CLUSTER c FROM v INTO JSON '/tmp/j'")
    with pytest.raises(mzflow.DependentObjects, match="active indexes or sinks"):
        conn.execute("DROP CLUSTER c")
    conn.execute("DROP CLUSTER c CASCADE")
    assert rows(conn, "SHOW SINKS") == []
    assert rows(conn, "SHOW VIEWS") == [("v",)]


def test_index_names_and_keys(conn) -> None:
    conn.execute("CREATE TABLE t (a int NOT NULL, b text); CREATE INDEX ON t (a);"
                 "CREATE INDEX ON t (a + 1); CREATE DEFAULT INDEX ON t; CREATE DEFAULT INDEX ON t")
    assert rows(conn, "SELECT name FROM mz_indexes ORDER BY name") == [
        ("t_a_idx",), ("t_expr_idx",), ("t_primary_idx",), ("t_primary_idx1",)]
    assert rows(conn, "SHOW INDEXES ON t WHERE key_name = 't_expr_idx'") == [
        ("default", "t", "t_expr_idx", 1, None, "a + 1", True, True)]
    with pytest.raises(mzflow.UnknownObject, match='column "z" does not exist'):
        conn.execute("CREATE INDEX ON t (z)")


def test_sinks_record_cluster_and_format(conn) -> None:
    conn.execute("CREATE CLUSTER exports; CREATE VIEW v AS SELECT 1 AS a;"
                 "CREATE SINK s IN CLUSTER exports FROM v INTO DELTA '/tmp/d'")
    assert rows(conn, "SHOW SINKS IN CLUSTER exports") == [("s", "delta", "exports")]
    assert rows(conn, "SELECT s.name, c.name FROM mz_sinks s JOIN mz_clusters c "
                      "ON s.cluster_id = c.id") == [("s", "exports")]
    with pytest.raises(mzflow.InvalidOption, match="unknown sink format AVRO"):
        conn.execute("CREATE SINK s2 FROM v INTO AVRO '/tmp/a'")


def test_two_sessions_see_each_others_ddl(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as a, mzflow.connect(str(tmp_path)) as b:
        assert rows(b, "SHOW CLUSTERS") == [("default",)]
        a.execute("CREATE CLUSTER shared")
        assert rows(b, "SHOW CLUSTERS LIKE 'sh%'") == [("shared",)]
        b.execute("DROP CLUSTER shared")
        assert rows(a, "SHOW CLUSTERS") == [("default",)]


def test_session_variables_are_per_session(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as a, mzflow.connect(str(tmp_path)) as b:
        a.execute("SET cluster = 'elsewhere'")
        assert rows(a, "SHOW cluster") == [("elsewhere",)]
        assert rows(b, "SHOW cluster") == [("default",)]


def test_collection_ids_and_columns(conn) -> None:
    conn.execute("CREATE TABLE t (a int NOT NULL, b text)")
    assert rows(conn, "SELECT * FROM mz_collection_ids") == [("u1", "u1", 0)]
    assert rows(conn, "SELECT name, position, nullable, type FROM mz_columns ORDER BY position"
                ) == [("a", 1, False, "integer"), ("b", 2, True, "text")]


def test_installation_id_is_stable(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as a:
        first = rows(a, "SELECT mz_legacy_installation_id()")
    with mzflow.connect(str(tmp_path)) as b:
        assert rows(b, "SELECT mz_legacy_installation_id()") == first
    assert len(first[0][0]) == 36


def test_failed_statement_changes_nothing(conn) -> None:
    before = rows(conn, "SELECT id, name FROM mz_objects")
    with pytest.raises(mzflow.Error):
        conn.execute("CREATE MATERIALIZED VIEW mv IN CLUSTER nope AS SELECT 1")
    assert rows(conn, "SELECT id, name FROM mz_objects") == before
    conn.execute("CREATE VIEW v AS SELECT 1")
    # A failed statement consumes no id: the next item is still u1.
    assert rows(conn, "SELECT id FROM mz_views") == [("u1",)]


def _heavy_modules_after(home: Path, sql: str) -> list[str]:
    code = (
        "import sys, mzflow\n"
        f"c = mzflow.connect({str(home)!r})\n"
        f"c.execute({sql!r})\n"
        "print(','.join(m for m in ('pyspark', 'deltalake', 'great_expectations', 'airflow')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


@pytest.mark.slow
def test_catalog_statements_never_load_spark_or_delta(tmp_path: Path) -> None:
    assert _heavy_modules_after(
        tmp_path, "CREATE CLUSTER c SIZE 'small'; CREATE VIEW v AS SELECT 1 AS a;"
        " CREATE MATERIALIZED VIEW mv IN CLUSTER c AS SELECT a FROM v;"
        " SHOW INDEXES; SELECT * FROM mz_clusters; SHOW CREATE VIEW v") == []


@pytest.mark.slow
def test_table_ddl_writes_delta_but_never_starts_spark(tmp_path: Path) -> None:
    # CREATE TABLE creates the table's Delta shard (delta-rs), but no JVM.
    assert _heavy_modules_after(
        tmp_path, "CREATE TABLE t (a int); ALTER TABLE t ADD COLUMN b text;"
        " SHOW COLUMNS FROM t; SELECT * FROM mz_tables") == ["deltalake"]


def test_rename_rewrites_references_not_literals(conn) -> None:
    conn.execute(
        "CREATE TABLE old_name (x int);"
        # Literals that spell the old name, bare and in its stored (qualified) form.
        "CREATE VIEW v AS SELECT 'old_name' AS s, "
        "'\"materialize\".\"public\".\"old_name\"' AS q, old_name.x FROM old_name;"
        "CREATE VIEW w AS SELECT v.s, v.x FROM v;"
        "CREATE INDEX old_idx ON old_name (x)")
    conn.execute("ALTER TABLE old_name RENAME TO new_name")
    assert rows(conn, "SHOW CREATE VIEW v")[0][1] == (
        'CREATE VIEW "materialize"."public"."v" AS SELECT \'old_name\' AS s, '
        '\'"materialize"."public"."old_name"\' AS q, old_name.x '
        'FROM "materialize"."public"."new_name" AS "old_name"')
    assert rows(conn, "SHOW CREATE INDEX old_idx")[0][1] == (
        'CREATE INDEX "old_idx" IN CLUSTER "default" ON "materialize"."public"."new_name" ("x")')
    conn.execute("ALTER VIEW v RENAME TO v2; ALTER INDEX old_idx RENAME TO new_idx")
    assert rows(conn, "SHOW CREATE VIEW w")[0][1] == (
        'CREATE VIEW "materialize"."public"."w" AS SELECT v.s, v.x '
        'FROM "materialize"."public"."v2" AS "v"')
    assert rows(conn, "SHOW CREATE INDEX new_idx")[0][1].startswith('CREATE INDEX "new_idx" ')
    # The dependents' stored SQL still binds: planning w inlines v2, which reads new_name.
    plan = rows(conn, "EXPLAIN SELECT * FROM w")[0][0]
    assert "Get materialize.public.new_name" in plan
    assert rows(conn, "SELECT name FROM mz_objects WHERE id LIKE 'u%' ORDER BY id") == [
        ("new_name",), ("v2",), ("w",), ("new_idx",)]


def test_drop_removes_storage_after_the_catalog_commit(conn) -> None:
    """A dropped table's shard, and a dropped index's contents and kept state, leave the
    warehouse (they were left on disk before: the drop never reported what it removed)."""
    from mzflow.storage import paths

    conn.execute("CREATE CLUSTER c; CREATE TABLE t (a int); CREATE TABLE keep (a int);"
                 "CREATE MATERIALIZED VIEW mv IN CLUSTER c AS SELECT a, count(*) AS n "
                 "FROM t GROUP BY a")
    snap = conn.store.snapshot()
    warehouse = conn.config.warehouse
    table, kept = snap.resolve("t"), snap.resolve("keep")
    index = snap.indexes_on(snap.resolve("mv").id)[0]
    # What a tick would have written for the index (ticks need Spark; the paths are real).
    for p in (paths.index(warehouse, index.id), paths.state(warehouse, index.id)):
        (p / "_delta_log").mkdir(parents=True)
    assert paths.table(warehouse, table.id).is_dir()
    conn.execute("DROP TABLE t CASCADE")
    assert not paths.table(warehouse, table.id).exists()
    assert not paths.index(warehouse, index.id).exists()
    assert not paths.state(warehouse, index.id).exists()
    assert paths.table(warehouse, kept.id).is_dir()


def test_a_locked_catalog_is_a_clean_retryable_error(tmp_path: Path, monkeypatch) -> None:
    """Found by the soak (issue 19): a writer that waited out SQLite's busy timeout got
    the driver's raw OperationalError; it is CatalogBusy (55P03), and nothing happened."""
    import sqlite3

    from mzflow.catalog import store
    from mzflow.errors import CatalogBusy

    monkeypatch.setattr(store, "BUSY_TIMEOUT_S", 0.2)
    with mzflow.connect(str(tmp_path)) as conn:
        holder = sqlite3.connect(tmp_path / "catalog.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(CatalogBusy, match="locked by another writer") as info:
            conn.execute("CREATE TABLE busy (a int)")
        assert info.value.code == "55P03"
        holder.execute("ROLLBACK")
        conn.execute("CREATE TABLE busy (a int)")
        assert conn.execute("SHOW TABLES").rows == [("busy",)]


def test_a_catalog_that_cannot_be_written_is_a_clean_error(tmp_path: Path) -> None:
    """Found by the soak's disk-full fault (issue 19): SQLite's "disk I/O error" reached
    writers as the driver's raw OperationalError. It is a CatalogError, the transaction
    rolled back, and the next statement with space again works."""
    import resource
    import signal

    from mzflow.errors import CatalogError

    with mzflow.connect(str(tmp_path)) as conn:
        conn.execute("CREATE TABLE before_full (a int)")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # a full disk
        try:
            with pytest.raises(CatalogError, match="could not be written"):
                conn.execute("CREATE VIEW during_full AS SELECT 1 AS a")
            with pytest.raises(mzflow.Error):  # its shard or the catalog: either is ours
                conn.execute("CREATE TABLE during_full (a int)")
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        conn.execute("CREATE TABLE after_full (a int)")
        assert sorted(conn.execute("SHOW TABLES").rows) == [("after_full",), ("before_full",)]
    with mzflow.connect(str(tmp_path)) as again:  # up to date: no write lock to connect
        assert len(again.execute("SHOW TABLES").rows) == 2


def test_a_tick_whose_index_a_drop_removed_says_so(
        conn, monkeypatch: pytest.MonkeyPatch) -> None:
    # The soak saw a tick that raced DROP of its own view fail with "could not write
    # shard u49: Invalid table version: 0". Stand in for the tick's work: the DROP's
    # removal of the shard, then delta-rs's failure to write it.
    import shutil

    from mzflow.maintain import ticks
    from mzflow.maintain.tick.commit import ensure_shard
    from mzflow.storage.delta import StorageError

    conn.execute("CREATE TABLE t (k int)")
    conn.execute("CREATE MATERIALIZED VIEW mv AS SELECT k FROM t")
    snap = conn.store.snapshot()
    index = snap.resolve("mv_primary_idx")
    warehouse = conn.config.warehouse
    shard = ensure_shard(warehouse, index, ())

    def dropped_meanwhile(*args, **kwargs):
        shutil.rmtree(shard.path)
        raise StorageError("could not write shard: Invalid table version: 0")

    monkeypatch.setattr(ticks, "_tick_index", dropped_meanwhile)
    with pytest.raises(mzflow.UnknownObject,
                       match="materialize.public.mv_primary_idx was dropped while it ticked"):
        ticks.tick_index(snap, warehouse, index, snap.read_ts)

    # A storage failure of an index that still exists stays what it is.
    ensure_shard(warehouse, index, ())

    def full_disk(*args, **kwargs):
        raise StorageError("could not write shard: No space left on device")

    monkeypatch.setattr(ticks, "_tick_index", full_disk)
    with pytest.raises(StorageError, match="No space left"):
        ticks.tick_index(snap, warehouse, index, snap.read_ts)


@pytest.mark.slow
@pytest.mark.spark
def test_a_tick_that_raced_a_drop_leaves_no_shard_behind(conn, monkeypatch) -> None:
    # DROP removes an index's storage after its catalog commit, without the index's
    # lock. A tick that took its snapshot before the DROP makes the missing shard again
    # (ensure_shard) and writes it: a shard no catalog names, left forever. The tick
    # must say the index is gone, and take what it wrote with it.
    from mzflow.storage import paths

    conn.execute("CREATE TABLE t (k int)")
    conn.execute("CREATE MATERIALIZED VIEW mv AS SELECT k FROM t")
    conn.execute("INSERT INTO t VALUES (1)")
    before = conn.store.snapshot()
    index = before.resolve("mv_primary_idx")
    conn.execute("DROP MATERIALIZED VIEW mv")
    shard = paths.index(conn.config.warehouse, index.id)
    assert not shard.exists()
    real = conn.store.snapshot
    stale = [before]  # the tick's own snapshot: from before the DROP

    monkeypatch.setattr(conn.store, "snapshot", lambda: stale.pop() if stale else real())
    with pytest.raises(mzflow.UnknownObject,
                       match="materialize.public.mv_primary_idx was dropped while it ticked"):
        conn.tick(object="mv")
    assert not stale  # the tick did run with the old snapshot
    assert not shard.exists() and not paths.state(conn.config.warehouse, index.id).exists()
