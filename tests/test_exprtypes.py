"""Expression types and output names at bind time (no Spark): PostgreSQL's rules.

``test_types_oracle.py`` checks the same against a real PostgreSQL server; these
run in the fast suite and pin the rules one by one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mzflow
from mzflow.catalog import exprtypes
from mzflow.engine.spark import to_spark_sql
from mzflow.read import reads
from mzflow.sql.parse import parse_query
from mzflow.storage.types import float4, parse_type


@pytest.fixture
def conn(tmp_path: Path):
    with mzflow.connect(str(tmp_path)) as c:
        c.execute("CREATE TABLE t (i int, b bigint, s smallint, n numeric(12,2), r real, "
                  "f double precision, x text, d date, ts timestamp, v varchar(5))")
        yield c


def columns(conn: mzflow.Connection, sql: str) -> list[tuple[str, str]]:
    conn.execute(f"CREATE VIEW probe AS {sql}")
    try:
        return [(name, type_) for name, _, type_, _ in conn.execute(
            "SHOW COLUMNS FROM probe").rows]
    finally:
        conn.execute("DROP VIEW probe")


@pytest.mark.parametrize("sql, expected", [
    ("SELECT date_trunc('month', d) AS mo, date_trunc('day', ts) AS dy FROM t",
     [("mo", "timestamp with time zone"), ("dy", "timestamp without time zone")]),
    ("SELECT extract(year FROM d) FROM t", [("extract", "numeric")]),
    ("SELECT coalesce(i, b) AS c1, coalesce(n, 0) AS c2, nullif(i, 2) FROM t",
     [("c1", "bigint"), ("c2", "numeric"), ("nullif", "integer")]),
    ("SELECT upper(x), length(x), trim(x), position('a' IN x), x || 'z' FROM t",
     [("upper", "text"), ("length", "integer"), ("btrim", "text"), ("position", "integer"),
      ("?column?", "text")]),
    ("SELECT sum(n), count(*) AS c, avg(i) AS ai, avg(r) AS ar, sum(i) AS si, max(v) FROM t",
     [("sum", "numeric"), ("c", "bigint"), ("ai", "numeric"), ("ar", "double precision"),
      ("si", "bigint"), ("max", "text")]),
    ("SELECT i / 2 AS q, s / s AS h, b / i AS w, r + r AS rr, r * 2 AS rd FROM t",
     [("q", "integer"), ("h", "smallint"), ("w", "bigint"), ("rr", "real"),
      ("rd", "double precision")]),
    ("SELECT n, n::numeric(10,1) AS n1, i::bigint, '1'::int, 1.5 FROM t",
     [("n", "numeric(12,2)"), ("n1", "numeric(10,1)"), ("i", "bigint"), ("int4", "integer"),
      ("?column?", "numeric")]),
    ("SELECT row_number() OVER (ORDER BY i), sum(i) OVER () FROM t",
     [("row_number", "bigint"), ("sum", "bigint")]),
    ("SELECT (SELECT max(n) FROM t), EXISTS (SELECT 1 FROM t) FROM t",
     [("max", "numeric"), ("exists", "boolean")]),
    ("SELECT CASE WHEN i > 1 THEN i ELSE r END, CASE WHEN i > 1 THEN 1 END FROM t",
     [("r", "real"), ("case", "integer")]),
])
def test_view_columns_are_typed_and_named_as_postgresql_does(conn, sql, expected) -> None:
    assert columns(conn, sql) == expected


@pytest.mark.parametrize("sql, expected", [
    ("SELECT i FROM t UNION SELECT b FROM t INTERSECT SELECT s FROM t", [("i", "bigint")]),
    ("(SELECT i FROM t EXCEPT ALL SELECT i FROM t) UNION ALL (SELECT s FROM t)",
     [("i", "integer")]),
    ("SELECT l.m FROM t, LATERAL (SELECT max(n) AS m FROM t AS u WHERE u.i = t.i) AS l",
     [("m", "numeric(*,2)")]),
    ("WITH w AS (SELECT sum(i) AS total FROM t) SELECT total FROM w", [("total", "bigint")]),
])
def test_set_operations_and_derived_tables_are_typed(conn, sql, expected) -> None:
    bound = reads.plan(conn.store.snapshot(), parse_query(sql)).bound
    assert [(c.name, c.type) for c in bound.columns] == expected


def test_computed_numerics_keep_the_scale_postgresql_gives_their_values(conn) -> None:
    snap = conn.store.snapshot()
    bound = reads.plan(snap, parse_query(
        "SELECT sum(n) AS s, n * n AS m, round(n, 1) AS r, avg(n) AS a, n / 3 AS q, "
        "min(n) AS lo FROM t GROUP BY n")).bound
    assert [c.type for c in bound.columns] == [
        "numeric(*,2)", "numeric(*,4)", "numeric(*,1)", "numeric(*,16)", "numeric(*,16)",
        "numeric(*,2)"]
    # Stored as a 38-digit decimal of that scale; printed as PostgreSQL's numeric.
    assert parse_type("numeric(*,2)").spark == "decimal(38,2)"
    assert exprtypes.display_name("numeric(*,2)") == "numeric"


def test_a_definition_whose_type_is_unknown_is_refused_at_create(conn) -> None:
    with pytest.raises(mzflow.Error, match=r"cannot determine the type of MYSTERY\(t\.d\)"):
        conn.execute("CREATE MATERIALIZED VIEW m AS SELECT mystery(d) FROM t")
    assert conn.execute("SHOW MATERIALIZED VIEWS").rows == []


def test_spark_sql_divides_as_postgresql(conn) -> None:
    snap = conn.store.snapshot()
    sql = to_spark_sql(reads.plan(snap, parse_query(
        "SELECT i / 2 AS q, n / 3 AS d, avg(i) AS a FROM t GROUP BY i, n")).query, {})
    assert "CAST(CAST(t.i AS BIGINT) DIV CAST(2 AS BIGINT) AS INT)" in sql  # int4 / int4
    # A numeric quotient and an average at 16 decimal places, not Spark's 6.
    assert ("CAST(CAST(t.n AS DECIMAL(38, 16)) / CAST(3 AS DECIMAL(38, 0)) "
            "AS DECIMAL(38, 16))") in sql
    assert "SUM(CAST(t.i AS DECIMAL(38, 0)))" in sql


def test_real_prints_as_float4() -> None:
    widened = 0.10000000149011612  # 0.1 stored as a 32-bit float, read as a double
    assert float4(widened) == 0.1
    assert float4(1.5) == 1.5
    assert float4(3.4028234663852886e38) == 3.4028235e38  # the largest float4


def test_bad_input_carries_invalid_text_representation(conn) -> None:
    with pytest.raises(mzflow.TypeMismatch) as info:
        conn.execute("INSERT INTO t (i) VALUES ('seven')")
    assert info.value.code == "22P02"
    with pytest.raises(mzflow.TypeMismatch) as info:
        conn.execute("INSERT INTO t (v) VALUES ('toolong')")
    assert info.value.code == "22001"
