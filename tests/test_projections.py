"""Table projections (ClickHouse's RFC): grammar, definitions and their errors, which
queries route to which projection (no Spark); then, on Spark, routed answers against
routing off and against DuckDB through random writes, MATERIALIZE, CLEAR and
compaction; what a routed read reads; and a writer killed between its table commit
and its projection commit."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow.errors import (
    DuplicateObject,
    Error,
    GroupingError,
    InvalidDefinition,
    InvalidOption,
    UnknownColumn,
    UnknownObject,
    WrongObjectType,
)
from mzflow.projections import shape as shapes
from mzflow.read import reads
from mzflow.sql.parse import parse

TABLE = ("CREATE TABLE t (k int, g text, v int, n numeric(8,2), x double precision, "
         "PROJECTION by_g (SELECT g, sum(v), count(*), avg(n), min(v), max(n), count(v), "
         "avg(x) GROUP BY g), "
         "PROJECTION pos (SELECT g, k, sum(n), avg(v), count(*) WHERE v > 0 GROUP BY g, k), "
         "PROJECTION by_k (SELECT k, g, v, n ORDER BY k))")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        yield c


# -- grammar and definitions (no Spark) ------------------------------------------------


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t (a INT, PROJECTION p (SELECT a, COUNT(*) GROUP BY a)) PARTITION BY (a)",
    "ALTER TABLE t ADD PROJECTION IF NOT EXISTS p (SELECT a, SUM(b) GROUP BY a)",
    "ALTER TABLE t DROP PROJECTION IF EXISTS p",
    "ALTER TABLE t MATERIALIZE PROJECTION p IN PARTITION 'x'",
    "ALTER TABLE t CLEAR PROJECTION p",
])
def test_projection_statements_round_trip(sql: str) -> None:
    from mzflow.catalog import normalize

    assert normalize.sql(parse(sql)[0]) == sql


def test_the_rfcs_as_select_form_and_a_column_named_projection() -> None:
    from mzflow.catalog import normalize

    stmt = parse("ALTER TABLE t ADD PROJECTION p AS SELECT a, count(*) GROUP BY a")[0]
    assert normalize.sql(stmt) == "ALTER TABLE t ADD PROJECTION p (SELECT a, COUNT(*) GROUP BY a)"
    create = parse("CREATE TABLE t (projection int, b text)")[0]
    assert [c.name for c in create.this.expressions] == ["projection", "b"]


def test_definitions_are_checked_with_clear_errors(conn: mzflow.Connection) -> None:
    conn.execute(TABLE)
    shown = conn.execute("SHOW CREATE TABLE t").rows[0][1]
    assert "PROJECTION by_g (SELECT g, SUM(v)" in shown and "PROJECTION pos" in shown
    cases: list[tuple[str, type[Error], str]] = [
        ("ALTER TABLE t ADD PROJECTION by_g (SELECT k, count(*) GROUP BY k)",
         DuplicateObject, 'projection "by_g" of table "t" already exists'),
        ("ALTER TABLE t ADD PROJECTION q (SELECT nope, count(*) GROUP BY nope)",
         UnknownColumn, 'column "nope" does not exist'),
        ("ALTER TABLE t ADD PROJECTION q (SELECT g, sum(random()) GROUP BY g)",
         Error, "calls to rand are not allowed in projection \"q\""),
        ("ALTER TABLE t ADD PROJECTION q (SELECT _mz_rowid, count(*) GROUP BY _mz_rowid)",
         InvalidDefinition, "groups by a unique key"),
        ("ALTER TABLE t ADD PROJECTION q (SELECT g, v, count(*) GROUP BY g)",
         GroupingError, 'column "t.v" must appear in the GROUP BY clause'),
        ("ALTER TABLE t ADD PROJECTION q (SELECT g, count(DISTINCT v) GROUP BY g)",
         Error, "cannot merge across parts"),
        ("ALTER TABLE t ADD PROJECTION q (SELECT g, sum(v) FILTER (WHERE v > 0) GROUP BY g)",
         InvalidDefinition, "cannot use FILTER clauses"),
        ("ALTER TABLE t ADD PROJECTION q (SELECT g, v)", InvalidDefinition,
         "needs GROUP BY (an aggregate projection) or ORDER BY"),
        ("ALTER TABLE t DROP PROJECTION nope", UnknownObject,
         'projection "nope" of table "t" does not exist'),
        ("ALTER TABLE nope ADD PROJECTION q (SELECT 1)", UnknownObject, "nope"),
    ]
    for sql, error, message in cases:
        with pytest.raises(error, match=None) as info:
            conn.execute(sql)
        assert message in str(info.value), (sql, str(info.value))
    conn.execute("CREATE VIEW w AS SELECT 1 AS a")
    with pytest.raises(WrongObjectType):
        conn.execute("ALTER TABLE w ADD PROJECTION q (SELECT a, count(*) GROUP BY a)")
    notices = conn.execute("ALTER TABLE t ADD PROJECTION IF NOT EXISTS by_g "
                           "(SELECT k, count(*) GROUP BY k)").notices
    assert notices == ['projection "by_g" of table "t" already exists, skipping']
    conn.execute("ALTER TABLE t DROP PROJECTION pos")
    assert "pos" not in conn.execute("SHOW CREATE TABLE t").rows[0][1]


def test_a_table_holds_a_bounded_number_of_projections(conn: mzflow.Connection) -> None:
    conn.execute("ALTER SYSTEM SET max_projections_per_table = 1")
    conn.execute("CREATE TABLE t (a int, b int, PROJECTION p (SELECT a, count(*) GROUP BY a))")
    with pytest.raises(InvalidDefinition, match="already has 1 projections"):
        conn.execute("ALTER TABLE t ADD PROJECTION q (SELECT b, count(*) GROUP BY b)")


def _route(conn: mzflow.Connection, sql: str) -> dict[str, Any]:
    """Each projection of t: the routed query's SQL, or why it was rejected."""
    snap = conn.store.snapshot()
    p = reads.plan(snap, parse(sql)[0])
    table = snap.resolve("t")
    out: dict[str, Any] = {}
    for projection in snap.projections_on(table.id):
        found = shapes.route(p.query, shapes.shape(snap, table, projection))
        out[projection.name] = found if isinstance(found, str) else found.query.sql()
    return out


@pytest.mark.slow
@pytest.mark.spark
def test_explain_names_the_projection_of_each_select(conn: mzflow.Connection) -> None:
    conn.execute(TABLE)
    conn.execute(VIEW)
    conn.execute("INSERT INTO t VALUES (1, 'a', 2, 1.50, 0.5)")
    lines = conn.execute("EXPLAIN SELECT vg.g, vg.s FROM vg JOIN "
                         "(SELECT k, v FROM t WHERE k = 1) AS one ON true").rows[0][0]
    assert "Projection: by_g (aggregate)" in lines, lines
    assert "Projection: by_k (sorted)" in lines, lines
    assert conn.execute("SELECT vg.g, vg.s, one.v FROM vg JOIN "
                        "(SELECT k, v FROM t WHERE k = 1) AS one ON true").rows == [
        ("a", 2, 2)]


