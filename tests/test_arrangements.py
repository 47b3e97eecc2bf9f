"""Arrangements through the real parts: a Q3-shaped join view's tick reads in
proportion to its change (counted, at two table sizes 10× apart) in few Spark jobs;
arrangements are shared, listed in mz_arrangements, named by EXPLAIN, dropped with
their last user; a tick killed right after an arrangement commit completes exactly.
Every result is checked against DuckDB."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import mzflow

pytestmark = [pytest.mark.slow, pytest.mark.spark]

Q3 = ("SELECT l_orderkey, sum(l_price) AS revenue, o_day FROM customer, orders, lineitem "
      "WHERE c_seg = 'B' AND c_custkey = o_custkey AND l_orderkey = o_orderkey "
      "AND o_day < 700 AND l_ship > 100 GROUP BY l_orderkey, o_day")
TABLES = {"customer": "c_custkey int, c_seg text",
          "orders": "o_orderkey int, o_custkey int, o_day int",
          "lineitem": "l_orderkey int, l_price bigint, l_ship int"}
PER_ORDER = 3


class Shop:
    """TPC-H's shape in miniature, in mzflow and DuckDB alike; batches insert the
    newest orders and delete the oldest (the refresh functions' bimodal keys)."""

    def __init__(self, conn: mzflow.Connection, scratch: Path, orders: int, seed: int):
        self.conn, self.scratch, self.rng = conn, scratch, random.Random(seed)
        self.db = duckdb.connect()
        self.customers = max(10, orders // 10)
        self.oldest, self.next = 0, orders
        for name, cols in TABLES.items():
            conn.execute(f"CREATE TABLE {name} ({cols})")
            self.db.execute(f"CREATE TABLE {name} ({cols.replace('text', 'varchar')})")
        self._copy("customer", pa.table({
            "c_custkey": pa.array(range(self.customers), pa.int32()),
            "c_seg": [self.rng.choice("AB") for _ in range(self.customers)]}))
        self._insert(0, orders)

    def _copy(self, name: str, rows: pa.Table) -> None:
        path = self.scratch / f"{name}-{self.next}-{self.rng.random()}.parquet"
        pq.write_table(rows, path)
        self.conn.execute(f"COPY {name} FROM '{path}' WITH (FORMAT parquet)")
        self.db.register("batch_rows", rows)
        self.db.execute(f"INSERT INTO {name} SELECT * FROM batch_rows")
        self.db.unregister("batch_rows")

    def _insert(self, first: int, n: int) -> None:
        keys = list(range(first, first + n))
        self._copy("orders", pa.table({
            "o_orderkey": pa.array(keys, pa.int32()),
            "o_custkey": pa.array([self.rng.randrange(self.customers) for _ in keys],
                                  pa.int32()),
            "o_day": pa.array([self.rng.randrange(1000) for _ in keys], pa.int32())}))
        lines = [k for k in keys for _ in range(PER_ORDER)]
        self._copy("lineitem", pa.table({
            "l_orderkey": pa.array(lines, pa.int32()),
            "l_price": pa.array([self.rng.randrange(1, 10_000) for _ in lines], pa.int64()),
            "l_ship": pa.array([self.rng.randrange(1000) for _ in lines], pa.int32())}))

    def batch(self, n: int) -> int:
        """Insert n new orders, delete the n oldest: the rows changed."""
        self._insert(self.next, n)
        self.next += n
        self.oldest += n
        for sql in (f"DELETE FROM lineitem WHERE l_orderkey < {self.oldest}",
                    f"DELETE FROM orders WHERE o_orderkey < {self.oldest}"):
            self.conn.execute(sql)
            self.db.execute(sql)
        return 2 * n * (1 + PER_ORDER)

    def check(self, view: str, sql: str) -> None:
        got = self.conn.execute(f"SET cluster = c; SELECT * FROM {view}").rows
        self.conn.execute("SET cluster = default")
        assert Counter(got) == Counter(self.db.execute(sql).fetchall())


def _home(tmp_path: Path, name: str) -> mzflow.Connection:
    conn = mzflow.connect(str(tmp_path / name))
    conn.execute("ALTER SYSTEM SET recompute_share = 1000")
    # These tests are of the Delta-backed arrangements (what a process that cannot hold
    # them in memory uses); tests/test_hot_arrangements.py has the in-memory ones.
    conn.execute("ALTER SYSTEM SET hot_arrangements = 0")
    conn.execute("CREATE CLUSTER c")
    return conn


@contextmanager
def _q3_shop(tmp_path: Path, orders: int, seed: int
             ) -> Iterator[tuple[mzflow.Connection, Shop]]:
    """A home with a Shop of ``orders`` orders and the Q3 view in cluster c, hydrated."""
    (tmp_path / "s").mkdir()
    with _home(tmp_path, "h") as conn:
        shop = Shop(conn, tmp_path / "s", orders, seed=seed)
        conn.execute(f"CREATE MATERIALIZED VIEW q3 IN CLUSTER c AS {Q3}")
        conn.tick(cluster="c")
        yield conn, shop


def test_a_join_tick_reads_in_proportion_to_its_change(tmp_path: Path) -> None:
    n = 10
    seen = []
    for orders in (1_000, 10_000):
        (tmp_path / f"s{orders}").mkdir()
        with _home(tmp_path, f"h{orders}") as conn:
            # Row groups of 4 rows: a lookup of k keys reads at most 4k rows, so the
            # bound below holds for keys spread anywhere in the table.
            conn.execute("ALTER SYSTEM SET arrangement_group_rows = 4")
            shop = Shop(conn, tmp_path / f"s{orders}", orders, seed=orders)
            conn.execute(f"CREATE MATERIALIZED VIEW q3 IN CLUSTER c AS {Q3}")
            conn.tick(cluster="c")
            changed = shop.batch(n)
            (report,) = conn.tick(cluster="c")
            shop.check("q3", Q3)
            affected = 2 * n  # the groups (orders) the batch touches, at most
            assert "mode state" in report.strategy, report.strategy
            assert report.rows_read <= 5 * (changed + affected), report.line()
            assert report.spark_jobs is not None and report.spark_jobs <= 3, report.line()
            arranged = conn.execute(
                "SELECT id, key, rows, records_read_last_tick FROM mz_arrangements "
                "ORDER BY id").rows
            assert sorted(k for _, k, _, _ in arranged) == [
                "c_custkey", "l_orderkey", "o_custkey", "o_orderkey"], arranged
            assert all(rows is not None and rows > 0 for _, _, rows, _ in arranged), arranged
            seen.append((orders, report.rows_read, report.spark_jobs))
    print(f"(orders, rows read, Spark jobs) per tick of a {n}-order batch: {seen}")
    # 10x the table: the same batch reads about as much
    assert seen[1][1] <= 1.5 * seen[0][1] + 50, seen


def test_explain_and_show_name_the_arrangements(tmp_path: Path) -> None:
    with _home(tmp_path, "h") as conn:
        conn.execute("CREATE TABLE t (a int, b int); CREATE TABLE u (a int, c int);"
                     "CREATE MATERIALIZED VIEW j IN CLUSTER c AS "
                     "SELECT t.b, u.c FROM t JOIN u ON t.a = u.a;"
                     "CREATE INDEX u_c IN CLUSTER c ON u (c)")
        plan = conn.execute("EXPLAIN MATERIALIZED VIEW j").rows[0][0]
        assert "arrangement" in plan and "t (a)" in plan and "u (a)" in plan, plan
        shown = conn.execute("SHOW INDEXES IN CLUSTER c").rows
        names = [r[2] for r in shown]
        assert "u_c" in names and any("arrangement" in n for n in names), shown
        ids = [r[0] for r in conn.execute("SELECT id FROM mz_arrangements").rows]
        assert len(ids) == 3, ids  # t.a, u.a and the index's u.c
        conn.execute("INSERT INTO u VALUES (1, 10), (2, 20)")
        conn.tick(cluster="c")  # a first tick recomputes: nothing to look up yet
        conn.execute("INSERT INTO u VALUES (3, 30)")
        conn.tick(cluster="c")
        rows = dict(conn.execute("SELECT key, rows FROM mz_arrangements").rows)
        # the index's arrangement is kept by the index's own ticks: 2 rows, then 1 more
        assert rows["c"] == 3 and rows["a"] is not None, rows


_CHILD = """
import os, signal, sys
import mzflow
from mzflow.storage.arrangement import ArrangementShard
original = ArrangementShard.add_batch
def add_then_die(self, rows, start, upto, ts, **kw):
    original(self, rows, start, upto, ts, **kw)
    if start >= 0:  # a catch-up batch is committed: die before the index commit
        os.kill(os.getpid(), signal.SIGKILL)
ArrangementShard.add_batch = add_then_die
conn = mzflow.connect(sys.argv[1])
conn.tick(cluster="c")
"""


def test_a_tick_killed_after_an_arrangement_commit_completes_exactly(tmp_path: Path) -> None:
    with _q3_shop(tmp_path, 300, seed=5) as (conn, shop):
        shop.batch(7)
        index = next(i for i in conn.store.snapshot().items if i.kind == "index")
        from mzflow.maintain.ticks import index_shard
        before = index_shard(conn.config.warehouse, index).version()
        child = subprocess.run([sys.executable, "-c", _CHILD, str(conn.config.home)],
                               env={**os.environ}, capture_output=True, timeout=600)
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
        assert index_shard(conn.config.warehouse, index).version() == before
        # The next tick reuses the committed batch and completes; one more is a no-op.
        (report,) = conn.tick(cluster="c")
        assert report.error is None and report.version_after == before + 1
        shop.check("q3", Q3)
        conn.tick(cluster="c")
        shop.check("q3", Q3)


V1 = "SELECT t.a, t.b, u.c FROM t JOIN u ON t.a = u.a"
V2 = "SELECT u.c, count(*) AS n, sum(t.b) AS s FROM t JOIN u ON t.a = u.a GROUP BY u.c"
small = st.integers(min_value=-3, max_value=3)
rows_t = st.lists(st.tuples(st.one_of(st.none(), small), small), max_size=8)


def _values(rows: list[tuple[int | None, int]]) -> str:
    return ", ".join(f"({'NULL' if a is None else a}, {b})" for a, b in rows)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate], print_blob=True)
