"""The in-process executor (incremental/local/) against Spark's, batch by batch.

Two homes get the same random batches: one ticks on Spark (tick_executor = 'spark'),
the other in process ('local'). After every tick both views equal DuckDB's answer,
and both indexes hold the same rows under the same row keys and counts: one row key
on both paths, or the second executor's tick would rewrite every row.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mzflow
from mzflow.maintain.ticks import index_shard

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SETUP = ("CREATE TABLE t (a int, b int, c text, d numeric(10,2));"
         "CREATE TABLE u (a int, e int, f date)")
VIEWS = {
    # state mode over a join: COUNT, SUM, AVG, MIN, MAX merged into partials
    "agg": "SELECT u.e, count(*) AS n, sum(t.d) AS s, avg(t.b) AS m, min(t.c) AS lo, "
           "max(t.d) AS hi FROM t JOIN u ON t.a = u.a GROUP BY u.e",
    # delta mode: a join with a filter and computed columns
    "rows": "SELECT t.a, t.b * 2 AS b2, u.f, t.c || '!' AS c FROM t JOIN u ON t.a = u.a "
            "WHERE t.b IS NOT NULL AND u.e > -2",
    # a global top-k over a GROUP BY (its candidates re-ranked in process); a is unique
    # per group, so the order has no ties and both executors keep the same rows
    "top": "SELECT t.a, sum(t.b) AS s FROM t GROUP BY t.a ORDER BY s DESC NULLS LAST, a "
           "LIMIT 2",
    # a GROUP BY inside the plan (affected groups recomputed) under a join
    "nested": "SELECT u.a, u.e, x.n FROM u JOIN (SELECT a, count(*) AS n FROM t GROUP BY a) "
              "x ON u.a = x.a",
}

small = st.integers(min_value=-3, max_value=3)
text = st.sampled_from(["x", "y", "", "O'Brien", "é"])
money = st.decimals(min_value=-99, max_value=99, places=2)
t_rows = st.lists(st.tuples(small, st.one_of(st.none(), small), st.one_of(st.none(), text),
                            money), max_size=6)
u_rows = st.lists(st.tuples(small, small, st.dates().filter(lambda d: d.year > 1900)),
                  max_size=3)


def _sql(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if hasattr(v, "isoformat"):
        return f"DATE '{v.isoformat()}'"
    return str(v)


def _insert(table: str, rows: list[tuple]) -> str:
    return f"INSERT INTO {table} VALUES " + ", ".join(
        "(" + ", ".join(_sql(v) for v in r) + ")" for r in rows)


def _index_rows(conn: mzflow.Connection, view: str) -> Counter:
    snap = conn.store.snapshot()
    (index,) = snap.indexes_on(snap.resolve(view).id)
    shard = index_shard(conn.config.warehouse, index)
    table = shard.read(shard.version())
    return Counter(zip(table.column("_mz_key").to_pylist(), table.column("_mz_count").to_pylist(),
                       strict=True))


def _normal(rows: list[tuple]) -> Counter:
    return Counter(tuple(round(float(v), 6) if isinstance(v, int | float | Decimal)
                         and not isinstance(v, bool) else v for v in r) for r in rows)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate], print_blob=True)
@given(batches=st.lists(st.tuples(t_rows, u_rows, small), min_size=2, max_size=3))
def test_both_executors_agree_with_each_other_and_with_duckdb(
        tmp_path_factory: pytest.TempPathFactory, batches: list) -> None:
    root = tmp_path_factory.mktemp("executors")
    db = duckdb.connect()
    db.execute(SETUP.replace("text", "varchar"))
    conns = {}
    for executor in ("spark", "local"):
        conn = conns[executor] = mzflow.connect(str(root / executor))
        conn.execute(f"ALTER SYSTEM SET tick_executor = '{executor}'")
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")  # tiny tables: no switch
        conn.execute("CREATE CLUSTER c")
        conn.execute(SETUP)
        for name, sql in VIEWS.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER c AS {sql}")
        conn.tick(cluster="c")
    try:
        for step, (ins_t, ins_u, cut) in enumerate(batches):
            writes = [_insert("t", ins_t)] if ins_t else []
            writes += [_insert("u", ins_u)] if ins_u else []
            writes += [f"DELETE FROM t WHERE b = {cut}", f"DELETE FROM u WHERE e = {cut + 1}"]
            for w in writes:
                db.execute(w)
                for conn in conns.values():
                    conn.execute(w)
            for executor, conn in conns.items():
                for report in conn.tick(cluster="c"):
                    assert report.error is None, report.line()
                    if (executor == "local" and report.strategy.startswith("incremental")
                            and report.upper_after > report.upper_before):
                        assert (report.executor or "").startswith("local"), report.line()
            for name, sql in VIEWS.items():
                want = _normal(db.execute(sql).fetchall())
                for executor, conn in conns.items():
                    got = conn.execute(f"SET cluster = c; SELECT * FROM {name}").rows
                    conn.execute("SET cluster = default")
                    assert _normal(got) == want, (executor, name, step)
                assert _index_rows(conns["spark"], name) == _index_rows(conns["local"], name), (
                    name, step)
    finally:
        for conn in conns.values():
            conn.close()


def test_an_expression_the_process_cannot_evaluate_runs_on_spark(tmp_path: Path) -> None:
    """The capability check is the evaluator itself: a function only Spark's path has
    sends the tick to Spark, with the reason in its line, and later ticks straight there."""
    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("ALTER SYSTEM SET tick_executor = 'local'")
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("CREATE CLUSTER c")
        conn.execute("CREATE TABLE t (a int, s text)")
        conn.execute("INSERT INTO t VALUES (1, 'a b')")
        conn.execute("CREATE MATERIALIZED VIEW v IN CLUSTER c AS "
                     "SELECT a, translate(s, 'ac', 'xy') AS w FROM t")
        conn.tick(cluster="c")
        reasons = []
        for i in range(2):
            conn.execute(f"INSERT INTO t VALUES ({i + 2}, 'c d')")
            (report,) = conn.tick(cluster="c")
            reasons.append(report.executor or "")
        got = sorted(conn.execute("SET cluster = c; SELECT * FROM v").rows)
    assert got == [(1, "x b"), (2, "y d"), (3, "y d")]
    assert all(r.startswith("spark (in process: ") and "translate" in r for r in reasons), (
        reasons)


def test_a_large_batch_runs_on_spark_and_a_small_one_in_process(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("ALTER SYSTEM SET local_tick_rows = 5")
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("CREATE CLUSTER c")
        conn.execute("CREATE TABLE t (a int, b int)")
        conn.execute("INSERT INTO t VALUES (1, 1)")
        conn.execute("CREATE MATERIALIZED VIEW v IN CLUSTER c AS "
                     "SELECT a, sum(b) AS s FROM t GROUP BY a")
        conn.tick(cluster="c")
        conn.execute("INSERT INTO t VALUES (1, 2), (2, 3)")
        (small_tick,) = conn.tick(cluster="c")
        conn.execute("INSERT INTO t SELECT x % 3, x FROM generate_series(1, 20) AS x")
        (large_tick,) = conn.tick(cluster="c")
        got = dict(conn.execute("SET cluster = c; SELECT * FROM v").rows)
    assert (small_tick.executor or "").startswith("local (batch of 2 rows)"), small_tick.line()
    assert (large_tick.executor or "").startswith("spark (batch of 20 rows > local_tick_rows 5)"), (
        large_tick.line())
    assert "executor local" in small_tick.line()
    want = {1: 1 + 2 + sum(x for x in range(1, 21) if x % 3 == 1),
            2: 3 + sum(x for x in range(1, 21) if x % 3 == 2),
            0: sum(x for x in range(1, 21) if x % 3 == 0)}
    assert got == want


def test_a_top_k_whose_candidates_run_out_ranks_every_group_in_process(tmp_path: Path
                                                                       ) -> None:
    """A batch that changes every kept candidate (a large one, in practice) leaves the
    top-k nothing to rank from: the process ranks every group of the state it holds,
    as Spark ranks its scan of the state, instead of sending the tick to Spark."""
    db = duckdb.connect()
    view = ("SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, a LIMIT 2")
    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("ALTER SYSTEM SET tick_executor = 'local'")
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("ALTER SYSTEM SET topk_margin = 1")  # 3 candidates kept
        conn.execute("CREATE CLUSTER c")
        for target in (conn, db):
            target.execute("CREATE TABLE t (a int, b int)")
            target.execute("INSERT INTO t SELECT x % 10, x FROM generate_series(1, 100) AS x")
        conn.execute(f"CREATE MATERIALIZED VIEW v IN CLUSTER c AS {view}")
        conn.tick(cluster="c")
        executors = []
        # every group the candidates hold loses most of its rows, so groups outside
        # them (which only the state knows) rank first
        for cut in ("a >= 7", "a IN (4, 5, 6)"):
            for target in (conn, db):
                target.execute(f"DELETE FROM t WHERE {cut} AND b > 10")
            (report,) = conn.tick(cluster="c")
            assert report.error is None, report.line()
            executors.append(report.executor or "")
            got = conn.execute("SET cluster = c; SELECT * FROM v").rows
            assert sorted(got) == sorted(db.execute(view).fetchall()), cut
    assert all(e.startswith("local") for e in executors), executors


def test_a_first_tick_rebuilds_in_process_as_spark_does(tmp_path: Path) -> None:
    """A GROUP BY view's first tick builds its state from whole inputs: in process when
    they fit local_rebuild_rows, else on Spark. Both give DuckDB's answer and the same
    index rows under the same row keys, and the next (incremental) tick goes on from
    either state."""
    views = {"g": "SELECT u.e, count(*) AS n, sum(t.d) AS s, min(t.c) AS lo FROM t "
                  "JOIN u ON t.a = u.a GROUP BY u.e",
             "top": "SELECT t.a, sum(t.b) AS s FROM t GROUP BY t.a ORDER BY s DESC, a LIMIT 2"}
    seed = ["INSERT INTO t SELECT x % 9, x, 'c' || (x % 4), (x % 50) * 0.25 FROM "
            "generate_series(1, 300) AS x",
            "INSERT INTO u SELECT x, x % 3, DATE '2024-01-01' FROM generate_series(0, 8) AS x"]
    batch = "INSERT INTO t VALUES (1, 500, 'z', 1.5), (4, -3, NULL, 2)"
    db = duckdb.connect()
    db.execute(SETUP.replace("text", "varchar"))
    for w in [*seed, batch]:
        db.execute(w)
    want = {name: _normal(db.execute(sql).fetchall()) for name, sql in views.items()}
    executors, rows = {}, {}
    cases = {10_000: "local_rebuild_rows = 10000", 0: "local_rebuild_rows = 0",
             -1: "hot_memory_share = 0.000000001"}  # -1: over the memory budget
    for limit, setting in cases.items():
        with mzflow.connect(str(tmp_path / str(limit))) as conn:
            conn.execute(f"ALTER SYSTEM SET {setting}")
            conn.execute("CREATE CLUSTER c")
            conn.execute(SETUP)
            for w in seed:
                conn.execute(w)
            for name, sql in views.items():
                conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER c AS {sql}")
            executors[limit] = [r.executor or "" for r in conn.tick(cluster="c")]
            conn.execute(batch)
            assert all(r.error is None for r in conn.tick(cluster="c"))
            for name in views:
                got = conn.execute(f"SET cluster = c; SELECT * FROM {name}").rows
                conn.execute("SET cluster = default")
                assert _normal(got) == want[name], (limit, name)
                rows[(limit, name)] = _index_rows(conn, name)
    assert all(e.startswith("local (a state rebuild of ") for e in executors[10_000]), (
        executors)
    assert all(e.startswith("spark (reads every input row") for e in executors[0]), executors
    assert all("does not fit the cluster's memory budget" in e for e in executors[-1]), (
        executors)
    for name in views:
        assert rows[(10_000, name)] == rows[(0, name)] == rows[(-1, name)], name


def test_a_refused_in_process_tick_decides_again_as_for_spark(tmp_path: Path) -> None:
    """A join's batch of a tenth of its inputs stays incremental in process, but is a
    recompute on Spark (join_recompute_share 0.01): when the process refuses the tick
    (here an expression it cannot evaluate), the tick recomputes instead of running a
    delta join of that size on Spark, and says why."""
    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("CREATE CLUSTER c")
        conn.execute("CREATE TABLE t (a int, s text)")
        conn.execute("CREATE TABLE u (a int, e int)")
        conn.execute("INSERT INTO t SELECT x, 'ab' FROM generate_series(1, 200) AS x")
        conn.execute("INSERT INTO u SELECT x, x % 7 FROM generate_series(1, 200) AS x")
        conn.execute("CREATE MATERIALIZED VIEW v IN CLUSTER c AS SELECT t.a, "
                     "translate(t.s, 'a', 'x') AS w, u.e FROM t JOIN u ON t.a = u.a")
        conn.tick(cluster="c")
        conn.execute("INSERT INTO t SELECT x, 'ba' FROM generate_series(201, 240) AS x")
        conn.execute("INSERT INTO u SELECT x, 1 FROM generate_series(201, 240) AS x")
        (report,) = conn.tick(cluster="c")
        got = conn.execute("SET cluster = c; SELECT count(*), count(*) FILTER "
                           "(WHERE w = 'bx') FROM v").rows
    assert report.strategy.startswith("recompute") and "R010" in report.strategy, (
        report.line())
    assert "[in process: " in report.strategy and "translate" in report.strategy, (
        report.line())
    assert got == [(240, 40)]


_KILLER = """
import os, signal, sys
import mzflow
point = sys.argv[2]

