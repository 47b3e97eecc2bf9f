"""Reads of small tables answered in process (read/local_reads.py), else on Spark.

Each query is compared with DuckDB (NULLs ordered as PostgreSQL orders them), and the
executor that answered is counted: the in-process path must answer what it can, give
Spark what it cannot express exactly, and leave tables over ``local_read_max_rows``
to Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.read import local_reads

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TABLES = {
    "t": ("a int, b text, c double precision, d numeric(10,2)",
          "a INTEGER, b VARCHAR, c DOUBLE, d DECIMAL(10,2)",
          "(1,'x',1.5,2.25),(2,NULL,'NaN',NULL),(NULL,'y',NULL,3.10),(3,'z',-2,1),"
          "(3,'x',0.5,1.5)"),
    "u": ("a int, w int", "a INTEGER, w INTEGER", "(1,10),(1,11),(NULL,5),(3,7),(4,NULL)"),
}


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[mzflow.Connection, Any]]:
    home: Path = tmp_path_factory.mktemp("local-reads")
    duck = duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    with mzflow.connect(str(home)) as conn:
        for name, (mz, dk, rows) in TABLES.items():
            conn.execute(f"CREATE TABLE {name} ({mz})")
            conn.execute(f"INSERT INTO {name} VALUES {rows}")
            duck.execute(f"CREATE TABLE {name} ({dk})")
            duck.execute(f"INSERT INTO {name} VALUES {rows}")
        yield conn, duck
    duck.close()


def answered(dbs: tuple[mzflow.Connection, Any], sql: str, ordered: bool) -> dict[str, int]:
    """Run ``sql`` on both; assert the same rows; return how many reads each executor
    answered meanwhile."""
    conn, duck = dbs
    before = dict(local_reads.ENGINE)
    got = conn.execute(sql).rows
    delta = {k: local_reads.ENGINE[k] - before[k] for k in before}
    want = duck.execute(sql).fetchall()
    if ordered:
        assert _norm(got) == _norm(want), sql
    else:
        assert sorted(map(_key, _norm(got))) == sorted(map(_key, _norm(want))), sql
    return delta


def _norm(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple("NaN" if isinstance(v, float) and v != v else v for v in r) for r in rows]


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


IN_PROCESS = [
    ("SELECT * FROM t ORDER BY a, b", True),
    ("SELECT a, b FROM t ORDER BY a DESC, b LIMIT 3 OFFSET 1", True),
    ("SELECT b, count(*), sum(d), avg(a) FROM t GROUP BY b ORDER BY b", True),
    ("SELECT t.a, u.w FROM t JOIN u ON t.a = u.a ORDER BY 2 DESC", True),
    ("SELECT DISTINCT a FROM u", False),
    ("SELECT a, count(DISTINCT w) FROM u GROUP BY a", False),
    ("SELECT a FROM t UNION SELECT a FROM u", False),
    ("SELECT a FROM t UNION ALL SELECT a FROM u ORDER BY a NULLS FIRST LIMIT 4", True),
    ("SELECT count(*), sum(w) FROM u WHERE w > 100", False),
    ("SELECT a, b FROM t WHERE a IN (SELECT a FROM u WHERE w > 6)", False),
]


@pytest.mark.parametrize(("sql", "ordered"), IN_PROCESS)
def test_small_reads_answer_in_process(dbs: Any, sql: str, ordered: bool) -> None:
    assert answered(dbs, sql, ordered) == {"arrow": 1, "spark": 0}


# What the in-process path cannot evaluate exactly: an outer join and a window (no
# in-process operator), NaN as an ORDER BY key (Arrow puts it by the NULLs), an error.
ON_SPARK = [
    ("SELECT t.a, u.w FROM t LEFT JOIN u ON t.a = u.a", False),
    ("SELECT a, w, row_number() OVER (PARTITION BY a ORDER BY w) AS r FROM u", False),
    ("SELECT c FROM t ORDER BY c", True),
]


@pytest.mark.parametrize(("sql", "ordered"), ON_SPARK)
def test_what_it_cannot_evaluate_falls_back_to_spark(dbs: Any, sql: str, ordered: bool
                                                     ) -> None:
    assert answered(dbs, sql, ordered) == {"arrow": 0, "spark": 1}


def test_an_evaluation_error_is_spark_s(dbs: Any) -> None:
    conn, _ = dbs
    before = local_reads.ENGINE["spark"]
    with pytest.raises(mzflow.Error, match="division by zero"):
        conn.execute("SELECT a / 0 FROM u")
    assert local_reads.ENGINE["spark"] == before + 1


def test_the_threshold_sends_big_tables_to_spark(dbs: Any) -> None:
    conn, _ = dbs
    sql = "SELECT a, w FROM u ORDER BY a, w"
    try:
        conn.execute("ALTER SYSTEM SET local_read_max_rows = 4")  # u has 5 rows
        assert answered(dbs, sql, True) == {"arrow": 0, "spark": 1}
        conn.execute("ALTER SYSTEM SET local_read_max_rows = 5")
        assert answered(dbs, sql, True) == {"arrow": 1, "spark": 0}
        conn.execute("ALTER SYSTEM SET local_read_max_rows = 0")  # off
        assert answered(dbs, sql, True) == {"arrow": 0, "spark": 1}
    finally:
        conn.execute("ALTER SYSTEM RESET local_read_max_rows")
