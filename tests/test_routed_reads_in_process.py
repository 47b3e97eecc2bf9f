"""The wire soak's reads (mzflow_dev/soak/wire.py: READS over t2 and the plain view
v_wire over t1, whose SELECT a projection of t1 answers) are answered in process, with
Spark made to fail if anything starts it: a JVM in ``mzflow serve`` cost 27-50 s a read.

Three ways they went to Spark: a read of the view routed to the projection is a SELECT
over a derived table, beyond the evaluator over the projection's rows; a routed read
it declines never tried the tables' own in-process path; and a routed read of an empty
table had Spark type the projection of no parts. Each answer is compared with DuckDB's,
and numeric results keep the type the unrouted path gives them (PostgreSQL's numeric).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.projections import route
from mzflow.read import local_reads
from mzflow_dev.soak import ops, wire

VIEW_READS = [
    *(sql.format(k=1) for sql, _ in wire.READS),
    # A numeric result (sum of a bigint) over the routed view: what the soak left out.
    f"SELECT sum(n), sum(sv) FROM {wire.VIEW}",
    f"SELECT k, sv / n AS q FROM {wire.VIEW} WHERE n > 1 ORDER BY k",
    f"SELECT count(*), max(n), min(sv) FROM {wire.VIEW} WHERE k IN (1, 2, 7)",
]
ROWS = {
    "t1": [(1, 1, 10, "x"), (2, 1, 20, "y"), (3, 1, None, "x"), (4, 2, 5, None),
           (5, 3, 7, "z"), (6, 1, 3, "z"), (7, 7, None, None)],
    "t2": [(1, "ann", 10), (2, "bob", 20), (3, "ann", None), (4, None, 5), (1, "cy", 0)],
}


class SparkStarted(AssertionError):
    pass


@pytest.fixture
def dbs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[tuple[mzflow.Connection, Any]]:
    from mzflow.engine.spark import runtime

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise SparkStarted("a read started Spark")

    monkeypatch.setattr(runtime.SparkRuntime, "session", refuse)
    duck = duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")  # PostgreSQL's
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET local_read_max_rows = 100000")
        for name in ("t1", "t2"):
            conn.execute(f"CREATE TABLE {name} ({ops.TABLES[name]})")
            duck.execute(f"CREATE TABLE {name} ({ops.TABLES[name]})")
        conn.execute(f"ALTER TABLE t1 ADD PROJECTION p0 ({ops.PROJECTIONS[0][1]})")
        for sql in wire.setup_sql()[1:2]:  # the view (not the roles: one user here)
            conn.execute(sql)
            duck.execute(sql)
        yield conn, duck
    duck.close()


def _insert(dbs: tuple[mzflow.Connection, Any], table: str, rows: list[tuple[Any, ...]]
            ) -> None:
    values = ops._values(rows)
    for db in dbs:
        db.execute(f"INSERT INTO {table} VALUES {values}")


def _read(dbs: tuple[mzflow.Connection, Any], sql: str) -> dict[str, int]:
    """``sql``'s rows, checked against DuckDB's and against the unrouted read's (values
    and Python types); how the read ran."""
    conn, duck = dbs
    local, routed = dict(local_reads.ENGINE), dict(route.ENGINE)
    got = conn.execute(sql).rows
    ran = {f"local_{k}": local_reads.ENGINE[k] - local[k] for k in local}
    ran |= {f"routed_{k}": route.ENGINE[k] - routed[k] for k in routed}
    ordered = "ORDER BY" in sql
    want = duck.execute(sql.replace(" / ", " // ")).fetchall()  # PostgreSQL's bigint /
    assert _rows(got, ordered) == _rows(want, ordered), sql
    conn.execute("SET optimize_use_projections = false")
    try:
        plain = conn.execute(sql).rows
    finally:
        conn.execute("SET optimize_use_projections = true")
    assert _rows(got, ordered) == _rows(plain, ordered), sql
    assert [[type(v) for v in r] for r in _rows(got, ordered)] == [
        [type(v) for v in r] for r in _rows(plain, ordered)], (sql, got, plain)
    return ran


def _rows(rows: list[tuple[Any, ...]], ordered: bool) -> list[tuple[Any, ...]]:
    return list(rows) if ordered else sorted(
        rows, key=lambda r: tuple((v is None, str(v)) for v in r))


def _explain(conn: mzflow.Connection, sql: str) -> str:
    return str(conn.execute(f"EXPLAIN {sql}").rows[0][0])


def test_the_wire_reads_of_empty_tables_start_no_spark(dbs: Any) -> None:
    conn, _ = dbs
    for sql in VIEW_READS:
        if wire.VIEW in sql:
            assert "Projection p0 not used: the table has no data files now" in _explain(
                conn, sql), sql
        ran = _read(dbs, sql)
        assert (ran["local_arrow"], ran["local_spark"]) == (1, 0), (sql, ran)


def test_the_wire_reads_are_answered_in_process_and_match_duckdb(dbs: Any) -> None:
    conn, _ = dbs
    _insert(dbs, "t1", ROWS["t1"][:4])
    _insert(dbs, "t2", ROWS["t2"][:3])
    conn.execute(f"ALTER TABLE t2 ADD PROJECTION p2 ({ops.PROJECTIONS[4][1]})")
    _insert(dbs, "t1", ROWS["t1"][4:])  # parts with stored rows and parts without
    _insert(dbs, "t2", ROWS["t2"][3:])
    routed = 0
    for sql in VIEW_READS:
        explained = _explain(conn, sql)
        ran = _read(dbs, sql)
        if "Projection: p" in explained:  # the view's reads and t2's aggregate
            routed += 1
            assert "Read: in process (Arrow), no Spark job" in explained, (sql, explained)
            assert (ran["routed_arrow"], ran["local_spark"]) == (1, 0), (sql, ran)
        else:
            assert (ran["local_arrow"], ran["local_spark"]) == (1, 0), (sql, ran)
    assert routed == len(VIEW_READS) - 1  # all but t2's key lookup
    # AS OF an earlier time: the parts of that time, through the projection.
    at = conn.execute("SELECT max(write_frontier) FROM mz_frontiers").rows[0][0]
    _insert(dbs, "t1", [(8, 1, 100, "x")])
    sql = f"SELECT k, n, sv FROM {wire.VIEW} WHERE k = 1"
    before = conn.execute(f"{sql} AS OF {int(at) - 1}").rows
    assert before == [(1, 4, 33)] and conn.execute(sql).rows == [(1, 5, 133)]
    total = conn.execute(f"SELECT sum(n) FROM {wire.VIEW}").rows
    assert total == [(Decimal(8),)] and isinstance(total[0][0], Decimal)
    assert [c for c in conn.describe(f"SELECT sum(n) FROM {wire.VIEW}").types] == ["numeric"]


def test_a_routed_read_the_projection_cannot_answer_reads_the_small_table(dbs: Any
                                                                        ) -> None:
    conn, _ = dbs
    _insert(dbs, "t1", ROWS["t1"])
    # DISTINCT: beyond the evaluator over the projection's rows; the tables' own
    # in-process path (the change IR's executor) answers it.
    sql = f"SELECT DISTINCT n FROM {wire.VIEW}"
    explained = _explain(conn, sql)
    assert ("Read: not from the projection's rows (a SELECT with distinct): from the "
            "tables' rows, in process if the evaluator can express it, else on Spark"
            ) in explained, explained
    ran = _read(dbs, sql)
    assert (ran["routed_declined"], ran["local_arrow"], ran["local_spark"]) == (1, 1, 0)
    # Tables over local_read_max_rows: EXPLAIN says Spark, and why.
    conn.execute("ALTER SYSTEM SET local_read_max_rows = 3")
    assert ("Read: on Spark (a SELECT with distinct; not in process from "
            "the tables: its tables have over 3 rows (local_read_max_rows))") in _explain(
        conn, sql)
    with pytest.raises(SparkStarted):
        conn.execute(sql)


# SELECTs over a derived table, routed or not (over t2, a projection of t1, both): the
# evaluator's answer over the inner SELECT's result, at its bound types.
DERIVED = [
    "SELECT s, count(*) AS c FROM (SELECT k, s FROM t1 WHERE v > 3) AS d GROUP BY s",
    "SELECT sum(x), max(k) FROM (SELECT k, sum(v) AS x FROM t1 GROUP BY k) AS d",
    "SELECT k, v FROM (SELECT k, v FROM t1 ORDER BY v DESC, k LIMIT 4) AS d ORDER BY k, v",
    "SELECT name, w * 2 AS w2 FROM (SELECT name, w FROM t2 WHERE k < 3) AS d "
    "WHERE w IS NOT NULL ORDER BY w2 DESC",
    f"SELECT n, count(*) FROM (SELECT k, n FROM {wire.VIEW} WHERE n > 0) AS d GROUP BY n",
    "SELECT sum(total) FROM (SELECT name, sum(w) AS total FROM t2 GROUP BY name) AS d "
    "WHERE name IS NOT NULL",
    "SELECT b, c FROM (SELECT k, s FROM t1 WHERE k < 3) AS d (b, c) ORDER BY b, c NULLS FIRST",
]


def test_selects_over_derived_tables_are_answered_in_process(dbs: Any) -> None:
    conn, _ = dbs
    conn.execute(f"ALTER TABLE t2 ADD PROJECTION p2 ({ops.PROJECTIONS[4][1]})")
    _insert(dbs, "t1", ROWS["t1"])
    _insert(dbs, "t2", ROWS["t2"])
    for sql in DERIVED:
        ran = _read(dbs, sql)
        assert ran["local_spark"] == 0 and ran["routed_arrow"] + ran["local_arrow"] == 1, (
            sql, ran)


def test_explain_says_when_parts_projected_on_the_fly_need_spark(dbs: Any) -> None:
    conn, _ = dbs
    _insert(dbs, "t2", ROWS["t2"])  # files written before the projections: none stored
    key = "regexp_replace(name, 'a', 'b')"  # beyond the Arrow evaluator: Spark projects
    conn.execute(f"ALTER TABLE t2 ADD PROJECTION by_re (SELECT {key}, count(*) GROUP BY {key})")
    conn.execute(f"ALTER TABLE t2 ADD PROJECTION p2 ({ops.PROJECTIONS[4][1]})")
    spark = _explain(conn, f"SELECT {key}, count(*) FROM t2 GROUP BY {key}")
    assert "1 projected on the fly" in spark and spark.rstrip().endswith(
        "(parts projected on the fly on Spark: by_re)"), spark
    arrow = _explain(conn, "SELECT name, count(*) FROM t2 GROUP BY name")
    assert "Projection: p2" in arrow and "on the fly on Spark" not in arrow, arrow