def test_routing_decisions(conn: mzflow.Connection) -> None:
    conn.execute(TABLE)
    r = _route(conn, "SELECT g, sum(v), count(*) FROM t GROUP BY g")
    assert "SUM(t._a0)" in r["by_g"] and "COALESCE(SUM(t._a1), 0)" in r["by_g"]
    assert "the query's WHERE does not imply" in r["pos"]
    # Grouping on a subset of the keys re-aggregates; WHERE must imply the projection's.
    r = _route(conn, "SELECT k, avg(v) FROM t WHERE v > 0 GROUP BY k")
    assert "GROUP BY t._k1" in r["pos"]
    assert r["by_g"] == 'column "k" is not a key of the projection'
    # A condition on keys filters whole partial rows.
    r = _route(conn, "SELECT count(*) FROM t WHERE g = 'a' AND v > 0 AND k < 3")
    assert "t._k0 = 'a'" in r["pos"] and "t._k1 < 3" in r["pos"]
    # Not answerable: a non-key column, an aggregate not kept, DISTINCT, no aggregate.
    assert _route(conn, "SELECT k, count(*) FROM t GROUP BY k")["by_g"].startswith("column")
    assert "not kept" in _route(conn, "SELECT g, sum(x) FROM t GROUP BY g")["by_g"]
    assert "merge" in _route(conn, "SELECT g, count(DISTINCT v) FROM t GROUP BY g")["by_g"]
    assert _route(conn, "SELECT g FROM t")["by_g"] == "the query does not aggregate"
    # A sorted projection answers what restricts its sort key to constants.
    r = _route(conn, "SELECT g, v FROM t WHERE k IN (1, 2) AND v > 0")
    assert "FROM mz_proj_" in r["by_k"]
    assert "sort key" in _route(conn, "SELECT g, v FROM t WHERE k > 1")["by_k"]
    assert "not kept" in _route(conn, "SELECT x FROM t WHERE k = 1")["by_k"]
    conn.execute("CREATE TABLE u (k int)")
    joined = _route(conn, "SELECT t.g, count(*) FROM t JOIN u ON t.k = u.k GROUP BY t.g")
    assert joined["by_g"] == "the query reads more than the table"


# -- on Spark: answers against routing off and DuckDB ---------------------------------


duckdb = pytest.importorskip("duckdb")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BATTERY = [
    "SELECT g, sum(v), count(*) FROM t GROUP BY g",
    "SELECT g, avg(n), min(v), max(n), count(v) FROM t GROUP BY g HAVING count(*) > 1",
    "SELECT count(*), sum(v), avg(n), avg(x) FROM t",
    "SELECT k, avg(v), sum(n) FROM t WHERE v > 0 GROUP BY k",
    "SELECT g, count(*) FROM t WHERE v > 0 AND g <> 'b' GROUP BY g",
    "SELECT g, sum(v) * 2 AS s2 FROM t WHERE g IS NOT NULL GROUP BY g ORDER BY g LIMIT 2",
    "SELECT k, g, v FROM t WHERE k = 2",
    "SELECT count(*), sum(v), max(n) FROM t WHERE k IN (1, 3) AND v IS NOT NULL",
    # Order matters below (each ORDER BY is total): NULL groups, all-NULL groups (sum
    # NULL, count 0), both NULL orders, LIMIT and OFFSET, HAVING, an empty group set
    # and a global aggregate of no rows, quotients of merged partials.
    "SELECT g, sum(v), count(*), min(v), max(n), count(v) FROM t GROUP BY g "
    "ORDER BY g DESC NULLS FIRST LIMIT 3",
    "SELECT g, avg(n) AS a, avg(x), sum(v) * 2 FROM t GROUP BY g "
    "ORDER BY 2 DESC NULLS LAST, g NULLS FIRST",
    "SELECT g, sum(v) AS s FROM t GROUP BY g HAVING sum(v) IS NULL OR sum(v) > 0 "
    "ORDER BY g NULLS FIRST LIMIT 2 OFFSET 1",
    "SELECT g, count(*), sum(v) FROM t WHERE g = 'zz' GROUP BY g",
    "SELECT count(*), sum(v), avg(n), max(n), avg(x) FROM t WHERE g = 'zz'",
    "SELECT g, sum(n) / count(*), avg(v), count(*) + 1 FROM t WHERE v > 0 GROUP BY g "
    "ORDER BY g NULLS LAST",
    "SELECT g, CAST(sum(v) AS double precision) / count(*) FROM t GROUP BY g",
    # The sorted projection: a key lookup with expressions, orders, aggregates.
    "SELECT k, g, v, n FROM t WHERE k IN (1, 2) "
    "ORDER BY g NULLS FIRST, v DESC NULLS LAST, n, k",
    "SELECT k, v * 2 + 1, n * n, -n FROM t WHERE k = 3 AND n > 0",
    "SELECT count(*), avg(v), avg(n), sum(n) / count(*), min(g) FROM t WHERE k IN (2, 4)",
    # A plain view's SELECT is routed inside the query that reads the view (in process:
    # the view's SELECT over the projection's rows, then the query over its result).
    "SELECT vg.g, vg.s, vg.c FROM vg WHERE vg.c > 1",
    "SELECT sum(vg.c), sum(vg.s), max(vg.g) FROM vg WHERE vg.g IS NOT NULL",
]
VIEW = "CREATE VIEW vg AS SELECT g, sum(v) AS s, count(*) AS c FROM t GROUP BY g"

ROW = st.tuples(st.integers(0, 4), st.sampled_from(["a", "b", "c", None]),
                st.one_of(st.none(), st.integers(-3, 5)),
                st.one_of(st.none(), st.decimals(-50, 50, places=2, allow_nan=False)),
                st.one_of(st.none(), st.sampled_from([0.5, 1.25, -2.0, 3.0])))
STEP = st.one_of(
    st.tuples(st.just("insert"), st.lists(ROW, min_size=1, max_size=6)),
    st.tuples(st.just("update"), st.integers(0, 4)),
    st.tuples(st.just("delete"), st.integers(0, 4)),
    st.tuples(st.just("materialize"), st.sampled_from(["by_g", "pos", "by_k"])),
    st.tuples(st.just("clear"), st.sampled_from(["by_g", "pos", "by_k"])),
    st.tuples(st.just("compact"), st.none()),
)
# The same table partitioned by g: IN PARTITION builds and clears one partition's parts.
PARTITIONED_STEP = st.one_of(
    STEP,
    st.tuples(st.sampled_from(["materialize in", "clear in"]),
              st.tuples(st.sampled_from(["by_g", "pos", "by_k"]),
                        st.sampled_from(["a", "b", "c", None]))),
)


def _sql_value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def _step_sql(step: tuple[str, Any]) -> str | None:
    kind, arg = step
    if kind == "insert":
        return "INSERT INTO t VALUES " + ", ".join(
            "(" + ", ".join(_sql_value(v) for v in row) + ")" for row in arg)
    if kind == "update":
        return f"UPDATE t SET v = v + 1, n = n * 2 WHERE k = {arg}"
    if kind == "delete":
        return f"DELETE FROM t WHERE k = {arg}"
    return None


