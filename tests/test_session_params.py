"""Bound parameters (``conn.execute(sql, params)``) and ``conn.describe(sql)``.

Everything here runs in process (constants, catalog reads, constant INSERTs, a table's
contents read through SUBSCRIBE from its Delta log); the PostgreSQL oracle tests start a
server and are marked so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow.errors import Error

INJECTION = "'); DROP TABLE t; --"
SCHEMA = ("CREATE TABLE t (a int, b text, c numeric(10,2), d date, "
          "e timestamp with time zone, f boolean)")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path)) as c:
        c.execute(SCHEMA)
        yield c


def contents(conn: mzflow.Connection, table: str) -> list[tuple[Any, ...]]:
    """A table's rows now, read from its Delta log (no Spark): SUBSCRIBE's snapshot."""
    ts = conn.store.snapshot().read_ts
    rows = conn.execute(f"SUBSCRIBE {table} AS OF {ts} UP TO {ts + 1}").rows
    return sorted((r[2:] for r in rows for _ in range(r[1])), key=repr)


def code_of(call: Any) -> str:
    with pytest.raises(Error) as info:
        call()
    return info.value.code


def test_python_values_keep_their_values_and_take_their_types(conn) -> None:
    aware = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    naive = dt.datetime(2024, 5, 6, 7, 8, 9)
    values = [7, -(2 ** 40), True, 1.25, Decimal("12.345"), "héllo", None,
              dt.date(2024, 2, 29), naive, aware, b"\x00\xffab"]
    sql = "SELECT " + ", ".join(f"${i}" for i in range(1, len(values) + 1))
    r = conn.execute(sql, values)
    assert r.types == ["bigint", "bigint", "boolean", "double precision", "numeric", "text",
                       "text", "date", "timestamp without time zone",
                       "timestamp with time zone", "bytea"]
    got = list(r.rows[0])
    assert got[:7] == values[:7]
    assert got[7:9] == values[7:9]
    assert got[9] == aware and got[9].utcoffset() == dt.timedelta(0)  # timestamptz: in UTC
    assert got[10] == values[10]
    assert r.columns == ["?column?"] * len(values)  # PostgreSQL's name for a bare $n


def test_a_parameter_is_a_value_never_sql(conn) -> None:
    sneaky = [INJECTION, "x' OR '1'='1", "$1", "\\'; SELECT 1; --", "a\nb", "'"]
    for n, text in enumerate(sneaky):
        conn.execute("INSERT INTO t (a, b) VALUES ($1, $2)", [n, text])
        assert conn.execute("SELECT $1 AS v", [text]).rows == [(text,)]
        assert conn.execute("SELECT $1 = $2", [text, text + "x"]).rows == [(False,)]
    # The table is still there, with the texts stored as they were given.
    assert [r[:2] for r in contents(conn, "t")] == sorted(enumerate(sneaky), key=repr)


def test_text_values_take_the_type_their_context_gives(conn) -> None:
    # As PostgreSQL infers an unknown-typed parameter (what psycopg sends a str as).
    conn.execute("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6)",
                 ["3", "three", "1.505", "2024-02-03", "2024-02-03 04:05:06+02", "yes"])
    conn.execute("INSERT INTO t (f, a) VALUES ($1, $2)", [None, 4])
    assert contents(conn, "t") == [
        (3, "three", Decimal("1.51"), dt.date(2024, 2, 3),
         dt.datetime(2024, 2, 3, 2, 5, 6, tzinfo=dt.UTC), True),
        (4, None, None, None, None, None)]
    assert conn.execute("SELECT $1::date + 1", ["2024-02-28"]).rows == [(dt.date(2024, 2, 29),)]
    assert conn.execute("SELECT $1", ["plain"]).types == ["text"]
    with pytest.raises(Error, match='invalid input syntax for type integer: "x"') as info:
        conn.execute("INSERT INTO t (a) VALUES ($1)", ["x"])
    assert info.value.code == "22P02"


def test_declared_types_read_text_as_that_type(conn) -> None:
    r = conn.execute("SELECT $1, $2, $3, $4", ["42", "t", "2024-01-02", "  7.50"],
                     param_types=["int4", "boolean", "date", "numeric"])
    assert r.types == ["integer", "boolean", "date", "numeric"]
    assert r.rows == [(42, True, dt.date(2024, 1, 2), Decimal("7.50"))]
    # None: not declared; the value decides.
    assert conn.execute("SELECT $1, $2", [1, "x"], param_types=[None, None]).types == [
        "bigint", "text"]


def test_parameters_bind_in_every_statement_that_takes_them(conn) -> None:
    conn.execute("INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)", [1, "one", 2, "two"])
    ts = conn.store.snapshot().read_ts
    r = conn.execute("SUBSCRIBE t AS OF $1 UP TO $2", [ts, ts + 1])
    assert sorted(row[2:4] for row in r.rows) == [(1, "one"), (2, "two")]
    plan = conn.execute("EXPLAIN SELECT a FROM t WHERE a = $1", [5]).rows[0][0]
    assert "5" in plan
    conn.execute("BEGIN")
    conn.execute("DECLARE c CURSOR FOR SELECT name FROM mz_tables WHERE name = $1", ["t"])
    assert conn.execute("FETCH ALL c").rows == [("t",)]
    conn.execute("ROLLBACK")


def test_parameter_errors_are_postgres_errors(conn) -> None:
    assert code_of(lambda: conn.execute("SELECT $1")) == "42P02"  # no values at all
    with pytest.raises(Error, match=r'bind message supplies 1 parameters, but prepared '
                                    r'statement "" requires 2') as info:
        conn.execute("SELECT $1, $2", [1])
    assert info.value.code == "08P01"
    assert code_of(lambda: conn.execute("SELECT $1", [1, 2])) == "08P01"
    assert code_of(lambda: conn.execute("SELECT 1", [1])) == "08P01"
    with pytest.raises(Error, match=r"there is no parameter \$0"):
        conn.execute("SELECT $0", [1])
    with pytest.raises(Error, match=r"there is no parameter \$1"):
        conn.execute("CREATE VIEW v AS SELECT $1 AS x", [1])  # DDL takes no parameters
    with pytest.raises(Error, match="cannot insert multiple commands into a prepared "
                                    "statement"):
        conn.execute("SELECT $1; SELECT 2", [1])
    assert code_of(lambda: conn.execute("SELECT ?", [1])) == "42601"
    with pytest.raises(Error, match=r"could not determine data type of parameter \$2") as e:
        conn.execute("SELECT $1, $3", [1, "x", 3])  # $2 is unused and of unknown type
    assert e.value.code == "42P18"
    assert conn.execute("SELECT $1, $3", [1, 2, 3]).rows == [(1, 3)]  # typed: fine
    with pytest.raises(Error, match="a parameter of Python type list is not supported"):
        conn.execute("SELECT $1", [[1, 2]])
    assert conn.transaction_status == "I"


def test_describe_gives_parameter_and_result_types_without_running(conn) -> None:
    d = conn.describe("SELECT a, b AS bee, $2::date AS x, $3 FROM t WHERE c > $1 LIMIT $4")
    assert d.params == ["numeric", "date", "text", "bigint"]
    assert (d.columns, d.types) == (["a", "bee", "x", "?column?"],
                                    ["integer", "text", "date", "text"])
    assert conn.describe("INSERT INTO t (b, a) VALUES ($1, $2)").params == ["text", "integer"]
    d = conn.describe("UPDATE t SET c = $1 WHERE d = $2")
    assert (d.params, d.columns, d.types) == (["numeric", "date"], [], [])
    assert conn.describe("DELETE FROM t WHERE e < $1").params == ["timestamp with time zone"]
    assert conn.describe("SELECT a FROM t WHERE a IN ($1, $2) AND d BETWEEN $3 AND $4"
                         ).params == ["integer", "integer", "date", "date"]
    # Declared types win; the statement's columns are as a SELECT of them returns.
    d = conn.describe("SELECT $1 AS n", ["bigint"])
    assert (d.params, d.types) == (["bigint"], ["bigint"])
    assert conn.execute("SELECT $1 AS n", [5]).types == d.types
    for sql in ("CREATE TABLE u (x int)", "INSERT INTO t (a) VALUES (1)", "SET cluster = "
                "default", "BEGIN", ""):
        d = conn.describe(sql)
        assert (d.params, d.columns, d.types) == ([], [], []), sql
    # Nothing ran: no table u, no row in t.
    assert conn.execute("SHOW TABLES").rows == [("t",)]
    assert contents(conn, "t") == []


def test_describe_shows_catalog_reads_and_subscriptions(conn) -> None:
    for sql in ("SHOW TABLES", "SELECT * FROM mz_tables", "SHOW cluster"):
        ran = conn.execute(sql)
        d = conn.describe(sql)
        assert (d.columns, d.types) == (ran.columns, ran.types), sql
        assert d.types and all(d.types), sql
    d = conn.describe("SUBSCRIBE t WITH (PROGRESS)")
    assert d.columns == ["mz_timestamp", "mz_progressed", "mz_diff", "a", "b", "c", "d", "e",
                         "f"]
    assert d.types[:3] == ["numeric", "boolean", "bigint"]
    assert d.types[3:] == conn.describe("SELECT * FROM t").types
    assert code_of(lambda: conn.describe("SELECT nope FROM t")) == "42703"
    assert code_of(lambda: conn.describe("SELECT 1; SELECT 2")) == "42601"


def test_describe_of_a_big_table_starts_no_spark_and_reads_no_file(conn, monkeypatch) -> None:
    from mzflow.engine import spark
    from mzflow.storage.shard import Shard

    values = ", ".join(f"({i}, 'row {i}', {i}.25)" for i in range(5000))
    conn.execute(f"INSERT INTO t (a, b, c) VALUES {values}")
    conn.execute(f"INSERT INTO t (a, b, c) VALUES {values}")
    calls: list[str] = []

    class Ran(Exception):
        pass

    def counted(name: str, fail: bool = False) -> Any:
        real = getattr(Shard, name, None)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if fail or real is None:
                raise Ran(name)
            return real(*args, **kwargs)
        return wrapper

    for name in ("files", "read", "version_at", "diffs", "change_feed"):
        monkeypatch.setattr(Shard, name, counted(name))
    monkeypatch.setattr(spark, "run", counted("spark.run", fail=True))
    monkeypatch.setattr(spark, "session", counted("spark.session", fail=True))
    sql = "SELECT a, sum(c) AS total FROM t WHERE b <> $1 GROUP BY a"
    started = spark.started()  # another test of this process may have started it
    d = conn.describe(sql)
    assert (d.params, d.columns, d.types) == (["text"], ["a", "total"], ["integer", "numeric"])
    assert calls == []
    assert spark.started() == started
    # The counters see a real read: running it reads the table's files (in process: a
    # table this small, read/local_reads.py), and never Spark.
    assert len(conn.execute(sql, ["x"]).rows) == 5000
    assert "read" in calls and "spark.run" not in calls


def test_results_convert_to_arrow_and_pandas_with_their_types(conn) -> None:
    r = conn.execute("SELECT $1::numeric(10,2) AS n, $2 AS d, $3 AS ts, $4 AS i, $5 AS s",
                     ["1.5", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, tzinfo=dt.UTC),
                      None, None])
    table = r.to_arrow()
    assert [str(f.type) for f in table.schema] == [
        "decimal128(10, 2)", "date32[day]", "timestamp[us, tz=UTC]", "string", "string"]
    assert table.column_names == r.columns
    assert table.to_pylist() == [dict(zip(r.columns, r.rows[0], strict=True))]
    frame = r.to_pandas()
    assert list(frame.columns) == r.columns
    assert frame.iloc[0]["n"] == Decimal("1.50")
    assert str(frame["ts"].dtype) == "datetime64[us, UTC]"
    # A computed numeric keeps each value's digits.
    wide = conn.execute("SELECT $1 AS x UNION ALL SELECT $2", [Decimal("1.5"), Decimal("2.125")])
    assert wide.to_arrow().column("x").to_pylist() == [Decimal("1.500"), Decimal("2.125")]


# -- PostgreSQL as the oracle -----------------------------------------------------------


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    psycopg = pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    u = make_url(pg_url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database,
                         autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS t")
        c.execute(SCHEMA.replace("boolean", "bool"))
        c.execute("SET TIME ZONE 'UTC'")
        yield c


def _pg_describe(pg: Any, sql: str) -> tuple[list[str], list[str], list[str]]:
    """Parse and Describe on the server: parameter types, column names and types."""
    res = pg.pgconn.prepare(b"", sql.encode())
    assert res.status == 1, res.error_message  # COMMAND_OK
    desc = pg.pgconn.describe_prepared(b"")

    def name(oid: int, mod: int = -1) -> str:
        return pg.execute("SELECT format_type(%s, %s)", [oid, None if mod < 0 else mod]
                          ).fetchone()[0]

    params = [name(desc.param_type(i)) for i in range(desc.nparams)]
    columns = [desc.fname(i).decode() for i in range(desc.nfields)]
    types = [name(desc.ftype(i), desc.fmod(i)) for i in range(desc.nfields)]
    return params, columns, types


ORACLE_STATEMENTS = [
    "SELECT a FROM t WHERE a = $1",
    "SELECT b, c FROM t WHERE c > $1 AND d = $2",
    "SELECT $1::date, $2",
    "SELECT a FROM t LIMIT $1 OFFSET $2",
    "SELECT a FROM t WHERE a IN ($1, $2) AND d BETWEEN $3 AND $4",
    "SELECT a + $1 FROM t",
    "SELECT b || $1 AS joined FROM t WHERE e < $2",
    "INSERT INTO t (b, a) VALUES ($1, $2)",
    "UPDATE t SET c = $1 WHERE a = $2",
    "DELETE FROM t WHERE d <> $1",
]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("sql", ORACLE_STATEMENTS)
def test_describe_agrees_with_postgres(conn, pg, sql: str) -> None:
    d = conn.describe(sql)
    assert (d.params, d.columns, d.types) == _pg_describe(pg, sql)


TEXT_VALUES = [
    ("integer", "  42 "), ("bigint", "-9000000000"), ("numeric", "1e3"),
    ("numeric", "-0.000100"), ("double precision", "1.5e-3"), ("boolean", "yes"),
    ("boolean", "off"), ("date", "2024-02-29"), ("timestamp without time zone",
                                                 "2024-02-29 23:59:59.5"),
    ("timestamp with time zone", "2024-02-29 23:00:00+05:30"), ("text", INJECTION),
]


@pytest.mark.slow
@pytest.mark.postgres
def test_text_parameters_cast_as_postgres_casts_them(conn, pg) -> None:
    types = [t for t, _ in TEXT_VALUES]
    values = [v for _, v in TEXT_VALUES]
    ours = conn.execute("SELECT " + ", ".join(f"${i + 1}" for i in range(len(values))),
                        values, param_types=types).rows[0]
    theirs = pg.execute("SELECT " + ", ".join(f"CAST(%s AS {t})" for t in types), values
                        ).fetchone()
    assert list(ours) == list(theirs)