@given(batches=st.lists(st.tuples(rows_t, rows_t, small), min_size=3, max_size=4))
# make test found it: an in-process tick looks rows up without their row id, and the
# Delta-backed lookup collapsed equal rows of several batches into one.
@example(batches=[
    ([(-3, -2), (1, 2), (None, -2), (None, 2)],
     [(None, 1), (None, 0), (None, -3), (-2, 0), (None, -1)], -1),
    ([], [(1, 1), (1, 3), (1, -1), (None, 3), (2, 0), (None, 1), (-3, 0), (-3, 0)], 3),
    ([(-1, -3), (0, -1), (None, 2), (None, -2), (-2, 1), (None, 2), (0, -2), (None, 2)],
     [(3, -1), (None, 2)], -3),
    ([(None, 1), (None, -3), (None, -2), (None, 2), (None, 2), (None, 0), (None, 3), (1, 2)],
     [(None, 3), (-2, 0), (None, -3), (1, 3), (-3, 1), (2, -1), (None, 0), (-1, 0)], -2)])
def test_two_views_share_an_arrangement_until_both_are_dropped(
        tmp_path_factory: pytest.TempPathFactory, batches: list) -> None:
    home = tmp_path_factory.mktemp("shared")
    db = duckdb.connect()
    db.execute("CREATE TABLE t (a int, b int); CREATE TABLE u (a int, c int)")
    with _home(home, "h") as conn:
        conn.execute("CREATE TABLE t (a int, b int); CREATE TABLE u (a int, c int);"
                     f"CREATE MATERIALIZED VIEW v1 IN CLUSTER c AS {V1};"
                     f"CREATE MATERIALIZED VIEW v2 IN CLUSTER c AS {V2}")
        live = ["v1", "v2"]
        for step, (ins_t, ins_u, cut) in enumerate(batches):
            for name, rows in (("t", ins_t), ("u", ins_u)):
                if rows:
                    conn.execute(f"INSERT INTO {name} VALUES {_values(rows)}")
                    db.execute(f"INSERT INTO {name} VALUES {_values(rows)}")
            conn.execute(f"DELETE FROM t WHERE b = {cut}")
            db.execute(f"DELETE FROM t WHERE b = {cut}")
            conn.tick(cluster="c")
            for view, sql in (("v1", V1), ("v2", V2)):
                if view in live:
                    got = conn.execute(f"SET cluster = c; SELECT * FROM {view}").rows
                    conn.execute("SET cluster = default")
                    assert Counter(got) == Counter(db.execute(sql).fetchall()), (view, step)
            ids = sorted(r[0] for r in conn.execute("SELECT id FROM mz_arrangements").rows)
            assert len(ids) == 2, ids  # t (a) and u (a), shared by both views
            if step == 1:
                conn.execute("DROP MATERIALIZED VIEW v1")
                live.remove("v1")
        root = conn.config.warehouse / "arrangements"
        assert any(root.rglob("_delta_log"))
        conn.execute("DROP MATERIALIZED VIEW v2")
        assert conn.execute("SELECT id FROM mz_arrangements").rows == []
        assert not any(root.rglob("_delta_log"))


