"""Ticks hold what they read (issue 39): each maintained index holds its inputs from
where its next tick starts, so a compaction while an index lags keeps the history that
tick reads; once the hold's lease lapsed, compaction passes it and the next tick says so
(R016) in its report and in EXPLAIN.

The fast tests drive the hold and compaction without Spark; the slow ones tick views
and compare them with DuckDB running the same statements.
"""

from __future__ import annotations

import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.catalog import holds as catalog_holds
from mzflow.catalog import migrations
from mzflow.config import Tuning
from mzflow.incremental.decide import Decision, Facts, decide
from mzflow.incremental.modes import Mode
from mzflow.maintain.tick.holds import IndexHold
from mzflow.reasons import R_LAPSED

GROUPED = "SELECT g, count(*) AS n, sum(x) AS s FROM t GROUP BY g"  # state mode
FILTERED = "SELECT k, x FROM t WHERE x > 1"  # delta mode


def _index_holds(conn: mzflow.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT i.name, o.name, h.hold_id, h.read_time, h.pid FROM mz_internal.mz_read_holds h "
        "JOIN mz_objects o ON o.id = h.object_id "
        "JOIN mz_indexes i ON h.hold_id = 'index-' || i.id "
        "WHERE h.holder = 'INDEX' ORDER BY 1").rows


def _lapse(conn: mzflow.Connection) -> None:
    """Every index hold's lease, run out (as if no tick had renewed it for a day)."""
    t = migrations.read_holds
    with conn.store.write() as w:
        w.conn.execute(t.update().where(t.c.holder == catalog_holds.INDEX_HOLDER)
                       .values(expires_at=0))


def _since_of(conn: mzflow.Connection, compacted: list[Any]) -> int:
    return {c.table: c for c in compacted}["materialize.public.t"].since


def test_a_passed_hold_recomputes_with_its_own_reason() -> None:
    passed = " [changes from 5 needed; compacted: t since 9]"
    assert decide(Facts(Mode.DELTA, 5, passed=passed), Tuning()) == Decision(
        Mode.RECOMPUTE, R_LAPSED, detail=passed)
    # A kept state is rebuilt (the cost switch's recompute), from every input row.
    assert decide(Facts(Mode.STATE, 5, passed=passed), Tuning()) == Decision(
        Mode.STATE, R_LAPSED, rebuild=True, detail=passed)
    assert decide(Facts(Mode.DELTA, 5, full_refresh=True, passed=passed),
                  Tuning()).reason != R_LAPSED


def test_compaction_keeps_what_an_index_holds_until_its_lease_lapses(tmp_path: Path) -> None:
    """Without Spark: the hold a tick keeps (IndexHold), against `mzflow compact`."""
    _holds_against_compaction(mzflow.connect(str(tmp_path / "home")))


@pytest.mark.slow
@pytest.mark.postgres
def test_index_holds_on_postgres(tmp_path: Path, pg_url: str) -> None:
    """There a renewal takes no catalog lock (catalog/holds.py: the row lock orders it
    with compaction's delete)."""
    from mzflow_dev import pg_server

    _holds_against_compaction(mzflow.connect(
        str(tmp_path / "home"), catalog_url=pg_server.create_database(pg_url)))


def _holds_against_compaction(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, g text, x int)")
    conn.execute("INSERT INTO t VALUES (1, 'a', 1)")
    conn.execute(f"CREATE MATERIALIZED VIEW v AS {GROUPED}")
    snap = conn.store.snapshot()
    table, index = snap.resolve("t"), snap.indexes_on(snap.resolve("v").id)[0]
    held_at = snap.read_ts
    hold = IndexHold(conn.store, index, [table], 3600)
    assert hold.start(-1) is None and _index_holds(conn) == []  # a first tick needs none
    hold.advance(held_at)  # the first tick committed at held_at
    assert _index_holds(conn) == [(index.name, "t", f"index-{index.id}", held_at, 0)]
    conn.execute("ALTER SYSTEM SET retain_history = '1s'")
    time.sleep(1.2)
    conn.execute("INSERT INTO t VALUES (2, 'b', 2)")
    assert _since_of(conn, conn.compact()) == held_at  # retention alone would pass it
    assert hold.start(held_at) is None  # the next tick reads the changes since then
    _lapse(conn)
    conn.execute("INSERT INTO t VALUES (3, 'c', 3)")
    since = _since_of(conn, conn.compact())
    assert since > held_at and _index_holds(conn) == []  # lapsed: deleted and passed
    passed = hold.start(held_at)
    assert passed is not None and passed.tables == (("materialize.public.t", since),)
    # The next tick's hold is made again at once: compaction keeps it from there.
    assert _index_holds(conn) == [(index.name, "t", f"index-{index.id}", held_at, 0)]
    hold.advance(since + 1)
    assert [r[3] for r in _index_holds(conn)] == [since + 1]
    # A dropped index holds nothing: the next compaction deletes its hold.
    conn.execute("DROP MATERIALIZED VIEW v")
    conn.compact()
    assert conn.execute("SELECT count(*) FROM mz_read_holds").rows == [(0,)]
    conn.close()


