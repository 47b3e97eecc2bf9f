"""``mzflow.dbapi``: PEP 249 over a session, in process (no Spark: constants, catalog
reads, constant INSERTs; ``test_session_api_spark.py`` reads tables with pandas)."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow import dbapi


@pytest.fixture
def db(tmp_path: Path) -> Iterator[dbapi.Connection]:
    conn = dbapi.connect(str(tmp_path))
    yield conn
    conn.close()


def contents(conn: dbapi.Connection, table: str) -> list[tuple[Any, ...]]:
    session = conn.session
    assert session is not None
    ts = session.store.snapshot().read_ts
    rows = session.execute(f"SUBSCRIBE {table} AS OF {ts} UP TO {ts + 1}").rows
    return sorted((r[2:] for r in rows for _ in range(r[1])), key=repr)


def test_module_globals() -> None:
    assert (dbapi.apilevel, dbapi.threadsafety, dbapi.paramstyle) == ("2.0", 1, "pyformat")
    for name in ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError",
                 "OperationalError", "IntegrityError", "InternalError", "ProgrammingError",
                 "NotSupportedError"):
        assert issubclass(getattr(dbapi, name), Exception)
    assert issubclass(dbapi.ProgrammingError, dbapi.DatabaseError)
    assert issubclass(dbapi.DatabaseError, dbapi.Error)
    assert dbapi.Date(2024, 1, 2) == dt.date(2024, 1, 2)


@pytest.mark.parametrize(("sql", "params", "expected_sql", "expected_values"), [
    ("SELECT %s, %s", [1, "a"], "SELECT $1, $2", [1, "a"]),
    ("SELECT %(x)s, %(y)s, %(x)s", {"y": 2, "x": 1}, "SELECT $1, $2, $1", [1, 2]),
    ("SELECT '%s', \"%s\", %s -- %s\n/* %s */", [7],
     "SELECT '%s', \"%s\", $1 -- %s\n/* %s */", [7]),
    ("SELECT 10 %% 3, %s", [1], "SELECT 10 % 3, $1", [1]),
    ("SELECT 'it''s %s', E'\\' %s', %s", [1], "SELECT 'it''s %s', E'\\' %s', $1", [1]),
    ("SELECT $tag$ %s $tag$, $$%s$$, %s", [1], "SELECT $tag$ %s $tag$, $$%s$$, $1", [1]),
    ("SELECT $1, $2", [1, 2], "SELECT $1, $2", [1, 2]),  # PostgreSQL's own placeholders
    ("SELECT 10 % 3", None, "SELECT 10 % 3", None),  # no parameters: untouched
])
def test_pyformat_placeholders_become_numbered_ones(sql: str, params: Any,
                                                    expected_sql: str,
                                                    expected_values: Any) -> None:
    assert dbapi.to_numeric(sql, params) == (expected_sql, expected_values)


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT %s, %s", [1]), ("SELECT %(x)s", {"y": 1}), ("SELECT %d", [1]),
    ("SELECT %s", {"x": 1}), ("SELECT %s", "ab"),
])
def test_bad_placeholders_are_programming_errors(sql: str, params: Any) -> None:
    with pytest.raises(dbapi.ProgrammingError):
        dbapi.to_numeric(sql, params)


def test_cursor_fetches_and_describes(db) -> None:
    cur = db.cursor()
    cur.execute("SELECT %s::numeric(10,2) AS n, %s AS t, %s AS d",
                ["1.5", "x", dt.date(2024, 1, 2)])
    assert [c[:2] for c in cur.description] == [
        ("n", "numeric(10,2)"), ("t", "text"), ("d", "date")]
    assert cur.description[0][4:6] == (10, 2)  # precision, scale
    assert cur.description[0][1] == dbapi.NUMBER and cur.description[1][1] == dbapi.STRING
    assert cur.description[2][1] == dbapi.DATETIME and cur.description[1][1] != dbapi.NUMBER
    assert cur.rowcount == 1
    assert cur.fetchone() == (Decimal("1.50"), "x", dt.date(2024, 1, 2))
    assert cur.fetchone() is None
    cur.execute("SELECT name FROM mz_tables")
    assert cur.fetchall() == []
    cur.execute("SELECT x FROM (SELECT 1 AS x UNION ALL SELECT 2 UNION ALL SELECT 3) s "
                "ORDER BY x")
    cur.arraysize = 2
    assert cur.fetchmany() == [(1,), (2,)]
    assert list(cur) == [(3,)]
    cur.close()
    with pytest.raises(dbapi.InterfaceError):
        cur.execute("SELECT 1")


def test_transactions_follow_pep_249_and_materialize(db, tmp_path) -> None:
    cur = db.cursor()
    cur.execute("CREATE TABLE t (a int, b text)")  # inside the implicit transaction
    assert cur.description is None and cur.rowcount == -1
    assert db.session is not None and db.session.transaction_status == "T"
    db.commit()  # the DDL runs now
    cur.executemany("INSERT INTO t VALUES (%s, %s)", [(1, "a"), (2, "b'); DROP TABLE t; --")])
    assert cur.rowcount == 2
    with mzflow.connect(str(tmp_path)) as other:
        assert other.execute("SELECT count(*) FROM mz_tables").rows == [(1,)]
    db.rollback()
    assert contents(db, "t") == []
    cur.executemany("INSERT INTO t VALUES (%(a)s, %(b)s)", [{"a": 1, "b": "a"}])
    db.commit()
    assert contents(db, "t") == [(1, "a")]
    # Errors map to PEP 249's classes by SQLSTATE, and fail the transaction.
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("SELECT nope FROM mz_tables")
    assert info.value.sqlstate == info.value.pgcode == "42703"
    assert isinstance(info.value.__cause__, mzflow.Error)
    with pytest.raises(dbapi.InternalError) as aborted:
        cur.execute("SELECT 1")
    assert aborted.value.sqlstate == "25P02"
    db.rollback()
    with pytest.raises(dbapi.DataError):
        cur.execute("SELECT %s::int", ["x"])
    db.rollback()
    with pytest.raises(dbapi.NotSupportedError):
        cur.execute("SELECT %s", [[1]])
    db.rollback()
    # autocommit: each statement on its own, as dbt-materialize connects.
    db.autocommit = True
    cur.execute("CREATE TABLE u (x int)")
    cur.execute("INSERT INTO u VALUES (%s)", [5])
    assert db.session.transaction_status == "I"
    assert contents(db, "u") == [(5,)]


def test_connection_context_and_close(tmp_path) -> None:
    with dbapi.connect(str(tmp_path)) as db:
        db.cursor().execute("CREATE TABLE t (a int)")
    with dbapi.connect(str(tmp_path)) as db:  # committed on the way out
        cur = db.cursor()
        cur.execute("SELECT name FROM mz_tables")
        assert cur.fetchall() == [("t",)]
    assert db.closed
    with pytest.raises(dbapi.InterfaceError):
        db.cursor()


def test_pandas_read_sql_over_the_dbapi(db) -> None:
    pd = pytest.importorskip("pandas")
    cur = db.cursor()
    cur.execute("CREATE TABLE t (a int)")
    with pytest.raises(dbapi.InternalError, match="can only execute a single statement"):
        cur.execute("CREATE TABLE u (a int)")  # a transaction runs one DDL statement
    db.rollback()
    db.autocommit = True
    cur.execute("CREATE TABLE t (a int); CREATE TABLE u (a int)")
    # pandas warns that it tests DBAPI2 objects other than sqlite3 only through SQLAlchemy.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        frame = pd.read_sql("SELECT name FROM mz_tables WHERE name <> %(skip)s ORDER BY name",
                            db, params={"skip": "u"})
    assert list(frame.columns) == ["name"]
    assert frame["name"].tolist() == ["t"]


def test_connect_as_a_role(tmp_path) -> None:
    with dbapi.connect(str(tmp_path), role="materialize") as db:
        assert db.session is not None and db.session.role == "materialize"  # type: ignore[attr-defined]
    with pytest.raises(dbapi.Error, match='role "nobody" does not exist'):
        dbapi.connect(str(tmp_path), role="nobody")