def test_an_arrangement_whose_table_history_is_gone_is_rebuilt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.storage.arrangement import ArrangementShard
    from mzflow.storage.delta import Shard

    with _q3_shop(tmp_path, 200, seed=11) as (conn, shop):
        shop.batch(5)
        conn.tick(cluster="c")
        shop.batch(5)
        # The arrangements lag behind the tick (as after a crash between ticks), and the
        # table's change feed since their frontier is gone (compacted): they are rebuilt.
        frontier = ArrangementShard.frontier
        monkeypatch.setattr(ArrangementShard, "frontier",
                            lambda self: (lambda f: None if f is None else f - 1)(
                                frontier(self)))

        def gone(self: Shard, after: int, through: int) -> pa.Table:
            raise OSError(f"no such file: the history after {after} was vacuumed")
        monkeypatch.setattr(Shard, "diffs", gone)
        (report,) = conn.tick(cluster="c")
        assert report.error is None, report.line()
        monkeypatch.undo()
        shop.check("q3", Q3)
        shop.batch(5)
        (report,) = conn.tick(cluster="c")
        assert report.error is None, report.line()
        shop.check("q3", Q3)


def _files(root: Path) -> int:
    return sum(1 for _ in root.rglob("*.parquet"))


def test_compaction_reclaims_states_and_arrangements_and_ticks_stay_exact(
        tmp_path: Path) -> None:
    """`mzflow compact` merges the GROUP BY states' small files and deletes the batches
    arrangements merged away; the ticks after it stay incremental (no rebuild), keep
    their top-k candidates, and agree with DuckDB."""
    from mzflow.incremental.rules.topk_state import KEYS_META
    from mzflow.storage import paths
    from mzflow.storage.delta import IndexShard, StateShard

    top = Q3 + " ORDER BY revenue DESC, l_orderkey LIMIT 5"
    (tmp_path / "s").mkdir()
    with _home(tmp_path, "h") as conn:
        conn.execute("ALTER SYSTEM SET retain_history = '1s'")
        shop = Shop(conn, tmp_path / "s", 300, seed=11)
        conn.execute(f"CREATE MATERIALIZED VIEW q3 IN CLUSTER c AS {Q3}")
        conn.execute(f"CREATE MATERIALIZED VIEW q3top IN CLUSTER c AS {top}")
        conn.tick(cluster="c")
        for _ in range(6):
            shop.batch(4)
            conn.tick(cluster="c")
        warehouse = conn.config.warehouse
        indexes = [i for i in conn.store.snapshot().items if i.kind == "index"]
        states = [paths.state(warehouse, i.id) for i in indexes]
        assert all(s.is_dir() for s in states)
        before = sum(_files(s) for s in states), _files(warehouse / "arrangements")
        time.sleep(1.2)  # past the retention: what ticks merged away may go
        shop.batch(4)
        conn.tick(cluster="c")
        index_shards = [IndexShard(paths.index(warehouse, i.id)) for i in indexes]
        uppers = [s.state()[0] for s in index_shards]
        done = conn.compact()
        # Compaction's own commits (optimize, vacuum) keep saying how far each index is.
        assert [s.state()[0] for s in index_shards] == uppers
        by_kind: dict[str, list[Any]] = {}
        for c in done:
            by_kind.setdefault(c.kind, []).append(c)
        assert len(by_kind["state"]) == 2, done
        assert len(by_kind["arrangement"]) >= 2, done
        assert all(c.files_removed > 0 for c in by_kind["state"]), by_kind["state"]
        assert sum(c.files_removed for c in by_kind["arrangement"]) > 0, done
        after = sum(_files(s) for s in states), _files(warehouse / "arrangements")
        assert after[0] < before[0] and after[1] < before[1], (before, after)
        top_state = StateShard(paths.state(warehouse, next(
            i.id for i in indexes if conn.store.snapshot().item(i.on_id).name == "q3top")))
        assert KEYS_META in top_state.commit_metadata(top_state.version())
        for _ in range(3):
            shop.batch(4)
            for report in conn.tick(cluster="c"):
                assert report.strategy.startswith("incremental"), report.strategy
                assert "rebuilt" not in report.strategy, report.strategy
            shop.check("q3", Q3)
            shop.check("q3top", top)


