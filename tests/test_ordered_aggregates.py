"""``array_agg`` and ``string_agg`` with ORDER BY, on Spark, against PostgreSQL: reads,
a maintained view through a batch of changes, and the values' text as PostgreSQL
prints it (``mzflow.values.pg_text`` over what the read returned vs PostgreSQL's
``::text`` of the same expression).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import mzflow
from mzflow.values import pg_text
from mzflow_dev import pg_server

psycopg2 = pytest.importorskip("psycopg2")
sa = pytest.importorskip("sqlalchemy")

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres]

SCHEMA = "CREATE TABLE s (g int, x text, y int)"
ROWS = ("INSERT INTO s VALUES (1, 'a', 3), (1, 'b c', 1), (1, NULL, 2), (1, 'd', NULL), "
        "(2, 'e', 5), (2, 'f', 5), (2, '', 4), (3, NULL, NULL)")
CHANGES = ["INSERT INTO s VALUES (1, 'z', 0), (2, NULL, 9), (4, 'q', 1)",
           "DELETE FROM s WHERE x = 'b c' OR (g = 3)",
           "UPDATE s SET y = 10 WHERE x = 'e'"]

# Every query orders its rows; ties inside an aggregate's ORDER BY are broken, since
# PostgreSQL leaves their order unspecified.
READS = [
    "SELECT array_agg(x ORDER BY y, x) FROM s",
    "SELECT g, array_agg(x ORDER BY y DESC, x) FROM s GROUP BY g ORDER BY g",
    "SELECT array_agg(y ORDER BY x NULLS FIRST, y) FROM s",
    "SELECT g, array_agg(y ORDER BY x DESC NULLS LAST, y) FROM s GROUP BY g ORDER BY g",
    "SELECT array_agg(DISTINCT x) FROM s",
    "SELECT array_agg(DISTINCT y ORDER BY y DESC) FROM s",
    "SELECT array_agg(x ORDER BY y, x) FILTER (WHERE y > 100) FROM s",
    "SELECT g, array_agg(x ORDER BY x) FILTER (WHERE y > 2) FROM s GROUP BY g ORDER BY g",
    "SELECT array_agg(x) FROM s WHERE false",
    "SELECT array_agg(x ORDER BY x) FROM s WHERE g = 3",
    "SELECT string_agg(x, ',' ORDER BY y DESC, x) FROM s",
    "SELECT g, string_agg(x, '-' ORDER BY x DESC) FROM s GROUP BY g ORDER BY g",
    "SELECT string_agg(x, ',' ORDER BY x) FROM s WHERE g = 3",
]
VIEW = ("SELECT g, array_agg(x ORDER BY y, x) AS xs, string_agg(x, ',' ORDER BY y DESC, x) "
        "AS st, array_agg(y ORDER BY y DESC) AS ys FROM s GROUP BY g")

# Values whose text PostgreSQL and the shell must print alike.
TEXTS = [
    "TIMESTAMPTZ '2000-01-01 00:00:00+00'", "TIMESTAMPTZ '2000-06-01 12:30:00.25+00'",
    "TIMESTAMP '2020-01-01 01:02:03.789'", "TIMESTAMP '2020-01-01 01:02:03'",
    "INTERVAL '1 minute'", "INTERVAL '-1 minute'", "INTERVAL '1 day 2 hours'",
    "INTERVAL '3 days'", "INTERVAL '1.5 seconds'", "true", "false", "1.50", "-0.00",
    "0.1::float8", "1e20::float8", "1e15::float8", "123456789012345::float8",
    "'-0'::float8", "'NaN'::float8", "'-Infinity'::float8", "0.1::real", "123456.7::real",
    "1234567::real", "'ab'::bytea", "DATE '2000-01-02'", "ARRAY['a', 'b c', NULL, '']",
    "ARRAY[1, 2, 3]", "ARRAY[ARRAY[1, 2], ARRAY[3, 4]]",
    "ARRAY[TIMESTAMP '2000-01-01 00:00:00']", "ARRAY[true, false]",
]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url, "DROP SCHEMA IF EXISTS ordered_aggregates CASCADE",
                          "CREATE SCHEMA ordered_aggregates",
                          "SET search_path TO ordered_aggregates", "SET TimeZone TO 'UTC'",
                          SCHEMA, ROWS) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-ordered-") as home, \
            mzflow.connect(home) as conn:
        conn.execute(SCHEMA)
        conn.execute(ROWS)
        yield conn


def pg_rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return [tuple(r) for r in cur.fetchall()]


def test_reads_match_postgresql(pg: Any, mz: mzflow.Connection) -> None:
    differ = {sql: (mz.execute(sql).rows, pg_rows(pg, sql)) for sql in READS}
    differ = {sql: pair for sql, pair in differ.items() if pair[0] != pair[1]}
    assert not differ, "\n".join(f"{sql}\n  mzflow:     {m}\n  PostgreSQL: {p}"
                                 for sql, (m, p) in differ.items())


def test_a_maintained_view_matches_postgresql_through_changes(
        pg: Any, mz: mzflow.Connection) -> None:
    mz.execute(f"CREATE MATERIALIZED VIEW mv AS {VIEW}")
    read = "SELECT * FROM mv ORDER BY g"
    assert mz.execute(read).rows == pg_rows(pg, f"{VIEW} ORDER BY g")
    for change in CHANGES:
        mz.execute(change)
        pg.execute(change)
        assert mz.execute(read).rows == pg_rows(pg, f"{VIEW} ORDER BY g"), change


def pg_texts(cur: Any, sql: str) -> tuple[str, ...]:
    """The first row's values as PostgreSQL's output functions wrote them (the wire's
    text format, unparsed by psycopg2; ``::text`` would differ: ``true``, not ``t``)."""
    cur.execute("SELECT oid FROM pg_type")
    oids = tuple(int(oid) for (oid,) in cur.fetchall())
    raw = cur.connection.cursor()
    psycopg2.extensions.register_type(
        psycopg2.extensions.new_type(oids, "RAW_TEXT", lambda value, _: value), raw)
    raw.execute(sql)
    return tuple(raw.fetchone())


def test_values_print_as_postgresql_prints_them(pg: Any, mz: mzflow.Connection) -> None:
    result = mz.execute("SELECT " + ", ".join(TEXTS))
    texts = pg_texts(pg, "SELECT " + ", ".join(TEXTS))
    got = [pg_text(v, t) for v, t in zip(result.rows[0], result.types, strict=True)]
    differ = [(e, g, w) for e, g, w in zip(TEXTS, got, texts, strict=True) if g != w]
    assert not differ, "\n".join(f"{e}: mzflow {g!r}, PostgreSQL {w!r}" for e, g, w in differ)
