"""What dbt-materialize sends that mzflow must answer as Materialize does, one fix each,
in the catalog only (no Spark); the whole adapter against ``mzflow serve`` is
tests/test_dbt.py."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator

import pytest
from sqlglot import exp

import mzflow
from mzflow.sql.parse import parse_one


@pytest.fixture
def conn() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-dbt-") as home, \
            mzflow.connect(home) as c:
        yield c


def test_mz_version_has_materializes_form_and_passes_dbts_check(
        conn: mzflow.Connection) -> None:
    # dbt-materialize: parameter_status("mz_version").split()[0][1:] must be >= 0.68.0
    (value,), = conn.execute("SHOW mz_version").rows
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+) \(mzflow(?: ([^)]+))?\)", str(value))
    assert match, value
    assert tuple(int(g) for g in match.groups()[:3]) >= (0, 68, 0)
    assert match.group(4) in (None, mzflow.__version__)  # None: a checkout not installed


@pytest.mark.parametrize("name", ["welcome_message", "auto_route_catalog_queries",
                                  "current_object_missing_warnings"])
def test_the_startup_flags_dbt_sends_are_session_variables(conn: mzflow.Connection,
                                                           name: str) -> None:
    assert conn.execute(f"SHOW {name}").rows == [("on",)]  # Materialize's defaults
    conn.execute(f"SET {name} = off")
    assert conn.execute(f"SHOW {name}").rows == [("off",)]
    conn.execute(f"RESET {name}")
    assert conn.execute(f"SHOW {name}").rows == [("on",)]
    with pytest.raises(mzflow.Error) as info:
        conn.execute(f"SET {name} = 'sometimes'")
    assert (info.value.code, info.value.message) == (
        "22023", f'parameter "{name}" requires a Boolean value')


def test_a_view_body_in_parentheses_is_its_query() -> None:
    # dbt-materialize writes `create view v as ( <model sql> );`
    stmt = parse_one("CREATE MATERIALIZED VIEW v IN CLUSTER c AS ((SELECT a FROM t))")
    assert stmt.args["query"] == parse_one("SELECT a FROM t")


@pytest.mark.parametrize(("sql", "query"), [
    ("(SELECT a FROM t)", "SELECT a FROM t"),
    ("(SELECT a FROM t) ORDER BY a LIMIT 2", "SELECT a FROM t ORDER BY a LIMIT 2"),
    ("((SELECT a FROM t WHERE a > 1)) OFFSET 1", "SELECT a FROM t WHERE a > 1 OFFSET 1"),
    # the inner LIMIT comes first: the outer one applies to its rows
    ("(SELECT a FROM t ORDER BY a LIMIT 5) ORDER BY a DESC LIMIT 1",
     "SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 5) AS subquery ORDER BY a DESC LIMIT 1"),
    ("(SELECT a FROM t) UNION (SELECT b FROM u)", "(SELECT a FROM t) UNION (SELECT b FROM u)"),
])
def test_a_statement_in_parentheses_is_its_query(sql: str, query: str) -> None:
    stmt = parse_one(sql)
    assert isinstance(stmt, exp.Query)
    assert stmt == parse_one(query), stmt.sql()


def test_views_created_as_dbt_writes_them(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (a int, b text)")
    conn.execute('create view "materialize"."public"."v"\n  as (\n    select a from t '
                 "where b <> 'x'\n  );")
    assert conn.execute("SHOW CREATE VIEW v").rows[0][1] == (
        'CREATE VIEW "materialize"."public"."v" AS SELECT a FROM "materialize"."public"."t" '
        "WHERE b <> 'x'")
    assert conn.execute("SHOW COLUMNS FROM v").rows[0][:2] == ("a", True)
    assert conn.execute("(SELECT 1 AS x UNION ALL SELECT 2) ORDER BY x DESC").rows == [
        (2,), (1,)]


@pytest.mark.parametrize("sql", ["create temporary view __dbt_sbq7 as select 1",
                                 "CREATE TEMP TABLE t (a int)"])
def test_temporary_objects_are_refused_by_name(sql: str) -> None:
    # dbt-materialize's contracts (get_column_schema_from_query) create one
    with pytest.raises(mzflow.Error) as info:
        parse_one(sql)
    assert "CREATE TEMPORARY is not supported" in info.value.message


def test_comments_as_dbts_persist_docs_writes_them(conn: mzflow.Connection) -> None:
    # persist_docs: one COMMENT ON per relation and column, in dollar quotes
    conn.execute("CREATE TABLE t (a int, b text)")
    conn.execute("CREATE MATERIALIZED VIEW mv AS SELECT a, count(*) AS n FROM t GROUP BY a")
    conn.execute('comment on materialized view "materialize"."public"."mv" is '
                 "$dbt_comment_literal_block$Per a: its rows$dbt_comment_literal_block$;")
    conn.execute('comment on column "materialize"."public"."mv".n is $x$how many$x$;')
    assert sorted(conn.execute(
        "SELECT object_type, object_sub_id, comment FROM mz_internal.mz_comments").rows,
        key=str) == [("materialized-view", 2, "how many"),
                     ("materialized-view", None, "Per a: its rows")]
    with pytest.raises(mzflow.Error) as info:
        conn.execute("COMMENT ON MATERIALIZED VIEW t IS 'no'")
    assert (info.value.code, info.value.message) == (
        "42809", "materialize.public.t is not a materialized view")
