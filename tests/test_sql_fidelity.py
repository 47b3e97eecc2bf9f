"""Regressions for what SQLite's sqllogictest corpus found (issue 14): wrong answers,
refusals in planner terms, and errors that did not read like PostgreSQL's.

The error tests run in-process (no Spark). The maintained-view test compares
materialized views with DuckDB on the same data before and after a batch of
changes, so it checks the incremental path (or its recompute), not only reads.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest

import mzflow

duckdb = pytest.importorskip("duckdb")


@pytest.fixture
def conn() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-fidelity-") as home, \
            mzflow.connect(home) as c:
        yield c


def error_of(conn: mzflow.Connection, sql: str) -> mzflow.Error:
    with pytest.raises(mzflow.Error) as info:
        conn.execute(sql)
    return info.value


@pytest.mark.parametrize(("ddl", "message"), [
    ("CREATE TABLE t2(y INTEGER PRIMARY KEY)", "PRIMARY KEY constraints are not supported"),
    ("CREATE TABLE t2(y INTEGER UNIQUE)", "UNIQUE constraints are not supported"),
    ("CREATE TABLE t2(y INTEGER CHECK (y > 0))", "CHECK constraints are not supported"),
])
def test_unsupported_constraints_are_named(conn: mzflow.Connection, ddl: str,
                                           message: str) -> None:
    err = error_of(conn, ddl)
    assert isinstance(err, mzflow.Unsupported)
    assert str(err) == message


@pytest.mark.parametrize(("sql", "code", "message"), [
    ("SELECT * FROM nosuch", "42P01", "unknown catalog item 'nosuch'"),
    ("SELECT nosuch FROM t", "42703", 'column "nosuch" does not exist'),
    ("SELECT 1 / 0", "22012", "division by zero"),
    ("SELECT 'abc'::int", "22P02", 'invalid input syntax for type integer: "abc"'),
    ("INSERT INTO t VALUES ('abc')", "22P02", 'invalid input syntax for type integer: "abc"'),
    ("SELEC * FROM t", "42601", 'syntax error at or near "SELEC"'),
    ("SET nope = 1", "42704", 'unrecognized configuration parameter "nope"'),
    ("SHOW nope", "42704", 'unrecognized configuration parameter "nope"'),
    # Materialize's wording, PostgreSQL's code (invalid_schema_name)
    ("SELECT * FROM nosch.t", "3F000", "unknown schema 'nosch'"),
])
def test_errors_carry_postgres_sqlstates(conn: mzflow.Connection, sql: str, code: str,
                                         message: str) -> None:
    conn.execute("CREATE TABLE t (a int)")
    err = error_of(conn, sql)
    assert err.code == code, f"{type(err).__name__}: {err}"
    assert message in str(err)


# A group on the right of an outer join is read as a group now
# (tests/test_join_precedence.py); an alias on one is still refused.
@pytest.mark.parametrize("sql", [
    "SELECT j.a FROM (t AS a CROSS JOIN t AS b) AS j",
])
def test_parenthesized_joins_that_do_not_flatten_are_refused(conn: mzflow.Connection,
                                                             sql: str) -> None:
    conn.execute("CREATE TABLE t (a int)")
    err = error_of(conn, sql)
    assert isinstance(err, mzflow.Unsupported), f"{type(err).__name__}: {err}"
    assert "parenthesized join" in str(err)


def test_comment_is_null_removes_the_comment(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (a int)")
    conn.execute("COMMENT ON TABLE t IS 'facts'")
    conn.execute("COMMENT ON COLUMN t.a IS 'the a'")
    comments = "SELECT object_sub, comment FROM mz_internal.mz_comments"
    assert sorted(conn.execute(comments).rows, key=str) == [(1, "the a"), (None, "facts")]
    conn.execute("COMMENT ON TABLE t IS NULL")
    assert conn.execute(comments).rows == [(1, "the a")]
    conn.execute("COMMENT ON COLUMN t.a IS NULL")
    assert conn.execute(comments).rows == []


# ---------------------------------------------------------------------------------------
# Spark: evaluation errors of reads, and maintained views against DuckDB
# ---------------------------------------------------------------------------------------

VIEWS = {
    # A parenthesized join in FROM once lost its join (3 rows instead of 9).
    "paren_cross": "SELECT count(*) AS n FROM ( tab0 AS cor0 CROSS JOIN tab0 AS cor1 )",
    "paren_on": "SELECT a.col0 AS a0, b.col0 AS b0 FROM (tab0 AS a JOIN tab0 AS b "
                "ON a.col0 <= b.col0)",
    # Spark alone answers FALSE where SQL says NULL.
    "in_projection": "SELECT col0, col0 IN (SELECT col1 FROM tab1) AS i, "
                     "col0 NOT IN (SELECT col1 FROM tab1) AS ni, "
                     "col0 = ANY (SELECT col1 FROM tab1 WHERE tab1.col2 > tab0.col2) AS a, "
                     "col0 <> ALL (SELECT col1 FROM tab1) AS na FROM tab0",
    # ORDER BY an ordinal that points at a correlated scalar subquery was refused.
    "ordinal_subquery": "SELECT col0, (SELECT count(*) FROM tab1 WHERE tab1.col1 < tab0.col0)"
                        " AS c FROM tab0 ORDER BY 2 DESC, 1 LIMIT 2",
}

SETUP = [
    "CREATE TABLE tab0(col0 INTEGER, col1 INTEGER, col2 INTEGER)",
    "CREATE TABLE tab1(col0 INTEGER, col1 INTEGER, col2 INTEGER)",
    "INSERT INTO tab0 VALUES (97, 1, 99), (15, 81, 47), (87, 21, 10), (NULL, 5, 5)",
    "INSERT INTO tab1 VALUES (51, 14, 96), (85, 5, 59), (91, 87, 68)",
]
BATCHES = [
    ["INSERT INTO tab1 VALUES (1, NULL, 3), (2, 15, 100)", "DELETE FROM tab0 WHERE col0 = 87"],
    ["DELETE FROM tab1 WHERE col1 IS NULL", "INSERT INTO tab0 VALUES (5, 5, 5), (5, 5, 5)"],
]


@pytest.mark.slow
@pytest.mark.spark
def test_read_evaluation_errors_carry_sqlstates(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (a int, s text)")
    conn.execute("INSERT INTO t VALUES (1, 'x')")
    assert error_of(conn, "SELECT a / (a - 1) FROM t").code == "22012"
    assert error_of(conn, "SELECT s::int FROM t").code == "22P02"
    assert error_of(conn, "SELECT nosuch(a) FROM t").code == "42883"
    assert error_of(conn, "SELECT nosuch(1)").code == "42883"


@pytest.mark.slow
@pytest.mark.spark
def test_errors_survive_a_logging_reconfiguration(conn: mzflow.Connection) -> None:
    """Airflow configures logging with dictConfig in the process that ticks, which
    re-enables every existing logger it does not name, pyspark's query-context loggers
    included. Under make test's two processes, a test after an Airflow one got
    "Logger._log() got an unexpected keyword argument 'errorClass'" instead of the
    query's error: those loggers had been made as plain loggers."""
    import logging.config

    conn.execute("CREATE TABLE relog (a int, s text)")
    conn.execute("INSERT INTO relog VALUES (1, 'x')")
    from mzflow.engine import spark

    spark.session()  # Spark first (it sets those loggers up), then Airflow's logging
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    from pyspark.logger import PySparkLogger

    # What pyspark does when a failed query carries a query context (whether it does
    # depends on the call site pyspark captured: not every query here has one).
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).exception("boom", file="f.py", line="1",
                                                fragment="a / 0", errorClass="DIVIDE_BY_ZERO")
    for sql, code in (("SELECT a / (a - 1) FROM relog", "22012"),
                      ("SELECT s::int FROM relog", "22P02")):
        err = error_of(conn, sql)
        assert err.code == code and "errorClass" not in str(err), str(err)


@pytest.mark.slow
@pytest.mark.spark
def test_constant_queries_the_local_executor_cannot_evaluate_run_on_spark(
        conn: mzflow.Connection) -> None:
    # sqlglot's Python executor (for catalog queries) has no NULLIF and fails on - NULL.
    assert conn.execute("SELECT NULLIF(1, 1), - (NULL::int) * 2, NULLIF(2, 1)").rows == [
        (None, None, 2)]


@pytest.mark.slow
@pytest.mark.spark
def test_maintained_views_match_duckdb(conn: mzflow.Connection) -> None:
    duck = duckdb.connect()
    for stmt in SETUP:
        conn.execute(stmt)
        duck.execute(stmt)
    for name, body in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {body}")
    for batch in [[], *BATCHES]:
        for stmt in batch:
            conn.execute(stmt)
            duck.execute(stmt)
        for name, body in VIEWS.items():
            got = Counter(conn.execute(f"SELECT * FROM {name}").rows)
            want = Counter(duck.execute(body).fetchall())
            assert got == want, f"{name} after {batch}: mzflow {got}, DuckDB {want}"
            # The same query as a read (not from the view's index) agrees too.
            assert Counter(conn.execute(body).rows) == want, name
