"""A numeric assigned to a column of smaller scale is rounded, half away from zero, as
PostgreSQL rounds it (INSERT … SELECT and UPDATE computed it at a larger scale and were
refused: "cannot convert decimal128(38, 16) to numeric(10,2)"); one that then overflows
the column's precision is PostgreSQL's error. Checked against PostgreSQL itself."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import mzflow
from mzflow_dev import pg_server

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres]

STATEMENTS = [
    "INSERT INTO t SELECT 1, 1 / 8.0",
    "INSERT INTO t SELECT 2, -1 / 8.0",
    "INSERT INTO t SELECT 3, 123456789.0 / 7",
    "INSERT INTO t SELECT 4, 2.675",
    "INSERT INTO t VALUES (5, 0.125)",
    "UPDATE t SET d = d / 3 WHERE k IN (1, 2, 4)",
]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    pytest.importorskip("psycopg2")
    with pg_server.cursor(pg_url, "DROP TABLE IF EXISTS t",
                          "CREATE TABLE t (k int, d numeric(10,2))") as cur:
        for sql in STATEMENTS:
            cur.execute(sql)
        yield cur


def test_rounding_on_assignment_matches_postgres(pg: Any) -> None:
    pg.execute("SELECT k, d FROM t ORDER BY k")
    want = pg.fetchall()
    with tempfile.TemporaryDirectory(prefix="mzflow-numeric-") as home, \
            mzflow.connect(home) as mz:
        mz.execute("CREATE TABLE t (k int, d numeric(10,2))")
        for sql in STATEMENTS:
            mz.execute(sql)
        got = sorted(mz.execute("SELECT k, d FROM t").rows)
        with pytest.raises(mzflow.Error) as e:  # 12 digits left of the point: too many
            mz.execute("INSERT INTO t SELECT 6, 123456789012.0 / 1.5")
    assert got == want
    assert e.value.message == "numeric field overflow"
    import psycopg2

    with pytest.raises(psycopg2.Error) as pe:
        pg.execute("INSERT INTO t SELECT 6, 123456789012.0 / 1.5")
    assert pe.value.pgcode == "22003" and e.value.code == "22003"