def _norm(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    def value(v: Any) -> Any:
        if isinstance(v, Decimal | float | int) and not isinstance(v, bool):
            return round(float(v), 6)
        return v
    return sorted((tuple(value(v) for v in r) for r in rows), key=repr)


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], ordered: bool = False
          ) -> bool:
    """Equal rows (in the same order when ``ordered``); numbers to 6 decimal places, as
    DuckDB's average is a double."""
    if len(a) != len(b):
        return False
    pairs = zip(_norm(a), _norm(b), strict=True) if not ordered else zip(
        [_norm([r])[0] for r in a], [_norm([r])[0] for r in b], strict=True)
    for ra, rb in pairs:
        for va, vb in zip(ra, rb, strict=True):
            if isinstance(va, float) and isinstance(vb, float):
                if not math.isclose(va, vb, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif va != vb:
                return False
    return True


def _types(rows: list[tuple[Any, ...]]) -> list[set[type]]:
    """Each column's Python types (NULLs aside), and for decimals their exponents."""
    out: list[set[Any]] = [set() for _ in rows[0]] if rows else []
    for r in rows:
        for i, v in enumerate(r):
            if v is not None:
                out[i].add((type(v), v.as_tuple().exponent if isinstance(v, Decimal)
                            and v != 0 else None))
    return out


@pytest.fixture(scope="module")
def spark_home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mzflow-proj-") as d:
        yield Path(d)


@pytest.mark.slow
@pytest.mark.spark
@settings(max_examples=int(os.environ.get("MZFLOW_ORACLE_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=2, max_size=4))
def test_routed_answers_equal_routing_off_and_duckdb(spark_home: Path,
                                                     steps: list[tuple[str, Any]]) -> None:
    _routed_oracle(spark_home, steps, TABLE)


@pytest.mark.slow
@pytest.mark.spark
@settings(max_examples=int(os.environ.get("MZFLOW_ORACLE_EXAMPLES", "2")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(steps=st.lists(PARTITIONED_STEP, min_size=2, max_size=4))
def test_routed_answers_over_a_partitioned_table(spark_home: Path,
                                                 steps: list[tuple[str, Any]]) -> None:
    _routed_oracle(spark_home, steps, TABLE + " PARTITION BY (g)")


def _routed_oracle(spark_home: Path, steps: list[tuple[str, Any]], table: str) -> None:
    from mzflow.engine import spark
    from mzflow.projections import route as projections

    home = Path(tempfile.mkdtemp(dir=spark_home))
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, g text, v int, n decimal(8,2), x double)")
    db.execute(VIEW)
    with mzflow.connect(str(home)) as conn:
        conn.execute(table)
        conn.execute(VIEW)
        seed = [(1, "a", 2, Decimal("1.50"), 0.5), (2, "b", None, None, None),
                (3, "a", -1, Decimal("2.25"), 1.25), (1, None, 4, Decimal("0.10"), 3.0)]
        steps = [("insert", seed), *steps]
        times = []
        for step in steps:
            sql = _step_sql(step)
            if sql is not None:
                conn.execute(sql)
                db.execute(sql)
            elif step[0] == "compact":
                conn.compact("t")
            elif step[0].endswith(" in"):
                name, value = step[1]
                conn.execute(f"ALTER TABLE t {step[0].split()[0].upper()} PROJECTION {name} "
                             f"IN PARTITION {_sql_value(value)}")
            else:
                conn.execute(f"ALTER TABLE t {step[0].upper()} PROJECTION {step[1]}")
            times.append((conn.store.snapshot().read_ts,
                          {q: db.execute(q).fetchall() for q in BATTERY}))
            for q in BATTERY:
                before, engine = projections.ROUTED[0], dict(projections.ENGINE)
                conn.execute("SET optimize_use_projections = true")
                with spark.counting_jobs() as jobs:
                    routed = conn.execute(q).rows
                was_routed = projections.ROUTED[0] > before
                conn.execute("SET optimize_use_projections = false")
                plain = conn.execute(q).rows
                expected = times[-1][1][q]
                ordered = "ORDER BY" in q
                assert _same(routed, plain, ordered), (step, q, routed, plain)
                assert _same(routed, expected, ordered), (step, q, routed, expected)
                # Values of the same Python types as the Spark path's (Decimal, int…).
                assert _types(routed) == _types(plain), (q, routed, plain)
                # Every battery query is answerable by a projection: it was routed.
                assert was_routed, (q, "not routed")
                # … in process, without a Spark job.
                in_arrow = projections.ENGINE["arrow"] - engine["arrow"]
                assert in_arrow == 1, (step, q, projections.ENGINE)
                assert jobs() in (0, None), (step, q, jobs())
        # AS OF an earlier time reads that time's parts through the projections.
        conn.execute("SET optimize_use_projections = true")
        at, answers = times[0]
        for q in BATTERY[:3]:
            old = conn.execute(f"{q} AS OF {at}").rows
            assert _same(old, answers[q]), (q, old, answers[q])


@pytest.mark.slow
@pytest.mark.spark
def test_a_routed_read_reads_projection_rows_not_base_rows(tmp_path: Path) -> None:
    from mzflow.projections import route as projections

    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE TABLE t (k int, g text, v int)")
        conn.execute("INSERT INTO t VALUES " + ", ".join(
            f"({i}, 'g{i % 3}', {i})" for i in range(1, 2001)))
        conn.execute("ALTER TABLE t ADD PROJECTION p (SELECT g, sum(v), count(*) GROUP BY g)")
        q = "SELECT g, sum(v), count(*) FROM t GROUP BY g"
        explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert "Projection: p (aggregate)" in explain and "1 projected on the fly" in explain
        conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p")
        explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert "1 parts stored, 0 projected on the fly" in explain
        before = dict(projections.ROWS_READ)
        rows = conn.execute(q).rows
        assert sorted(rows) == [("g0", sum(i for i in range(1, 2001) if i % 3 == 0), 666),
                                ("g1", sum(i for i in range(1, 2001) if i % 3 == 1), 667),
                                ("g2", sum(i for i in range(1, 2001) if i % 3 == 2), 667)]
        assert projections.ROWS_READ["projection"] - before["projection"] == 3
        assert projections.ROWS_READ["base"] == before["base"]
        conn.execute("SET optimize_use_projections = off")
        assert "not used (optimize_use_projections is off)" in conn.execute(
            f"EXPLAIN {q}").rows[0][0]


CHILD = r"""
import os, signal, sys
import mzflow
from mzflow.projections import write as projections

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

projections.add_parts = die  # killed between the table's commit and the projection's
with mzflow.connect(sys.argv[1]) as conn:
    conn.execute("INSERT INTO t VALUES (10, 'a', 5), (11, 'z', 7)")
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_writer_killed_between_table_and_projection_commits_leaves_reads_right(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE t (k int, g text, v int, "
                     "PROJECTION p (SELECT g, sum(v), count(*) GROUP BY g))")
        conn.execute("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2)")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(home)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    q = "SELECT g, sum(v), count(*) FROM t GROUP BY g ORDER BY g"
    expected = [("a", 6, 2), ("b", 2, 1), ("z", 7, 1)]
    with mzflow.connect(str(home)) as conn:
        # The table committed; the projection did not: that part is projected on the fly.
        explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert "1 parts stored, 1 projected on the fly" in explain, explain
        assert conn.execute(q).rows == expected
        conn.execute("SET optimize_use_projections = false")
        assert conn.execute(q).rows == expected
        conn.execute("SET optimize_use_projections = true")
        conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p")
        assert "2 parts stored, 0 projected" in conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert conn.execute(q).rows == expected
        # MATERIALIZE again finds nothing missing: it is resumable and idempotent.
        notice = conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p").notices[0]
        assert "0 parts materialized" in notice


@pytest.mark.slow
@pytest.mark.spark
def test_a_maintained_view_recomputed_reads_the_projection(tmp_path: Path) -> None:
    """A tick that recomputes a view routes its SELECT like a read: projection rows, not
    base rows, and the same answer as DuckDB; ALTER SYSTEM SET turns it off."""
    from mzflow.projections import route as projections

    rows = [(i, f"g{i % 4}", i % 7 or None) for i in range(1, 1201)]
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, g text, v int)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    view = "SELECT g, sum(v) AS s, count(v) AS n, max(v) AS top FROM t GROUP BY g"
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE TABLE t (k int, g text, v int, PROJECTION p "
                     "(SELECT g, sum(v), count(v), max(v) GROUP BY g))")
        conn.execute("INSERT INTO t VALUES " + ", ".join(
            f"({k}, '{g}', {'NULL' if v is None else v})" for k, g, v in rows))
        conn.execute(f"CREATE MATERIALIZED VIEW m AS {view}")
        for routing in ("true", "false"):
            conn.execute(f"ALTER SYSTEM SET optimize_use_projections = {routing}")
            before = dict(projections.ROWS_READ)
            conn.tick(object="m", full_refresh=True)
            read = {k: projections.ROWS_READ[k] - before[k] for k in before}
            assert read == ({"projection": 4, "base": 0} if routing == "true" else
                            {"projection": 0, "base": 0}), routing
            conn.execute("SET cluster = default")
            got = conn.execute("SELECT g, s, n, top FROM m ORDER BY g").rows
            assert got == [tuple(r) for r in db.execute(f"{view} ORDER BY g").fetchall()]


MATERIALIZE_CHILD = r"""
import os, signal, sys
import deltalake
import pyarrow.parquet as pq
import mzflow

def write_then_die(table, data, *args, **kwargs):
    # The projection's data file is written, its log commit never is.
    pq.write_table(data, os.path.join(table.table_uri.removeprefix("file://"),
                                      "orphan-part.parquet"))
    os.kill(os.getpid(), signal.SIGKILL)

deltalake.write_deltalake = write_then_die
with mzflow.connect(sys.argv[1]) as conn:
    conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p")
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_materialize_killed_mid_write_is_finished_by_the_next(tmp_path: Path) -> None:
    home = tmp_path / "home"
    q = "SELECT g, sum(v), count(*) FROM t GROUP BY g ORDER BY g"
    expected = [("a", 6, 2), ("b", 2, 1), ("z", 7, 1)]
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE t (k int, g text, v int)")
        conn.execute("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2)")
        conn.execute("INSERT INTO t VALUES (10, 'a', 5), (11, 'z', 7)")
        conn.execute("ALTER TABLE t ADD PROJECTION p (SELECT g, sum(v), count(*) GROUP BY g)")
        conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p")  # makes the shard
        conn.execute("ALTER TABLE t CLEAR PROJECTION p")
    proc = subprocess.run([sys.executable, "-c", MATERIALIZE_CHILD, str(home)],
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert list(home.rglob("orphan-part.parquet"))  # the kill left a data file behind
    with mzflow.connect(str(home)) as conn:
        assert "0 parts stored, 2 projected on the fly" in conn.execute(
            f"EXPLAIN {q}").rows[0][0]
        assert conn.execute(q).rows == expected
        notice = conn.execute("ALTER TABLE t MATERIALIZE PROJECTION p").notices[0]
        assert "2 parts materialized" in notice, notice
        assert "2 parts stored, 0 projected" in conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert conn.execute(q).rows == expected  # the orphan file counts nothing
        assert "0 parts materialized" in conn.execute(
            "ALTER TABLE t MATERIALIZE PROJECTION p").notices[0]


def test_in_partition_names_a_partition_of_a_partitioned_table(
        conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE u (k int, PROJECTION p (SELECT k, count(*) GROUP BY k))")
    with pytest.raises(Error, match="has no partitions"):
        conn.execute("ALTER TABLE u MATERIALIZE PROJECTION p IN PARTITION '1'")
    conn.execute("CREATE TABLE w (k int, g text, PROJECTION p (SELECT g, count(*) GROUP BY g))"
                 " PARTITION BY (k)")
    for sql, text in (("IN PARTITION 'x'", 'invalid partition value "x" for column "k" of '
                                           "type integer"),
                      ("IN PARTITION (1, 2)", "IN PARTITION needs 1 values"),
                      ("IN PARTITION (1 + 1)", "IN PARTITION takes literals")):
        with pytest.raises(InvalidOption, match=text):
            conn.execute(f"ALTER TABLE w MATERIALIZE PROJECTION p {sql}")
    # No files yet: nothing to build or clear, whatever the value.
    assert "0 parts materialized" in conn.execute(
        "ALTER TABLE w MATERIALIZE PROJECTION p IN PARTITION 1").notices[0]
    assert "0 parts cleared" in conn.execute(
        "ALTER TABLE w CLEAR PROJECTION p IN PARTITION NULL").notices[0]


PARTED = ("CREATE TABLE t (k int, g text, d date, v int, "
          "PROJECTION by_gd (SELECT g, d, sum(v), count(*) GROUP BY g, d)) PARTITION BY (g, d)")
PARTED_QUERIES = ["SELECT g, d, sum(v), count(*) FROM t GROUP BY g, d",
                  "SELECT g, sum(v) FROM t WHERE d = DATE '2024-01-01' GROUP BY g",
                  "SELECT d, count(*) FROM t WHERE g = '' GROUP BY d"]


@pytest.mark.slow
@pytest.mark.spark
def test_materialize_and_clear_in_partition(tmp_path: Path) -> None:
    """MATERIALIZE and CLEAR … IN PARTITION touch the parts of that partition only
    (NULL and '' are different partitions), again is a no-op, and reads routed to the
    projection, stored and projected parts mixed, equal DuckDB's."""
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, g text, d date, v int)")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(PARTED)
        # One INSERT per row: one file (part) per row, in its (g, d) partition.
        rows = ["(1, 'a', DATE '2024-01-01', 1)", "(2, 'a', DATE '2024-01-01', 2)",
                "(3, 'b', DATE '2024-01-01', 3)", "(4, '', DATE '2024-01-02', 4)",
                "(5, NULL, DATE '2024-01-02', 5)", "(6, NULL, NULL, 6)",
                "(7, 'b c', NULL, NULL)"]
        for row in rows:
            conn.execute(f"INSERT INTO t VALUES {row}")
            db.execute(f"INSERT INTO t VALUES {row}")

        def stored() -> tuple[int, int]:
            text = "".join(r[0] for r in conn.execute(f"EXPLAIN {PARTED_QUERIES[0]}").rows)
            line = next(ln for ln in text.splitlines() if ln.startswith("Projection: by_gd"))
            words = line.split(": ")[-1].split()
            return int(words[0]), int(words[3])  # "S parts stored, P projected on the fly"

        def answers_right() -> None:
            for q in PARTED_QUERIES:
                conn.execute("SET optimize_use_projections = true")
                routed = conn.execute(q).rows
                conn.execute("SET optimize_use_projections = false")
                assert _same(routed, conn.execute(q).rows), q
                assert _same(routed, db.execute(q).fetchall()), (q, routed)
            conn.execute("SET optimize_use_projections = true")

        def alter(action: str, value: str) -> int:
            notice = conn.execute(f"ALTER TABLE t {action} PROJECTION by_gd "
                                  f"IN PARTITION {value}").notices[0]
            return int(notice.split(": ")[1].split()[0])

        assert stored() == (7, 0)  # every write kept its part
        answers_right()
        assert conn.execute("ALTER TABLE t CLEAR PROJECTION by_gd").notices
        assert stored() == (0, 7)
        assert alter("MATERIALIZE", "('a', DATE '2024-01-01')") == 2
        assert stored() == (2, 5)
        assert alter("MATERIALIZE", "('a', '2024-01-01')") == 0  # again: nothing to do
        assert alter("MATERIALIZE", "('', '2024-01-02')") == 1  # not the NULL one
        assert alter("MATERIALIZE", "(NULL, NULL)") == 1
        assert alter("MATERIALIZE", "('b c', NULL)") == 1
        assert stored() == (5, 2)
        answers_right()
        assert alter("CLEAR", "('a', '2024-01-01')") == 2
        assert alter("CLEAR", "('a', '2024-01-01')") == 0
        assert alter("CLEAR", "(NULL, '2024-01-02')") == 0  # never materialized
        assert stored() == (3, 4)
        answers_right()
        # A row moved to another partition: its new part is kept by the write.
        conn.execute("UPDATE t SET g = 'a', d = DATE '2024-01-01' WHERE k = 7")
        db.execute("UPDATE t SET g = 'a', d = DATE '2024-01-01' WHERE k = 7")
        assert stored() == (3, 4)  # 'b c' left (its file went), ('a', …) gained one
        answers_right()
        conn.compact("t")
        answers_right()


# -- ClickHouse's projection tests, ported ---------------------------------------------
# Scenarios and expectations from ClickHouse's tests/queries/0_stateless/
# 01710_projections.sql (Apache 2.0): an aggregate projection by (minute, domain) with
# ratios of aggregates; which queries use it (PROJECTION_NOT_USED there is "not used"
# here), and that the answers are the table's. ClickHouse-only functions are spelled
# in our dialect (countIf → sum(CASE …), toStartOfMinute → date_trunc), and uniqHLL12
# (approximate) is left out. The answers are checked against DuckDB.

CH_TABLE = ("CREATE TABLE projection_test (datetime timestamp, domain text, x_id text, "
            "block_count bigint, retry_count bigint, duration bigint, kbytes bigint, "
            "buffer_time bigint, first_time bigint, total_bytes bigint, valid_bytes bigint)")
CH_PROJECTION = (
    "ALTER TABLE projection_test ADD PROJECTION p (SELECT date_trunc('minute', datetime) "
    "AS dt_m, domain, sum(CASE WHEN first_time = 0 THEN 1 ELSE 0 END), count(*), "
    "avg(CAST(kbytes * 8 AS double precision) / duration), sum(block_count), sum(duration), "
    "avg(CAST(block_count AS double precision) / duration), sum(buffer_time), "
    "sum(valid_bytes), sum(total_bytes), sum(retry_count), "
    "sum(CASE WHEN block_count > 0 THEN 1 ELSE 0 END) "
    "GROUP BY date_trunc('minute', datetime), domain)")
CH_QUERIES: list[tuple[str, bool]] = [
    ("SELECT * FROM projection_test", False),
    ("SELECT date_trunc('minute', datetime) AS dt_m, "
     "sum(CASE WHEN first_time = 0 THEN 1 ELSE 0 END) FROM projection_test "
     "JOIN (SELECT 1 AS one) AS x ON true WHERE domain = '1' "
     "GROUP BY date_trunc('minute', datetime) ORDER BY 1", False),
    ("SELECT date_trunc('minute', datetime) AS dt_m, "
     "CAST(sum(CASE WHEN first_time = 0 THEN 1 ELSE 0 END) AS double precision) / count(*), "
     "avg(CAST(kbytes * 8 AS double precision) / duration) FROM projection_test "
     "WHERE domain = '1' GROUP BY date_trunc('minute', datetime) ORDER BY 1", True),
    ("SELECT date_trunc('minute', datetime) AS dt_m, count(*), "
     "CAST(sum(block_count) AS double precision) / sum(duration), "
     "avg(CAST(block_count AS double precision) / duration) FROM projection_test "
     "GROUP BY date_trunc('minute', datetime) ORDER BY 1", True),
    ("SELECT date_trunc('minute', datetime) AS dt_m, "
     "CAST(sum(buffer_time) AS double precision) / sum(duration), "
     "CAST(sum(valid_bytes) AS double precision) / sum(total_bytes) FROM projection_test "
     "WHERE domain IN ('12', '14') GROUP BY date_trunc('minute', datetime) ORDER BY 1", True),
    ("SELECT date_trunc('minute', datetime) AS dt_m, domain, "
     "CAST(sum(retry_count) AS double precision) / sum(duration), "
     "CAST(sum(CASE WHEN block_count > 0 THEN 1 ELSE 0 END) AS double precision) / count(*) "
     "FROM projection_test GROUP BY date_trunc('minute', datetime), domain "
     "HAVING domain = '19' ORDER BY 1, 2", True),
    # Coarser buckets from the projection's: date_trunc('hour', …) of its minute key.
    ("SELECT date_trunc('hour', date_trunc('minute', datetime)) AS dt_h, count(*) "
     "FROM projection_test GROUP BY date_trunc('hour', date_trunc('minute', datetime)) "
     "ORDER BY 1", True),
    # Not a key: x_id.
    ("SELECT x_id, count(*) FROM projection_test GROUP BY x_id ORDER BY 1", False),
]


@pytest.mark.slow
@pytest.mark.spark
def test_clickhouse_01710_projections(tmp_path: Path) -> None:
    import datetime as dt
    import random

    rng = random.Random(1710)
    start = dt.datetime(2020, 10, 24)
    rows = []
    for i in range(1000):
        rows.append((start + dt.timedelta(seconds=i // 20), str(i % 100),
                     f"x{rng.randrange(50)}", rng.randrange(-5, 50), rng.randrange(0, 9),
                     rng.randrange(1, 100), rng.randrange(0, 1000), rng.randrange(0, 60),
                     rng.choice([0, 0, 1, 7]), rng.randrange(1, 10_000),
                     rng.choice([None, rng.randrange(0, 5000)])))
    values = ", ".join("(" + ", ".join(
        "NULL" if v is None else f"TIMESTAMP '{v}'" if isinstance(v, dt.datetime)
        else f"'{v}'" if isinstance(v, str) else str(v) for v in r) + ")" for r in rows)
    db = duckdb.connect()
    db.execute(CH_TABLE)
    db.execute(f"INSERT INTO projection_test VALUES {values}")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(CH_TABLE)
        # Two writes, so that the projection spans parts; one of them before it exists.
        half = values.index("), (", len(values) // 2) + 1
        conn.execute(f"INSERT INTO projection_test VALUES {values[:half]}")
        conn.execute(CH_PROJECTION)
        conn.execute(f"INSERT INTO projection_test VALUES {values[half + 1:]}")
        for q, used in CH_QUERIES:
            conn.execute("SET optimize_use_projections = on")
            explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
            assert ("Projection: p (aggregate)" in explain) == used, (q, explain)
            expected = db.execute(q).fetchall()
            routed = conn.execute(q).rows
            conn.execute("SET optimize_use_projections = off")
            plain = conn.execute(q).rows
            assert _same(routed, expected), (q, routed[:3], expected[:3])
            assert _same(plain, expected), (q, plain[:3], expected[:3])
        # ClickHouse's projection_without_key: a projection of a global aggregate.
        conn.execute("CREATE TABLE projection_without_key (key bigint, "
                     "PROJECTION x (SELECT max(key)))")
        conn.execute("INSERT INTO projection_without_key VALUES " + ", ".join(
            f"({n})" for n in range(1000)))
        conn.execute("SET optimize_use_projections = on")
        assert "Projection: x (aggregate)" in conn.execute(
            "EXPLAIN SELECT max(key) FROM projection_without_key").rows[0][0]
        assert conn.execute("SELECT max(key) FROM projection_without_key").rows == [(999,)]


def test_a_write_keeps_aggregate_parts_computed_in_arrow_without_spark(
        conn: mzflow.Connection) -> None:
    # Not marked spark: the conftest guard fails this test if anything starts Spark.
    # A write keeps its new part's partials, computed in Arrow, equal to DuckDB's.
    from deltalake import DeltaTable

    from mzflow.projections.store import shard_of

    conn.execute("CREATE TABLE t (k int, g text, v int, n numeric(8,2), "
                 "PROJECTION p (SELECT g, sum(v * 2), count(*), avg(n), max(k) "
                 "WHERE v > 0 GROUP BY g))")
    rows = [(1, "a", 1, "1.50"), (2, "a", -1, "2.00"), (3, "b", 5, None), (4, None, 2, "0.25"),
            (5, "a", 3, "3.10")]
    conn.execute("INSERT INTO t VALUES " + ", ".join(
        f"({k}, {'NULL' if g is None else repr(g)}, {v}, {'NULL' if n is None else n})"
        for k, g, v, n in rows))
    assert conn.execute("SELECT parts FROM mz_projections").rows == [(1,)]
    snap = conn.store.snapshot()
    stored = DeltaTable(str(shard_of(conn.config.warehouse, snap.projections[0]).path)
                        ).to_pyarrow_table().to_pylist()
    got = sorted(((r["_k0"], r["_a0"], r["_a1"], r["_a2"], r["_a3"], r["_a4"])
                  for r in stored), key=repr)
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, g text, v int, n decimal(8,2))")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    want = sorted(db.execute(
        "SELECT g, sum(v * 2), count(*), sum(CAST(n AS decimal(38,2))), count(n), max(k) "
        "FROM t WHERE v > 0 GROUP BY g").fetchall(), key=repr)
    assert [tuple(None if x is None else float(x) for x in r[1:]) for r in got] == [
        tuple(None if x is None else float(x) for x in r[1:]) for r in want]
    assert [r[0] for r in got] == [r[0] for r in want]


def test_wide_decimal_partials_are_stored_as_spark_would(conn: mzflow.Connection) -> None:
    # TPC-H Q1's charge: numeric(15,2) × (1 - numeric) × (1 + numeric). The Arrow
    # evaluator sizes the product by its values (up to decimal256), which Delta cannot
    # store: MATERIALIZE failed at SF 1 with "Invalid data type for Delta Lake:
    # Decimal256(76, 6)". Partials are kept at decimal(38, s), as Spark keeps them.
    conn.execute("CREATE TABLE li (f text, price numeric(15,2), disc numeric(15,2), "
                 "tax numeric(15,2))")
    rows = [("A", "90000000000.25", "0.05", "0.08"), ("A", "12.50", "0.10", "0.00"),
            ("N", "999999999999.99", "0.00", "0.02")]
    conn.execute("INSERT INTO li VALUES " + ", ".join(
        f"('{f}', {p}, {d}, {t})" for f, p, d, t in rows))
    conn.execute("ALTER TABLE li ADD PROJECTION q1 (SELECT f, "
                 "sum(price * (1 - disc) * (1 + tax)), count(*) GROUP BY f)")
    notice = conn.execute("ALTER TABLE li MATERIALIZE PROJECTION q1").notices[0]
    assert "1 parts materialized" in notice
    conn.execute("INSERT INTO li VALUES ('A', 1.00, 0.50, 0.50)")  # a write keeps its part
    assert conn.execute("SELECT parts FROM mz_projections").rows == [(2,)]
    from decimal import Decimal as D

    from deltalake import DeltaTable

    from mzflow.projections.store import shard_of

    stored = DeltaTable(str(shard_of(conn.config.warehouse,
                                     conn.store.snapshot().projections[0]).path)
                        ).to_pyarrow_table().to_pylist()
    got: dict[str, D] = {}
    for r in stored:
        got[r["_k0"]] = got.get(r["_k0"], D(0)) + r["_a0"]
    exact: dict[str, D] = {}  # Python's decimals: exact, whatever the width
    for f, p, d, t in rows + [("A", "1.00", "0.50", "0.50")]:
        exact[f] = exact.get(f, D(0)) + D(p) * (1 - D(d)) * (1 + D(t))
    assert got == exact


# -- routed reads in process ---------------------------------------------------------


def test_a_routed_read_is_answered_in_process_without_spark(conn: mzflow.Connection) -> None:
    # Not marked spark: the conftest guard fails this test if anything starts Spark.
    # Values and their types as the Spark path returns them: ints, Decimals at the bound
    # scale (avg: 16 places, rounded half away from zero), NULL groups and NULL sums.
    conn.execute("CREATE TABLE t (k int, g text, v int, n numeric(8,2), "
                 "PROJECTION by_g (SELECT g, sum(v), count(*), count(v), avg(n), min(n), "
                 "max(v) GROUP BY g), PROJECTION by_k (SELECT k, v, n ORDER BY k))")
    conn.execute("INSERT INTO t VALUES (1, 'a', 2, 1.50), (1, 'a', 2, 1.50), "
                 "(2, 'a', NULL, 0.25), (3, 'b', NULL, NULL), (4, NULL, 5, 2.00)")
    conn.execute("INSERT INTO t VALUES (5, 'a', 1, 1.00), (6, 'c', 1, 0.01), "
                 "(6, 'c', 1, 0.01), (7, 'c', 1, 0.00), (8, 'd', -1, -0.01), "
                 "(8, 'd', -1, -0.01), (8, 'd', -1, 0.00)")
    q = ("SELECT g, sum(v), count(*), count(v), avg(n), min(n), max(v) FROM t GROUP BY g "
         "ORDER BY g NULLS FIRST")
    explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
    assert "Projection: by_g (aggregate)" in explain, explain
    assert "Read: in process (Arrow), no Spark job" in explain, explain
    rows = conn.execute(q).rows
    D = Decimal
    assert rows == [
        (None, 5, 1, 1, D("2.0000000000000000"), D("2.00"), 5),
        ("a", 5, 4, 3, D("1.0625000000000000"), D("0.25"), 2),
        ("b", None, 1, 0, None, None, None),
        ("c", 3, 3, 3, D("0.0066666666666667"), D("0.00"), 1),
        ("d", -3, 3, 3, D("-0.0066666666666667"), D("-0.01"), -1)]
    assert [[str(v) for v in r if isinstance(v, Decimal)] for r in rows][1] == [
        "1.0625000000000000", "0.25"]
    lookup = "SELECT k, v, n * 2 FROM t WHERE k IN (1, 5, 9) ORDER BY k DESC, v"
    assert "Read: in process (Arrow)" in conn.execute(f"EXPLAIN {lookup}").rows[0][0]
    assert conn.execute(lookup).rows == [(5, 1, D("2.00")), (1, 2, D("3.00")),
                                         (1, 2, D("3.00"))]
    assert conn.execute("SELECT count(*), sum(v), avg(n) FROM t WHERE g = 'zz'").rows == [
        (0, None, None)]


@pytest.mark.slow
@pytest.mark.spark
def test_routed_reads_beyond_the_evaluator_run_on_spark(tmp_path: Path) -> None:
    from mzflow.engine.spark import EvaluationError
    from mzflow.projections import route as projections
    from mzflow.read import local_reads

    db = duckdb.connect()
    db.execute("CREATE TABLE t (g text, x double, v int)")
    rows = "('a', 0.5, 1), ('a', 1.5, 2), ('b', 0.5, NULL), (NULL, NULL, 4), ('a', 0.5, 3)"
    db.execute(f"INSERT INTO t VALUES {rows}")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE TABLE t (g text, x double precision, v int, "
                     "PROJECTION by_x (SELECT x, sum(v), count(*) GROUP BY x), "
                     "PROJECTION by_g (SELECT g, sum(v), count(*) GROUP BY g))")
        conn.execute(f"INSERT INTO t VALUES {rows}")
        # Not in process from the table either: what the projection's rows decline is
        # then Spark's (a small table's reads are answered from it in process:
        # tests/test_routed_reads_in_process.py).
        conn.execute("ALTER SYSTEM SET local_read_max_rows = 0")
        # A floating-point key: Arrow groups -0.0 and 0.0, NaNs, apart; SQL does not.
        q = "SELECT x, sum(v), count(*) FROM t GROUP BY x"
        explain = conn.execute(f"EXPLAIN {q}").rows[0][0]
        assert "Projection: by_x (aggregate)" in explain, explain
        assert ("Read: on Spark (a floating-point GROUP BY key; not in process from the "
                "tables: local_read_max_rows = 0)") in explain, explain
        before, table = dict(projections.ENGINE), dict(local_reads.ENGINE)
        routed = conn.execute(q).rows
        assert projections.ENGINE["declined"] == before["declined"] + 1
        assert projections.ENGINE["arrow"] == before["arrow"]
        assert local_reads.ENGINE["spark"] == table["spark"] + 1
        conn.execute("SET optimize_use_projections = false")
        assert _same(routed, conn.execute(q).rows)
        assert _same(routed, db.execute(q).fetchall())
        # A row that fails in process is left to Spark, whose error the read reports.
        conn.execute("SET optimize_use_projections = true")
        bad = "SELECT g, sum(v) / (count(*) - count(*)) FROM t GROUP BY g"
        assert "Read: in process (Arrow)" in conn.execute(f"EXPLAIN {bad}").rows[0][0]
        before = dict(projections.ENGINE)
        with pytest.raises(EvaluationError, match="division by zero"):
            conn.execute(bad)
        assert projections.ENGINE["declined"] == before["declined"] + 1
        conn.execute("SET optimize_use_projections = false")
        with pytest.raises(EvaluationError, match="division by zero"):
            conn.execute(bad)


def test_a_writes_projection_rows_are_computed_ahead_and_named_by_its_file(
        conn: mzflow.Connection) -> None:
    # Not marked spark. An append's projection rows are computed from its rows while
    # the table's own commit runs (issue 16's 1 % INSERT); they must still be stored
    # under the name of the file that commit wrote, or a DELETE that removes that file
    # would leave them behind.
    from deltalake import DeltaTable

    from mzflow.projections import write as projections
    from mzflow.projections.store import PART, part_name
    from mzflow.storage.paths import table as table_path

    conn.execute("CREATE TABLE t (k int, g text, v int, "
                 "PROJECTION agg (SELECT g, sum(v), count(*) GROUP BY g), "
                 "PROJECTION by_k (SELECT k, v ORDER BY k))")
    before = projections.AHEAD[0]
    conn.execute("INSERT INTO t VALUES (3, 'a', 1), (1, 'b', 2), (2, 'a', NULL), (5, NULL, 4)")
    assert projections.AHEAD[0] - before == 2
    snap = conn.store.snapshot()
    files = {part_name(f) for f in DeltaTable(str(table_path(
        conn.config.warehouse, snap.resolve("t").id))).file_uris()}
    assert len(files) == 1
    stored = {p.name: DeltaTable(str(projections.shard_of(conn.config.warehouse, p).path)
                                 ).to_pyarrow_table() for p in snap.projections}
    for rows in stored.values():
        assert set(rows.column(PART).to_pylist()) == files
    assert sorted(stored["agg"].select(["_k0", "_a0", "_a1"]).to_pylist(), key=repr) == sorted([
        {"_k0": "a", "_a0": 1, "_a1": 2}, {"_k0": "b", "_a0": 2, "_a1": 1},
        {"_k0": None, "_a0": 4, "_a1": 1}], key=repr)
    assert stored["by_k"].column("k").to_pylist() == [1, 2, 3, 5]


def _staged_files(conn: mzflow.Connection) -> list[Path]:
    from mzflow.projections.store import STAGING

    return sorted(Path(conn.config.warehouse).rglob(f"{STAGING}/*.parquet"))


def test_a_writes_projection_files_are_staged_during_its_commit_and_then_only_logged(
        conn: mzflow.Connection) -> None:
    # Not marked spark. Once a projection's shard exists, an append writes the
    # projection's file while the table's commit runs, and afterwards commits only a
    # log entry that names the part (issue 16's 1 % INSERT). What delta-rs reads back
    # from that entry must be what the ordinary write would have stored.
    import pyarrow as pa
    from deltalake import DeltaTable

    from mzflow.projections import write as projections
    from mzflow.projections.store import PART, part_name
    from mzflow.storage.paths import table as table_path

    conn.execute("CREATE TABLE t (k int, g text, v int, "
                 "PROJECTION agg (SELECT g, sum(v), count(*) GROUP BY g), "
                 "PROJECTION by_k (SELECT k, v ORDER BY k))")
    conn.execute("INSERT INTO t VALUES (3, 'a', 1)")  # makes the projections' shards
    snap = conn.store.snapshot()
    path = str(table_path(conn.config.warehouse, snap.resolve("t").id))
    before = {part_name(f) for f in DeltaTable(path).file_uris()}
    staged = projections.STAGED[0]
    conn.execute("INSERT INTO t VALUES (9, 'a', 5), (4, 'b', 2), (7, NULL, NULL)")
    assert projections.STAGED[0] - staged == 2
    assert _staged_files(conn) == []  # every staged file was committed
    table = DeltaTable(path)
    (part,) = {part_name(f) for f in table.file_uris()} - before
    for p in snap.projections:
        shard = DeltaTable(str(projections.shard_of(conn.config.warehouse, p).path))
        added = [a for a in pa.table(shard.get_add_actions(flatten=True)).to_pylist()
                 if a[f"partition.{PART}"] == part]
        assert len(added) == 1 and added[0]["path"].startswith(f"{PART}={part}/")
        rows = shard.to_pyarrow_table(filters=[(PART, "=", part)])
        assert added[0]["num_records"] == rows.num_rows
        if p.name == "by_k":
            assert rows.select(["k", "v"]).to_pylist() == [
                {"k": 4, "v": 2}, {"k": 7, "v": None}, {"k": 9, "v": 5}]
            assert (added[0]["min.k"], added[0]["max.k"]) == (4, 9)
        else:
            assert sorted(rows.select(["_k0", "_a0", "_a1"]).to_pylist(), key=repr) == sorted(
                [{"_k0": "a", "_a0": 5, "_a1": 1}, {"_k0": "b", "_a0": 2, "_a1": 1},
                 {"_k0": None, "_a0": None, "_a1": 1}], key=repr)
    # A retry of the same store (same commit id) is refused and leaves no staged file.
    shard = projections.shard_of(conn.config.warehouse, snap.projections[0])
    extra = shard.stage(DeltaTable(str(shard.path)).to_pyarrow_table())
    assert extra is not None and extra.path.exists()
    version = int(table.version())
    assert not shard.add_staged(extra, part, (f"proj-{snap.projections[0].id}", version),
                                {"operation": "retry"})
    assert not extra.path.exists()
    assert conn.execute("SELECT g, sum(v), count(*) FROM t GROUP BY g ORDER BY g").rows == [
        ("a", 6, 2), ("b", 2, 1), (None, None, 1)]
    assert conn.execute("SELECT v FROM t WHERE k = 9").rows == [(5,)]


def _fail_table_commit(monkeypatch: pytest.MonkeyPatch) -> type[Exception]:
    from mzflow.storage.delta import Shard, StorageError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("could not write shard: disk full (injected)")

    monkeypatch.setattr(Shard, "append", broken)
    return StorageError


def _fail_catalog_commit(monkeypatch: pytest.MonkeyPatch) -> type[Exception]:
    from mzflow.catalog.store import Writer
    from mzflow.errors import CatalogError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise CatalogError("the catalog could not be written: disk I/O error (injected)")

    monkeypatch.setattr(Writer, "committed", broken)
    return CatalogError


# (how the write fails, the rows it leaves: a table commit whose catalog commit failed
# is adopted by the next write, and readers project its part on the fly)
@pytest.mark.parametrize("fail, kept", [
    (_fail_table_commit, [(1, 1), (4, 4)]),
    (_fail_catalog_commit, [(1, 1), (2, 2), (3, 3), (4, 4)]),
], ids=["table commit", "catalog commit after the table's"])
def test_a_write_that_fails_after_staging_leaves_no_staged_file(
        conn: mzflow.Connection, monkeypatch: pytest.MonkeyPatch,
        fail: Callable[[pytest.MonkeyPatch], type[Exception]],
        kept: list[tuple[int, int]]) -> None:
    # Not marked spark. The files staged for the projections belong to no stored part
    # once the write failed: they must go now, not after compaction's hour.
    from mzflow.projections.store import ProjectionShard, Staged

    conn.execute("CREATE TABLE t (k int, v int, PROJECTION by_k (SELECT k, v ORDER BY k))")
    conn.execute("INSERT INTO t VALUES (1, 1)")
    stage = ProjectionShard.stage
    made: list[Staged] = []

    def staging(self: ProjectionShard, *args: Any, **kwargs: Any) -> Staged | None:
        out = stage(self, *args, **kwargs)
        made.append(out) if out is not None else None
        return out

    monkeypatch.setattr(ProjectionShard, "stage", staging)
    error = fail(monkeypatch)
    with pytest.raises(error):
        conn.execute("INSERT INTO t VALUES (2, 2), (3, 3)")
    monkeypatch.undo()
    assert len(made) == 1  # the file was staged, then deleted
    assert not made[0].path.exists() and _staged_files(conn) == []
    conn.execute("INSERT INTO t VALUES (4, 4)")
    assert conn.execute("SELECT k, v FROM t WHERE k IN (1, 2, 3, 4) ORDER BY k").rows == kept


def test_compaction_vacuums_projection_shards_and_their_stale_staged_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not marked spark. A projection shard gains a file and a log entry per write, and
    # CLEAR only removes files from the log: compaction must delete them from disk (after
    # the readers' grace, the table's history: none here) and checkpoint the log, and
    # delete staged files their writer never committed (after an hour: 0 s here).
    import time

    from mzflow.projections import manage as projections
    from mzflow.projections import store as storage

    monkeypatch.setattr(storage, "STAGED_MAX_AGE_S", 0.0)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET retain_history = '1s'")
        conn.execute("CREATE TABLE t (k int, v int, PROJECTION by_k (SELECT k, v ORDER BY k))")
        for i in range(3):
            conn.execute(f"INSERT INTO t VALUES ({i}, {i})")
        snap = conn.store.snapshot()
        pshard = projections.shard_of(conn.config.warehouse, snap.projections[0])
        files_before = sorted(pshard.path.glob(f"{storage.PART}=*/*.parquet"))
        assert len(files_before) == 3
        conn.execute("ALTER TABLE t CLEAR PROJECTION by_k")
        orphan = pshard.path / storage.STAGING / "part-00000-dead-c000.snappy.parquet"
        orphan.write_bytes(b"a writer killed before its commit")
        os.utime(orphan, (time.time() - 10, time.time() - 10))
        conn.compact("t")
        assert not orphan.exists()
        assert not any(f.exists() for f in files_before)
        assert not any(f.parent.exists() for f in files_before)  # nor their part folders
        assert list((pshard.path / "_delta_log").glob("*.checkpoint.parquet"))
        # compaction's MATERIALIZE built the merged part again: reads route to it
        assert len(pshard.parts()) == 1
        assert conn.execute("SELECT v FROM t WHERE k = 2").rows == [(2,)]
        assert conn.execute("SELECT k FROM t WHERE k IN (0, 1, 2, 3) ORDER BY k").rows == [
            (0,), (1,), (2,)]