def dying(module, name):
    original = getattr(module, name)
    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return out
    setattr(module, name, wrapped)

if point == "hydration":
    from mzflow.maintain import hot
    dying(hot, "hydrate")
elif point == "local tick":
    from mzflow.incremental.local import state
    dying(state, "run")
elif point == "state commit":
    from mzflow.incremental.rules.reduce_state import KeptState
    dying(KeptState, "commit")
else:
    from mzflow.maintain.tick import commit
    dying(commit, "commit")
conn = mzflow.connect(sys.argv[1])
conn.tick(cluster="c")
"""
KILLED_VIEW = ("SELECT u.e, count(*) AS n, sum(t.b) AS s FROM t JOIN u ON t.a = u.a "
               "GROUP BY u.e")


@pytest.mark.parametrize("point", ["hydration", "local tick", "state commit", "index commit"])
def test_a_local_tick_killed_anywhere_loses_and_duplicates_nothing(
        tmp_path: Path, point: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    db = duckdb.connect()
    db.execute("CREATE TABLE t (a int, b int); CREATE TABLE u (a int, e int)")
    first = ["INSERT INTO t SELECT x % 10, x FROM generate_series(1, 200) AS x",
             "INSERT INTO u SELECT x, x % 3 FROM generate_series(0, 9) AS x"]
    batch = ["INSERT INTO t VALUES (1, 1000), (2, 2000)", "DELETE FROM t WHERE b < 5",
             "DELETE FROM u WHERE a = 7"]
    with mzflow.connect(str(tmp_path / "h")) as conn:
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("CREATE CLUSTER c; CREATE TABLE t (a int, b int); "
                     "CREATE TABLE u (a int, e int)")
        for w in first:
            conn.execute(w)
            db.execute(w)
        conn.execute(f"CREATE MATERIALIZED VIEW v IN CLUSTER c AS {KILLED_VIEW}")
        conn.tick(cluster="c")
        for w in batch:
            conn.execute(w)
            db.execute(w)
        child = subprocess.run([sys.executable, "-c", _KILLER, str(conn.config.home), point],
                               env={**os.environ}, capture_output=True, timeout=600)
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
        (report,) = conn.tick(cluster="c")  # this process: hydrates its own, ticks again
        assert report.error is None, report.line()
        if point != "index commit":
            assert (report.executor or "").startswith("local"), report.line()
        got = conn.execute("SET cluster = c; SELECT * FROM v").rows
        conn.execute("SET cluster = default")
        assert _normal(got) == _normal(db.execute(KILLED_VIEW).fetchall())
        conn.execute("INSERT INTO t VALUES (8, 8)")
        db.execute("INSERT INTO t VALUES (8, 8)")
        (again,) = conn.tick(cluster="c")
        got = conn.execute("SET cluster = c; SELECT * FROM v").rows
        assert _normal(got) == _normal(db.execute(KILLED_VIEW).fetchall()), again.line()
