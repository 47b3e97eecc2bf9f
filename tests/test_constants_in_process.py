"""Constant SELECTs and catalog queries run in process, never on Spark, and never by
Python's rules (issue 32).

These tests start no process: conftest.py fails a test outside the ``spark`` marker
that starts Spark, so each constant query here is proven to run in process. Their
answers are checked against PostgreSQL in tests/test_scalar_semantics.py; here the
checks are about where they run and what the in-process path refuses.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest

import mzflow
from mzflow.engine import local
from mzflow.sql.parse import parse


@pytest.fixture
def conn() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-constants-") as home, \
            mzflow.connect(home) as c:
        yield c


@pytest.mark.parametrize("sql", [
    "SELECT 7.5::int8",
    "SELECT -16.3 % 4.1, concat(true, false, 'function'), 'hello'::bytea::text",
    "SELECT DATE '2000-01-01' + INTERVAL '1' YEAR",
    "SELECT to_char(TIMESTAMPTZ '1997-02-03 11:12:59.9', 'YYYY-MM-DD HH24:MI:SS.MS TZ')",
    "SELECT 1 UNION SELECT 2.5 ORDER BY 1",
    "SELECT (SELECT 3) AS three",
    "SELECT 1 WHERE false",
    "SELECT CASE WHEN true THEN 1 ELSE 1 / 0 END",
])
def test_constant_queries_run_in_process(conn: mzflow.Connection, sql: str) -> None:
    result = conn.execute(sql)
    assert result.status.startswith("SELECT")


def test_a_union_of_constants_is_typed_as_postgresql_types_it(
        conn: mzflow.Connection) -> None:
    result = conn.execute("SELECT 1 AS x UNION SELECT 2.5 ORDER BY 1")
    assert result.types == ["numeric"]
    assert [str(r[0]) for r in result.rows] == ["1.0", "2.5"]  # one scale per column


def test_an_error_of_a_constant_is_postgresqls(conn: mzflow.Connection) -> None:
    with pytest.raises(mzflow.Error) as info:
        conn.execute("SELECT substr('x', 30, -2)")
    assert info.value.code == "22011"


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT upper(name) FROM mz_clusters", lambda c: [n.upper() for n, _ in c]),
    ("SELECT id + 1 FROM mz_clusters", lambda c: [i + 1 for _, i in c]),
    ("SELECT name || 'x' FROM mz_clusters", lambda c: [n + "x" for n, _ in c]),
    ("SELECT id FROM mz_clusters WHERE id = '1'", lambda c: [i for _, i in c if i == 1]),
    ("SELECT 1.5 FROM mz_clusters", lambda c: [Decimal("1.5") for _ in c]),
    # PostgreSQL's LIKE escapes with a backslash: a_b matches, ab does not
    ("SELECT name FROM mz_clusters WHERE name LIKE 'a\\_%'",
     lambda c: [n for n, _ in c if n.startswith("a_")]),
])
def test_catalog_queries_python_would_get_wrong_run_on_duckdb(
        conn: mzflow.Connection, sql: str, expected: Callable[[list[tuple[str, int]]], list[object]]
        ) -> None:
    """The executor's Python semantics differ from PostgreSQL's for these, so a query of
    system tables with them runs where they agree (engine/catalog_sql.py) instead."""
    conn.execute("CREATE CLUSTER a_b SIZE 'xsmall'")
    conn.execute("CREATE CLUSTER ab SIZE 'xsmall'")
    clusters = [(str(n), int(i)) for n, i in conn.execute(
        "SELECT name, id FROM mz_clusters").rows]
    assert sorted(r[0] for r in conn.execute(sql).rows) == sorted(expected(clusters))


def test_catalog_queries_keep_what_python_gets_right(conn: mzflow.Connection) -> None:
    conn.execute("CREATE CLUSTER b SIZE 'xsmall'")
    rows = conn.execute("SELECT name, id > 1, name IS NULL, length(name) FROM mz_clusters "
                        "WHERE name LIKE 'b%' OR id IN (1, NULL) ORDER BY name").rows
    assert rows == [("b", True, False, 1), ("default", False, False, 7)]
    assert conn.execute("SELECT count(*), max(name) FROM mz_clusters").rows == [(2, "default")]


def test_verify_walks_every_node() -> None:
    query = parse("SELECT a FROM t WHERE NOT (a = 1 AND b IS NULL)")[0]
    local.verify(query)  # none of these is refused
    with pytest.raises(local.NotEvaluable, match="function abs"):
        local.verify(parse("SELECT a FROM t WHERE abs(a) = 1")[0])


def test_insert_values_evaluates_constants_in_process(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (b bigint, ts timestamp, f boolean)")
    conn.execute("INSERT INTO t VALUES (7.5::int8, '2020-01-01 1:2:3.789', 'of'), "
                 "(-7.5, TIMESTAMP '2020-1-2 3:04:05' + INTERVAL '1 day', 'yes')")
    # The read of a table runs on Spark: check the written rows through the shard.
    from mzflow.session import writes as tables
    from mzflow.storage.delta import ROWID

    item = conn.store.snapshot().find("t")
    assert item is not None
    shard = tables.shard_of(conn.config.warehouse, item)
    data = shard.read(shard.version()).drop([ROWID]).to_pylist()
    import datetime as dt
    assert data == [
        {"b": 8, "ts": dt.datetime(2020, 1, 1, 1, 2, 3, 789000), "f": False},
        {"b": -8, "ts": dt.datetime(2020, 1, 3, 3, 4, 5), "f": True},
    ]
