"""A cluster's SPARK option: a Spark Connect endpoint its ticks run against.

Catalog side only: parsing, validation at DDL time (form only, no connection),
storage and its migration, SHOW CREATE CLUSTER and ``mz_clusters``. No Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

import mzflow
from mzflow.catalog import migrations
from mzflow.catalog.model import Cluster
from mzflow.sql import ast
from mzflow.sql.parse import DIALECT, parse_one

URL = "sc://spark.example:15002"


@pytest.fixture
def conn(tmp_path: Path):
    with mzflow.connect(str(tmp_path)) as c:
        yield c


def rows(conn: mzflow.Connection, sql: str) -> list[tuple]:
    return conn.execute(sql).rows


def spark_of(conn: mzflow.Connection, name: str) -> str | None:
    """What the runtime reads: ``Cluster.spark`` from the catalog snapshot."""
    return conn.store.snapshot().cluster_by_name(name).spark


# -- parsing -----------------------------------------------------------------------------

@pytest.mark.parametrize(("sql", "rendered"), [
    (f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}')",
     f"CREATE CLUSTER c SIZE = 'medium', SPARK = '{URL}'"),
    (f"CREATE CLUSTER c SPARK '{URL}'", f"CREATE CLUSTER c SPARK = '{URL}'"),
    (f"create cluster c with (spark '{URL}', size 'small')",
     f"CREATE CLUSTER c SPARK = '{URL}', SIZE = 'small'"),
    (f"ALTER CLUSTER c SET (SPARK = '{URL}')", f"ALTER CLUSTER c SET (SPARK = '{URL}')"),
    (f"ALTER CLUSTER c SPARK '{URL}'", f"ALTER CLUSTER c SET (SPARK = '{URL}')"),
    ("ALTER CLUSTER c RESET (SPARK)", "ALTER CLUSTER c RESET (SPARK)"),
    ("alter cluster c reset spark, size", "ALTER CLUSTER c RESET (SPARK, SIZE)"),
    ("SHOW CREATE CLUSTER c", "SHOW CREATE CLUSTER c"),
])
def test_statements_round_trip_through_the_parser(sql: str, rendered: str) -> None:
    tree = parse_one(sql)
    assert tree.sql(dialect=DIALECT) == rendered
    assert parse_one(rendered) == tree


def test_spark_parses_as_a_string_option() -> None:
    tree = parse_one(f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}')")
    assert isinstance(tree, ast.CreateCluster)
    spark = tree.args["options"][1]
    assert (spark.name, spark.args["value"].is_string, spark.args["value"].name) == (
        "SPARK", True, URL)
    reset = parse_one("ALTER CLUSTER c RESET (SPARK)")
    assert isinstance(reset, ast.AlterCluster) and reset.args["reset"]
    assert [o.name for o in reset.args["options"]] == ["SPARK"]
    assert parse_one("ALTER CLUSTER c SET (SPARK = 'x')").args.get("reset") is None


@pytest.mark.parametrize("sql", [
    "ALTER CLUSTER c RESET (SPARK = 'sc://h:1')",
    "ALTER CLUSTER c RESET ()",
    "SHOW CREATE CLUSTER",
])
def test_malformed_statements_are_parse_errors(sql: str) -> None:
    with pytest.raises(mzflow.ParseError):
        parse_one(sql)


# -- storage -----------------------------------------------------------------------------

def test_spark_is_stored_and_survives_reconnect(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as a:
        a.execute(f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}'); CREATE CLUSTER plain")
    with mzflow.connect(str(tmp_path)) as b:
        assert rows(b, "SELECT name, size, spark FROM mz_clusters ORDER BY id") == [
            ("default", None, None), ("c", "medium", URL), ("plain", None, None)]
        assert spark_of(b, "c") == URL
        assert spark_of(b, "plain") is None


def test_an_unreachable_endpoint_is_accepted(conn) -> None:
    # Nothing listens on port 1: the DDL checks the form only, the tick connects.
    conn.execute("CREATE CLUSTER later SPARK 'sc://127.0.0.1:1'")
    assert spark_of(conn, "later") == "sc://127.0.0.1:1"


@pytest.mark.parametrize("url", [
    "sc://localhost:15002",
    "sc://localhost:15002/",
    "sc://10.0.0.7:1/;token=abc%3D%3D;use_ssl=true",
    "sc://[::1]:65535",
    "sc://spark-connect.svc.cluster.local:443/;user_id=etl",
])
def test_valid_urls_are_stored_as_written(conn, url: str) -> None:
    conn.execute(f"CREATE CLUSTER c SPARK '{url}'")
    assert rows(conn, "SELECT spark FROM mz_clusters WHERE name = 'c'") == [(url,)]


def test_mz_clusters_keeps_its_visible_shape(conn) -> None:
    conn.execute(f"CREATE CLUSTER c SPARK '{URL}'")
    result = conn.execute("SELECT * FROM mz_clusters ORDER BY id")
    assert result.columns == ["id", "name"]
    assert result.rows == [(1, "default"), (2, "c")]
    assert rows(conn, "SELECT name, spark FROM mz_clusters WHERE spark IS NOT NULL") == [
        ("c", URL)]


# -- SHOW CREATE CLUSTER -----------------------------------------------------------------

def test_show_create_cluster(conn) -> None:
    conn.execute(f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}');"
                 "CREATE CLUSTER v VIRTUAL; CREATE CLUSTER plain")
    result = conn.execute("SHOW CREATE CLUSTER c")
    assert result.columns == ["Cluster", "Create Cluster"]
    assert result.rows == [
        ("c", f"CREATE CLUSTER \"c\" (SIZE = 'medium', SPARK = '{URL}')")]
    assert rows(conn, "SHOW CREATE CLUSTER v") == [("v", 'CREATE CLUSTER "v" (VIRTUAL)')]
    assert rows(conn, "SHOW CREATE CLUSTER plain") == [("plain", 'CREATE CLUSTER "plain"')]
    with pytest.raises(mzflow.UnknownObject, match="unknown cluster 'nope'"):
        conn.execute("SHOW CREATE CLUSTER nope")


def test_show_create_cluster_recreates_the_cluster(conn, tmp_path: Path) -> None:
    conn.execute(f"CREATE CLUSTER c (SIZE = 'large', SPARK = '{URL}')")
    conn.execute("ALTER CLUSTER c SET (SIZE = 'small')")
    (_, create_sql), = rows(conn, "SHOW CREATE CLUSTER c")
    with mzflow.connect(str(tmp_path / "other")) as other:
        other.execute(create_sql)
        assert rows(other, "SELECT name, virtual, size, spark FROM mz_clusters "
                           "WHERE name = 'c'") == [("c", False, "small", URL)]


# -- ALTER CLUSTER -----------------------------------------------------------------------

def test_alter_set_changes_only_the_options_it_names(conn) -> None:
    conn.execute(f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}')")
    conn.execute("ALTER CLUSTER c SET (SIZE = 'large')")
    assert rows(conn, "SELECT size, spark FROM mz_clusters WHERE name = 'c'") == [
        ("large", URL)]
    conn.execute("ALTER CLUSTER c SET (SPARK = 'sc://other:15003')")
    assert rows(conn, "SELECT size, spark FROM mz_clusters WHERE name = 'c'") == [
        ("large", "sc://other:15003")]


def test_alter_reset_returns_options_to_their_defaults(conn) -> None:
    conn.execute(f"CREATE CLUSTER c (SIZE = 'medium', SPARK = '{URL}')")
    conn.execute("ALTER CLUSTER c RESET (SIZE)")
    assert rows(conn, "SELECT size, pool_slots, spark FROM mz_clusters WHERE name = 'c'") == [
        (None, 2, URL)]
    conn.execute("ALTER CLUSTER c RESET (SPARK)")
    assert rows(conn, "SELECT size, spark FROM mz_clusters WHERE name = 'c'") == [(None, None)]
    assert spark_of(conn, "c") is None
    conn.execute("CREATE CLUSTER v VIRTUAL; ALTER CLUSTER v RESET (VIRTUAL)")
    assert rows(conn, "SELECT virtual FROM mz_clusters WHERE name = 'v'") == [(False,)]


def test_a_virtual_cluster_can_become_spark_bound_in_two_steps(conn) -> None:
    conn.execute("CREATE CLUSTER v VIRTUAL")
    conn.execute(f"ALTER CLUSTER v RESET (VIRTUAL); ALTER CLUSTER v SET (SPARK '{URL}')")
    assert rows(conn, "SELECT virtual, spark FROM mz_clusters WHERE name = 'v'") == [
        (False, URL)]


# -- errors ------------------------------------------------------------------------------

FORM = "sc://host:port[/;param=value…]"


@pytest.mark.parametrize(("sql", "message"), [
    ("CREATE CLUSTER x SPARK 'http://h:15002'",
     "invalid SPARK 'http://h:15002': the scheme must be sc://"),
    ("CREATE CLUSTER x SPARK 'h:15002'", "invalid SPARK 'h:15002': the scheme must be sc://"),
    ("CREATE CLUSTER x SPARK 'sc://h'", "invalid SPARK 'sc://h': the port is missing"),
    ("CREATE CLUSTER x SPARK 'sc://h:'", "invalid SPARK 'sc://h:': the port is missing"),
    ("CREATE CLUSTER x SPARK 'sc://h/;token=a'",
     "invalid SPARK 'sc://h/;token=a': the port is missing"),
    ("CREATE CLUSTER x SPARK 'sc://h:0'",
     "invalid SPARK 'sc://h:0': the port must be a number from 1 to 65535, not '0'"),
    ("CREATE CLUSTER x SPARK 'sc://h:65536'",
     "the port must be a number from 1 to 65535, not '65536'"),
    ("CREATE CLUSTER x SPARK 'sc://h:port'",
     "the port must be a number from 1 to 65535, not 'port'"),
    ("CREATE CLUSTER x SPARK 'sc://:15002'", "invalid SPARK 'sc://:15002': the host is missing"),
    ("CREATE CLUSTER x SPARK 'sc://h_@x:1'", "'h_@x' is not a host name"),
    ("CREATE CLUSTER x SPARK 'sc://h:1/path'",
     "only parameters may follow the port, after '/;'"),
    ("CREATE CLUSTER x SPARK 'sc://h:1?token=a'",
     "only parameters may follow the port, after '/;'"),
    ("CREATE CLUSTER x SPARK 'sc://h:1/;token'", "'token' is not a key=value parameter"),
    ("CREATE CLUSTER x SPARK 'sc://h :1'", "a URL has no white space"),
    ("CREATE CLUSTER x SPARK ''", "invalid SPARK '': the scheme must be sc://"),
])
def test_malformed_urls_name_the_option_and_show_the_form(conn, sql: str, message: str) -> None:
    with pytest.raises(mzflow.InvalidOption, match=message) as info:
        conn.execute(sql)
    assert FORM in str(info.value) and "SPARK" in info.value.message
    assert rows(conn, "SELECT name FROM mz_clusters WHERE name = 'x'") == []


@pytest.mark.parametrize("sql", [
    "CREATE CLUSTER x SPARK 15002",
    "CREATE CLUSTER x SPARK = localhost",
    "CREATE CLUSTER x SPARK",
    "CREATE CLUSTER x (SPARK = true)",
])
def test_spark_must_be_a_string(conn, sql: str) -> None:
    with pytest.raises(mzflow.InvalidOption,
                       match="SPARK must be a string, such as SPARK 'sc://localhost:15002'"
                       ) as info:
        conn.execute(sql)
    assert FORM in str(info.value)


@pytest.mark.parametrize(("sql", "message"), [
    (f"CREATE CLUSTER x (VIRTUAL, SPARK '{URL}')",
     "only one of VIRTUAL and SPARK may be specified"),
    (f"CREATE CLUSTER x SPARK '{URL}', VIRTUAL",
     "only one of VIRTUAL and SPARK may be specified"),
    (f"CREATE CLUSTER x SPARK '{URL}', SPARK '{URL}'", "SPARK specified more than once"),
    ("CREATE CLUSTER x FAST", "valid options are VIRTUAL, SIZE and SPARK"),
])
def test_conflicting_options(conn, sql: str, message: str) -> None:
    with pytest.raises(mzflow.InvalidOption, match=message):
        conn.execute(sql)
    assert rows(conn, "SELECT name FROM mz_clusters WHERE name = 'x'") == []


@pytest.mark.parametrize(("sql", "message"), [
    ("ALTER CLUSTER bound SET (VIRTUAL)",
     "cluster 'bound' is bound to SPARK and cannot become VIRTUAL"),
    (f"ALTER CLUSTER v SET (SPARK = '{URL}')",
     "cluster 'v' is VIRTUAL and cannot be bound to SPARK"),
    (f"ALTER CLUSTER bound SET (VIRTUAL, SPARK = '{URL}')",
     "only one of VIRTUAL and SPARK may be specified"),
    ("ALTER CLUSTER bound SET (SPARK = 'sc://h')", "invalid SPARK 'sc://h'"),
    ("ALTER CLUSTER bound RESET (BOGUS)", 'unexpected cluster option "BOGUS"'),
    ("ALTER CLUSTER bound RESET (SPARK, SPARK)", "SPARK specified more than once"),
])
def test_alter_errors_leave_the_cluster_as_it_was(conn, sql: str, message: str) -> None:
    conn.execute(f"CREATE CLUSTER bound (SIZE 'medium', SPARK '{URL}'); CREATE CLUSTER v VIRTUAL")
    before = rows(conn, "SELECT name, virtual, size, spark FROM mz_clusters ORDER BY id")
    with pytest.raises(mzflow.InvalidOption, match=message):
        conn.execute(sql)
    assert rows(conn, "SELECT name, virtual, size, spark FROM mz_clusters ORDER BY id") == before


def test_the_model_refuses_a_virtual_cluster_with_spark() -> None:
    with pytest.raises(ValueError, match="VIRTUAL"):
        Cluster(id=2, name="c", virtual=True, spark=URL)


# -- migration 6 -------------------------------------------------------------------------

def test_migration_6_adds_a_null_spark_to_existing_clusters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        # A catalog as the previous mzflow left it: migrations 1-5, a cluster of its own.
        with monkeypatch.context() as m:
            m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:5])
            m.setattr(migrations, "LATEST", 5)
            migrations.upgrade(engine)
        with engine.begin() as c:
            assert "spark" not in {col["name"] for col in sa.inspect(c).get_columns("clusters")}
            c.execute(sa.text("INSERT INTO clusters (id, name, virtual, size) "
                              "VALUES (2, 'etl', false, 'large')"))
            c.execute(sa.text("UPDATE meta SET value = '3' WHERE key = 'next_cluster_id'"))

        migrations.upgrade(engine)
        with engine.connect() as c:
            assert "spark" in {col["name"] for col in sa.inspect(c).get_columns("clusters")}
            assert list(c.execute(sa.text(
                "SELECT version, name FROM schema_migrations WHERE version = 6"))) == [
                (6, "cluster spark endpoint")]
            assert list(c.execute(sa.text("SELECT name, spark FROM clusters ORDER BY id"))) == [
                ("default", None), ("etl", None)]
    finally:
        engine.dispose()

    with mzflow.connect(str(tmp_path)) as conn:  # and the session reads it
        assert rows(conn, "SELECT name, size, spark FROM mz_clusters ORDER BY id") == [
            ("default", None, None), ("etl", "large", None)]
        conn.execute(f"ALTER CLUSTER etl SET (SPARK '{URL}'); CREATE CLUSTER c")
        assert rows(conn, "SELECT name, size, spark FROM mz_clusters ORDER BY id") == [
            ("default", None, None), ("etl", "large", URL), ("c", None, None)]


def test_a_fresh_catalog_is_at_the_latest_migration(conn, tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        with engine.connect() as c:
            versions = list(c.execute(sa.text("SELECT version FROM schema_migrations")).scalars())
    finally:
        engine.dispose()
    # 6 added clusters' spark column; later migrations (7: read holds) leave it be.
    assert migrations.LATEST >= 6 and max(versions) == migrations.LATEST