def test_a_state_rebuild_reads_its_inputs_once_like_a_recompute(tmp_path: Path) -> None:
    """After a recomputed tick left the GROUP BY state behind, the next tick rebuilds it
    from one read of each input (as the recompute did), not by a delta join from an
    empty past, which read the inputs again per join term and collected their keys."""
    with _q3_shop(tmp_path, 2_000, seed=5) as (conn, shop):
        shop.batch(10)
        (full,) = conn.tick(cluster="c", full_refresh=True)
        assert full.strategy.startswith("recompute"), full.strategy
        shop.check("q3", Q3)
        shop.batch(10)
        (rebuilt,) = conn.tick(cluster="c")
        assert "state rebuilt" in rebuilt.strategy, rebuilt.strategy
        shop.check("q3", Q3)
        assert rebuilt.rows_read <= 1.05 * full.rows_read, (rebuilt.line(), full.line())
        # ... and the ticks after it are incremental again, from the rebuilt state.
        shop.batch(10)
        (after,) = conn.tick(cluster="c")
        assert "mode state" in after.strategy and "rebuilt" not in after.strategy
        assert after.rows_read < full.rows_read / 4, after.line()
        shop.check("q3", Q3)


def test_an_arrangement_far_behind_is_rebuilt_from_the_table(tmp_path: Path) -> None:
    """Recomputed ticks leave a cluster's arrangements behind. Behind by more changes
    than the table has rows, the next incremental tick rebuilds each from the table's
    files as one base batch (reading the change feed cost more: 27 s for Q18 at SF 1
    after 10 % batches) instead of appending a delta as large as the table."""
    from mzflow.storage.arrangement import ArrangementShard

    with _q3_shop(tmp_path, 200, seed=13) as (conn, shop):
        shop.batch(5)
        conn.tick(cluster="c")
        roots = [p.parent for p in (tmp_path / "h").rglob("_delta_log")
                 if "arrangements" in p.parts]
        assert len(roots) >= 2, roots
        before = {r: ArrangementShard(r, "").frontier() for r in roots}
        for _ in range(3):  # 3 x 150 of 200 orders replaced: far more changes than rows
            shop.batch(150)
            (full,) = conn.tick(cluster="c", full_refresh=True)
            assert full.strategy.startswith("recompute"), full.strategy
        shop.batch(5)
        (report,) = conn.tick(cluster="c")
        assert report.error is None and "mode state" in report.strategy, report.line()
        shop.check("q3", Q3)
        for root in roots:
            chain = ArrangementShard(root, "").chain()
            assert chain is not None and chain[0].start == -1
            old_frontier = before[root]
            assert old_frontier is not None
            if root.name.endswith(".c_custkey"):  # customer never changed: left alone
                assert chain[-1].upto == old_frontier, chain
                continue
            assert chain[0].upto > old_frontier, (root, chain)
            assert len(chain) <= 2, chain  # the base at the old time, the tick's change
        shop.batch(5)
        (after,) = conn.tick(cluster="c")
        assert "mode state" in after.strategy and "rebuilt" not in after.strategy
        shop.check("q3", Q3)
