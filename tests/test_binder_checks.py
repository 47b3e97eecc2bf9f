"""The binder's checks (catalog/checks.py) against PostgreSQL itself: each query that
PostgreSQL refuses is refused by mzflow before Spark sees it, with PostgreSQL's
SQLSTATE and message, or with Materialize's where its sqllogictest files word it
otherwise (``MATERIALIZE``). mzflow binds in process: no Spark starts here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import mzflow
from mzflow.read import reads
from mzflow.sql.parse import parse_query
from mzflow_dev import pg_server

psycopg2 = pytest.importorskip("psycopg2")
sa = pytest.importorskip("sqlalchemy")

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SCHEMA = ["CREATE TABLE t (a int, b int)", "CREATE TABLE s (x text, y int)"]
ROWS = ["INSERT INTO t VALUES (1, 2), (1, 3), (2, 5)",
        "INSERT INTO s VALUES ('a', 3), ('b c', 1), (NULL, 2)"]

# PostgreSQL's message → (SQLSTATE, message) Materialize gives instead, and where it says so.
MATERIALIZE: dict[str, tuple[str, str, str]] = {
    "aggregate functions are not allowed in WHERE": (
        "42803", "aggregate functions are not allowed in WHERE clause",
        "test/sqllogictest/aggregates.slt"),
    "column t.q does not exist": ("42703", 'column "t.q" does not exist',
                                  "test/sqllogictest/aggregates.slt (column \"t.c\")"),
    'invalid reference to FROM-clause entry for table "a"': (
        "42703", 'column "a.a" does not exist', "test/sqllogictest/postgres/join-lateral.slt"),
    "argument of LIMIT must not contain variables": (
        "42703", 'column "a" does not exist', "test/sqllogictest/limit.slt"),
}

REFUSED = [
    "SELECT a, b FROM t GROUP BY a",
    "SELECT a, b FROM t GROUP BY 1",
    "SELECT 1 FROM t GROUP BY a ORDER BY b",
    "SELECT 1 FROM t GROUP BY a HAVING b > 0",
    "SELECT DISTINCT ON (b) a FROM t GROUP BY a ORDER BY b",
    "SELECT a, b FROM t GROUP BY ROLLUP (a)",
    "SELECT sum(b) OVER () FROM t GROUP BY a",
    "SELECT (SELECT t.b) FROM t GROUP BY a",
    "SELECT a FROM t ORDER BY sum(b)",
    "SELECT 1 FROM t HAVING a > 1",
    "SELECT a FROM t WHERE sum(b) > 1",
    "SELECT * FROM t JOIN s ON sum(a) = 1",
    "SELECT a FROM t GROUP BY sum(b)",
    "SELECT sum(sum(b)) FROM t",
    "SELECT a FROM t GROUP BY a HAVING sum(sum(b)) > 1",
    "SELECT array_agg(a ORDER BY sum(b)) FROM t",
    "SELECT count(*) FILTER (WHERE sum(a) > 1) FROM t",
    "SELECT sum(row_number() OVER ()) FROM t",
    "SELECT a FROM t WHERE row_number() OVER () > 1",
    "SELECT a FROM t GROUP BY a HAVING row_number() OVER () > 1",
    "SELECT row_number() OVER () FROM t GROUP BY row_number() OVER ()",
    "SELECT * FROM t JOIN s ON row_number() OVER () = 1",
    "SELECT t.q FROM t",
    "SELECT x.a FROM t",
    "SELECT s.* FROM t",
    "SELECT a, g FROM t AS a, (SELECT a.a AS g) AS ss",
    "SELECT a FROM t LIMIT -1",
    "SELECT a FROM t OFFSET -1",
    "SELECT a FROM t UNION SELECT a FROM t LIMIT -1",
    "SELECT a FROM t LIMIT 3 * 4 - 13",
    "SELECT a FROM t LIMIT '1.5'",
    "SELECT a FROM t LIMIT a",
    "SELECT a FROM t LIMIT sum(b)",
    "SELECT a FROM t OFFSET sum(b)",
    "SELECT '0.2'::apd",
    "SELECT CAST(a AS nosuch.type) FROM t",
    "SELECT CAST(a AS public.nosuch) FROM t",
    "SELECT array_agg(DISTINCT x ORDER BY y) FROM s",
    "SELECT string_agg(DISTINCT x, ',' ORDER BY y) FROM s",
    "SELECT array_agg(x ORDER BY y) OVER () FROM s",
    "SELECT row_number() FROM t",
    "SELECT first_value(a) FROM t",
    "SELECT 1 FROM t AS x, s AS x",
    "SELECT a FROM t, t",
    "SELECT (a, b) IN (SELECT a FROM t) FROM t",
    "SELECT a IN (SELECT a, b FROM t) FROM t",
    "SELECT a FROM t INTERSECT SELECT a, b FROM t",
    "SELECT a FROM t UNION SELECT * FROM t",
    "SELECT a = (SELECT a, b FROM t LIMIT 1) FROM t",
    "SELECT a FROM t ORDER BY 0",
    "SELECT a FROM t GROUP BY 2",
    "SELECT DISTINCT ON (a) b FROM t ORDER BY b, a",
    "SELECT DISTINCT ON (a) b FROM t ORDER BY 1",
    # Conditions of another type: Spark's words once, EXPECT's in process.
    "SELECT 1 WHERE 1",
    "SELECT a FROM t WHERE a",
    "SELECT a FROM t WHERE (a + 1)",
    "SELECT a FROM t GROUP BY a HAVING sum(b)",
    "SELECT * FROM t JOIN s ON y",
    "SELECT count(*) FILTER (WHERE x) FROM s",
]

ACCEPTED = [
    "SELECT sum(sum(b)) OVER () FROM t GROUP BY a",
    "SELECT (SELECT sum(t.b)) FROM t GROUP BY a",
    "SELECT (SELECT t.a) FROM t GROUP BY t.a",
    "SELECT a AS c, sum(b) FROM t GROUP BY c",
    "SELECT a, sum(b) AS a FROM t GROUP BY a",
    "SELECT 2 * a, sum(b) FROM t GROUP BY 1",
    "SELECT a + 1, sum(b) AS total FROM t GROUP BY a + 1 ORDER BY total",
    "SELECT x.p, sum(x.q) FROM t AS x(p, q) GROUP BY x.p",
    "SELECT count(*) FILTER (WHERE a > 1) OVER () FROM t",
    "SELECT array_agg(x ORDER BY y) FILTER (WHERE y > 1) FROM s",
    "SELECT y, count(*) FILTER (WHERE x > 'a') FROM s GROUP BY y",
    "SELECT CASE WHEN a > 1 THEN sum(b) END FROM t GROUP BY a",
    "SELECT a FROM t GROUP BY a HAVING sum(b) > 1 ORDER BY 1",
    "SELECT max(a) FROM t GROUP BY ()",
    "SELECT t.a, (SELECT max(s.y) FROM s WHERE s.y > t.a) FROM t GROUP BY t.a",
    "WITH c AS (SELECT a, sum(b) AS sb FROM t GROUP BY a) SELECT c.a, c.sb FROM c",
    "SELECT d.q FROM (SELECT a FROM t) AS d(q)",
    "SELECT * FROM t, LATERAL (SELECT * FROM s WHERE s.y = t.a LIMIT 1) AS q",
    "SELECT array_agg(DISTINCT x ORDER BY x DESC) FROM s",
    "SELECT a FROM t LIMIT 1.5",
    "SELECT a FROM t LIMIT '2' OFFSET 1",
    "SELECT a FROM t LIMIT NULL OFFSET NULL",
    "SELECT DISTINCT ON (a, b) a FROM t ORDER BY b, a, 1",
    "SELECT DISTINCT ON (a) a AS z FROM t ORDER BY z",
    "SELECT DISTINCT ON (a + 1) b FROM t ORDER BY a + 1 DESC, b",
    "SELECT DISTINCT ON (1) a, b FROM t ORDER BY 1, 2",
    "SELECT row_number() OVER (), first_value(a) OVER (ORDER BY b) FROM t",
    "SELECT * FROM t WHERE EXISTS (SELECT a, b FROM t)",
    "SELECT (a, b) IN (SELECT a, b FROM t) FROM t",
    "SELECT * FROM t ORDER BY 2",
    "SELECT a FROM t WHERE NULL",
    "SELECT a FROM t WHERE 'true'",
    "SELECT a FROM t WHERE (a > 1) AND (b < 9)",
    "SELECT count(*) FILTER (WHERE x IS NULL) FROM s",
]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url, "DROP SCHEMA IF EXISTS binder_checks CASCADE",
                          "CREATE SCHEMA binder_checks", "SET search_path TO binder_checks",
                          *SCHEMA, *ROWS) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-binder-") as home, \
            mzflow.connect(home) as conn:
        for sql in SCHEMA:
            conn.execute(sql)
        yield conn


def bound(conn: mzflow.Connection, sql: str) -> reads.Plan:
    """Bind and plan as a read does, without running it (no Spark)."""
    return reads.plan(conn.store.snapshot(), parse_query(sql))


@pytest.mark.parametrize("sql", REFUSED)
def test_refused_as_postgresql_refuses(pg: Any, mz: mzflow.Connection, sql: str) -> None:
    with pytest.raises(psycopg2.Error) as pg_info:
        pg.execute(sql)
    pg_code, pg_message = pg_info.value.pgcode, pg_info.value.diag.message_primary
    code, message, _source = MATERIALIZE.get(pg_message, (pg_code, pg_message, ""))
    with pytest.raises(mzflow.Error) as info:
        bound(mz, sql)
    assert (info.value.code, info.value.message) == (code, message), (
        f"PostgreSQL: {pg_code} {pg_message}")


@pytest.mark.parametrize("sql", ACCEPTED)
def test_accepted_as_postgresql_accepts(pg: Any, mz: mzflow.Connection, sql: str) -> None:
    pg.execute(sql)
    rows = pg.fetchall()
    plan = bound(mz, sql)
    limit = plan.query.args.get("limit")
    if "LIMIT" in sql and limit is not None:
        # A constant LIMIT is folded to the integer PostgreSQL read it as.
        offset = plan.query.args.get("offset")
        skipped = int(offset.expression.this) if offset is not None else 0
        assert int(limit.expression.this) == len(rows), plan.query.sql()
        assert skipped + len(rows) <= 3


@pytest.mark.parametrize(("sql", "word"), [
    # PostgreSQL runs both; Spark cannot, and mzflow does not rewrite them yet.
    ("SELECT * FROM t, LATERAL (SELECT * FROM s LIMIT t.a) AS q",
     "LIMIT that reads an enclosing query's columns"),
    ("SELECT a FROM t LIMIT (SELECT 1)", "a subquery in LIMIT"),
])
def test_limits_spark_cannot_run_are_refused_by_name(pg: Any, mz: mzflow.Connection,
                                                     sql: str, word: str) -> None:
    pg.execute(sql)
    with pytest.raises(mzflow.Unsupported, match=word):
        bound(mz, sql)
