"""What a tick costs, counted (never timed): Spark jobs per tick are recorded in the
report and the commit, and a tick's bookkeeping reads of the Delta log do not grow with
the number of ticks before it."""

from __future__ import annotations

from pathlib import Path

import pytest

import mzflow
from mzflow.incremental.decide import JOBS_KEY
from mzflow.maintain import ticks
from mzflow.storage import delta

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_spark_jobs_are_counted_and_recorded(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("ALTER SYSTEM SET tick_executor = 'spark'")
        conn.execute("CREATE CLUSTER c; CREATE TABLE t (a int, b int); "
                     "CREATE MATERIALIZED VIEW m IN CLUSTER c AS "
                     "SELECT a, count(*) AS n, sum(b) AS s FROM t GROUP BY a")
        conn.execute("INSERT INTO t VALUES (1, 2), (2, 3)")
        conn.tick(cluster="c")
        conn.execute("INSERT INTO t VALUES (1, 5)")
        (report,) = conn.tick(cluster="c")
        assert "mode state" in report.strategy
        # one job sums the batch per group; the rest runs on local rows (issue 15: ≤ 1)
        assert report.spark_jobs == 1, report.line()
        assert f"{report.spark_jobs} Spark jobs" in report.line()
        index = next(i for i in conn.store.snapshot().items if i.kind == "index")
        newest = ticks.index_shard(conn.config.warehouse, index).ticks(1)[0]
        assert int(newest[JOBS_KEY]) == report.spark_jobs
        # Nothing to do: no Spark job at all.
        (idle,) = conn.tick(cluster="c")
        assert idle.spark_jobs == 0
        # In process (the default for a small batch): no Spark job either.
        conn.execute("ALTER SYSTEM SET tick_executor = 'auto'")
        conn.execute("INSERT INTO t VALUES (3, 1)")
        (local,) = conn.tick(cluster="c")
        assert (local.executor or "").startswith("local") and local.spark_jobs == 0, (
            local.line())
        print(f"state-mode tick of a one-table GROUP BY: {report.spark_jobs} Spark jobs")


def test_bookkeeping_reads_stay_flat_over_many_ticks(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        # The cost switch reads this many of the newest tick commits: bounded by the
        # setting, not by the number of ticks.
        conn.execute("ALTER SYSTEM SET history_ticks = 4")
        conn.execute("CREATE CLUSTER c; CREATE TABLE t (a int, b int); "
                     "CREATE TABLE s (a int, name text); "
                     "INSERT INTO s VALUES (0, 'zero'), (1, 'one'), (2, 'two');"
                     "CREATE MATERIALIZED VIEW m IN CLUSTER c AS "
                     "SELECT a, count(*) AS n FROM t GROUP BY a;"
                     # a join: its tick maintains and reads arrangements too
                     "CREATE MATERIALIZED VIEW j IN CLUSTER c AS "
                     "SELECT s.name, count(*) AS n FROM t JOIN s ON t.a = s.a GROUP BY s.name")
        reads = []
        for i in range(50):
            conn.execute(f"INSERT INTO t VALUES ({i % 3}, {i})")
            before = delta.LOG_ENTRIES_READ[0]
            conn.tick(cluster="c")
            reads.append(delta.LOG_ENTRIES_READ[0] - before)
        assert conn.execute("SET cluster = c; SELECT * FROM m ORDER BY a").rows == [
            (0, 17), (1, 17), (2, 16)]
        assert conn.execute("SELECT * FROM j ORDER BY name").rows == [
            ("one", 17), ("two", 16), ("zero", 17)]
        assert len(conn.execute("SELECT id FROM mz_arrangements").rows) == 2
    print(f"log entries read per tick: {reads}")
    assert reads[10] == reads[49], reads
    assert max(reads[10:]) <= max(reads[:10]), reads
