"""The session API over tables read on Spark: parameters in reads and writes (DuckDB as
the oracle), a read-only transaction's one read time, a SELECT cursor over a table,
``Result.to_arrow`` of a table read and ``pandas.read_sql`` through ``mzflow.dbapi``."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import mzflow
from mzflow import dbapi

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SCHEMA = "CREATE TABLE t (a int, b text, c numeric(10,2), d date)"
ROWS = [(1, "x", Decimal("1.50"), dt.date(2024, 1, 1)),
        (2, "y", Decimal("2.25"), dt.date(2024, 2, 1)),
        (3, "x", None, dt.date(2024, 3, 1)),
        (4, "it's", Decimal("-4.00"), None)]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("api-spark")
    with mzflow.connect(str(home)) as c:
        c.execute(SCHEMA)
        for row in ROWS:
            c.execute("INSERT INTO t VALUES ($1, $2, $3, $4)", list(row))
    return home


@pytest.fixture
def conn(home: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(home)) as c:
        yield c


def test_parameters_filter_as_duckdb_filters(conn) -> None:
    duckdb = pytest.importorskip("duckdb")
    oracle = duckdb.connect()
    oracle.execute(SCHEMA.replace("text", "varchar"))
    oracle.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [list(r) for r in ROWS])
    cases = [
        ("SELECT a FROM t WHERE b = $1 ORDER BY a", ["x"]),
        ("SELECT a FROM t WHERE b = $1 ORDER BY a", ["x' OR '1'='1"]),
        ("SELECT a, c FROM t WHERE c > $1 ORDER BY a", [Decimal("1.6")]),
        ("SELECT a FROM t WHERE d BETWEEN $1 AND $2 ORDER BY a", ["2024-01-15", "2024-03-01"]),
        ("SELECT a + $1, b || $2 FROM t WHERE a IN ($3, $4) ORDER BY 1", [10, "!", 1, 4]),
        ("SELECT count(*) FROM t WHERE c IS NULL OR a < $1", [2]),
    ]
    for sql, params in cases:
        assert conn.execute(sql, params).rows == oracle.execute(sql, params).fetchall(), sql


def test_a_text_parameter_reaches_spark_as_written(conn) -> None:
    # Spark read ${env:HOME} in a literal as the home folder (variable substitution, now
    # off in every session mzflow makes): as a parameter and as a literal.
    texts = ["${env:HOME}", "a${spark.app.name}b${x", "${", "$${y}}", "{$}"]
    sql = "SELECT " + ", ".join(f"${i + 2}" for i in range(len(texts))) + " FROM t WHERE a = $1"
    assert conn.execute(sql, [1, *texts]).rows == [tuple(texts)]
    literals = ", ".join(f"'{t}'" for t in texts)
    assert conn.execute(f"SELECT {literals} FROM t WHERE a = 1").rows == [tuple(texts)]


def test_parameters_in_update_delete_and_subscribe(home) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE w (a int, b text)")
        conn.execute("INSERT INTO w VALUES (1, 'one'), (2, 'two'), (3, 'three')")
        start = conn.store.snapshot().read_ts
        assert conn.execute("UPDATE w SET b = $1 WHERE a = $2",
                            ["'); DROP TABLE w; --", 2]).status == "UPDATE 1"
        assert conn.execute("DELETE FROM w WHERE a = $1 OR b = $2", ["3", "nope"]
                            ).status == "DELETE 1"
        assert conn.execute("SELECT a, b FROM w ORDER BY a").rows == [
            (1, "one"), (2, "'); DROP TABLE w; --")]
        end = conn.store.snapshot().read_ts
        changes = conn.execute("SUBSCRIBE (SELECT a FROM w WHERE a >= $1) AS OF $2 UP TO $3",
                               [2, start, end + 1]).rows
        assert sorted((r[1], r[2]) for r in changes) == [(-1, 3), (1, 2), (1, 3)]
        conn.execute("DROP TABLE w")


def test_a_read_only_transaction_reads_at_one_time(conn, home) -> None:
    with mzflow.connect(str(home)) as other:
        conn.execute("BEGIN")
        first = conn.execute("SELECT count(*) FROM t").rows
        holders = other.execute("SELECT DISTINCT holder FROM mz_read_holds").rows
        assert holders == [("transaction",)]  # what it may read stays readable
        other.execute("INSERT INTO t VALUES (5, 'late', 5.00, NULL)")
        assert other.execute("SELECT count(*) FROM t").rows[0][0] == first[0][0] + 1
        again = conn.execute("SELECT count(*) FROM t").rows
        assert again == first  # the write came after the transaction's read time
        conn.execute("DECLARE c CURSOR FOR SELECT a FROM t ORDER BY a")
        assert conn.execute("FETCH 2 c").rows == [(1,), (2,)]
        assert conn.execute("FETCH ALL c").rows == [(3,), (4,)]
        conn.execute("COMMIT")
        assert other.execute("SELECT count(*) FROM mz_read_holds").rows == [(0,)]
        assert conn.execute("SELECT count(*) FROM t").rows[0][0] == first[0][0] + 1
        other.execute("DELETE FROM t WHERE a = 5")


def test_table_reads_convert_to_arrow_and_pandas(conn, home) -> None:
    pd = pytest.importorskip("pandas")
    r = conn.execute("SELECT a, b, c, d FROM t ORDER BY a")
    table = r.to_arrow()
    assert [str(f.type) for f in table.schema] == ["int32", "string", "decimal128(10, 2)",
                                                   "date32[day]"]
    assert [tuple(row.values()) for row in table.to_pylist()] == ROWS
    with dbapi.connect(str(home)) as db, warnings.catch_warnings():
        # pandas warns that it tests DBAPI2 objects other than sqlite3 through SQLAlchemy.
        warnings.simplefilter("ignore", UserWarning)
        frame = pd.read_sql("SELECT a, b FROM t WHERE b = %(b)s ORDER BY a", db,
                            params={"b": "x"})
    assert frame.to_dict("list") == {"a": [1, 3], "b": ["x", "x"]}