def _normal(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(float(v) if isinstance(v, Decimal | float) else v for v in r)
                   for r in rows)


class _Both:
    """mzflow and DuckDB running the same statements."""

    def __init__(self, tmp_path: Path):
        self.conn = mzflow.connect(str(tmp_path / "home"))
        self.db = duckdb.connect()
        # Every tick after the first runs incrementally, however large its batch is
        # next to these tiny tables: what decides otherwise here is the hold alone.
        self.conn.execute("ALTER SYSTEM SET recompute_share = 1000000")
        self.run("CREATE TABLE t (k int, g text, x int)")
        self.run("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 5), (3, 'a', 2), (4, 'c', 7)")
        self.conn.execute(f"CREATE MATERIALIZED VIEW v AS {GROUPED}")
        self.conn.execute(f"CREATE MATERIALIZED VIEW w AS {FILTERED}")
        self.ticked = max(r.upper_after for r in self.conn.tick()) - 1

    def run(self, sql: str) -> None:
        self.conn.execute(sql)
        self.db.execute(sql)

    def lag(self) -> None:
        """Writes the indexes do not tick (an UPDATE and a DELETE rewrite files, so
        compaction vacuums what the old time read), then a retention of a second has
        passed since them."""
        self.run("UPDATE t SET x = x + 10 WHERE g = 'a'")
        self.run("DELETE FROM t WHERE k = 2")
        self.run("INSERT INTO t VALUES (5, 'b', 3), (6, 'd', 0)")
        self.conn.execute("ALTER SYSTEM SET retain_history = '1s'")
        time.sleep(1.2)
        self.run("INSERT INTO t VALUES (7, 'c', 4)")

    def check(self) -> None:
        for name, sql in (("v", GROUPED), ("w", FILTERED)):
            got = self.conn.execute(f"SELECT * FROM {name}").rows
            assert _normal(got) == _normal(self.db.execute(sql).fetchall()), name


@pytest.mark.slow
@pytest.mark.spark
def test_a_lagging_index_keeps_its_history_through_compaction(tmp_path: Path) -> None:
    both = _Both(tmp_path)
    conn = both.conn
    assert [(r[0], r[1], r[3]) for r in _index_holds(conn)] == [
        ("v_primary_idx", "t", both.ticked), ("w_primary_idx", "t", both.ticked)]
    both.lag()
    assert _since_of(conn, conn.compact()) == both.ticked
    reports = conn.tick()
    assert len(reports) == 2
    for r in reports:  # incremental: no recompute, no reason code
        assert "recompute" not in r.strategy and "R01" not in r.strategy, r.line()
        assert r.error is None
    both.check()
    assert "Read hold" not in conn.execute("EXPLAIN MATERIALIZED VIEW v").rows[0][0]
    # The holds moved up to the tick's time.
    at = reports[0].upper_after - 1
    assert [r[3] for r in _index_holds(conn)] == [at, at]
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_a_lapsed_hold_lets_compaction_pass_and_the_tick_says_so(tmp_path: Path) -> None:
    both = _Both(tmp_path)
    conn = both.conn
    _lapse(conn)
    both.lag()
    since = _since_of(conn, conn.compact())
    assert since > both.ticked and _index_holds(conn) == []
    before = conn.execute("EXPLAIN MATERIALIZED VIEW w").rows[0][0]
    assert (f"Read hold: none (its lease ran out): compaction may pass {both.ticked}"
            in before), before
    reports = conn.tick()
    for r in reports:
        assert f"{R_LAPSED}: the index's read hold on its inputs lapsed" in r.strategy, r.line()
        assert f"changes from {both.ticked} needed" in r.strategy
        assert f"materialize.public.t since {since}" in r.strategy
    both.check()
    explained = conn.execute("EXPLAIN MATERIALIZED VIEW v").rows[0][0]
    assert "Last tick: " in explained and R_LAPSED in explained, explained
    assert "Read hold: none" not in explained  # held again
    # Held again from the tick's time: the next tick is incremental.
    at = reports[0].upper_after - 1
    assert [r[3] for r in _index_holds(conn)] == [at, at]
    both.run("INSERT INTO t VALUES (8, 'a', 9)")
    for r in conn.tick():
        assert "R01" not in r.strategy, r.line()
    both.check()
    conn.close()
