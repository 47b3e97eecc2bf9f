"""Freshness (issue 18, part 4): mz_wallclock_lag_history, mz_hydration_statuses,
EXPLAIN's freshness line and the plugin's lag chart, after real ticks.

Lags are wall-clock durations, so the assertions bound them by what the test itself
waited (a lower bound that cannot pass by accident), never by how fast a tick runs."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mzflow


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        yield c


def _fresh(conn: mzflow.Connection) -> str:
    text = conn.execute("EXPLAIN MATERIALIZED VIEW m").rows[0][0]
    return next(line for line in text.splitlines() if line.startswith("Freshness"))


@pytest.mark.slow
@pytest.mark.spark
def test_lag_and_hydration_tables_after_ticks(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, v int)")
    conn.execute("CREATE TABLE other (x int)")
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS s FROM t GROUP BY k")
    m = conn.store.snapshot().find("m")
    assert m is not None
    # m's default index is in the default cluster (1): that cluster's one replica
    (replica,), = conn.execute("SELECT id FROM mz_cluster_replicas WHERE cluster_id = 1").rows
    assert conn.execute("SELECT * FROM mz_hydration_statuses").rows == [
        (m.id, replica, False, None)]
    global_lag = "SELECT object_id, lag FROM mz_internal.mz_wallclock_global_lag"
    assert conn.execute(global_lag).rows == [(m.id, None)]
    assert _fresh(conn).startswith("Freshness: not hydrated")
    conn.execute("INSERT INTO t VALUES (1, 1)")
    conn.tick()  # hydrates m: its time is the hydration's, not a lag
    (oid, _, hydrated, took), = conn.execute("SELECT * FROM mz_hydration_statuses").rows
    assert (oid, hydrated) == (m.id, True) and took > dt.timedelta(0)
    assert conn.execute(global_lag).rows == [(m.id, dt.timedelta(0))]
    assert conn.execute("SELECT count(*) FROM mz_wallclock_lag_history").rows == [(0,)]
    assert "lag 0 s (no input written since)" in _fresh(conn)

    # A write that waits 1.5 s for its tick: that tick's lag is at least the wait.
    conn.execute("INSERT INTO t VALUES (2, 2)")
    time.sleep(1.5)
    fresh = _fresh(conn)
    assert "an input was written since" in fresh
    assert float(fresh.split("lag ")[1].split(" s")[0]) >= 1.5
    (_, lag), = conn.execute(global_lag).rows  # the same lag, as Materialize's table has it
    assert lag >= dt.timedelta(seconds=1.5)
    conn.tick()
    assert "lag 0 s" in _fresh(conn)
    # A tick that brings in no write of m's inputs (only of another table): lag 0.
    conn.execute("INSERT INTO other VALUES (1)")
    time.sleep(0.5)
    conn.tick()
    rows = conn.execute("SELECT object_id, lag, occurred_at FROM mz_wallclock_lag_history "
                        "ORDER BY occurred_at").rows
    assert [r[0] for r in rows] == [m.id, m.id]
    assert rows[0][1] >= dt.timedelta(seconds=1.5)
    assert rows[1][1] == dt.timedelta(0)
    assert rows[0][2] < rows[1][2] <= dt.datetime.now(dt.UTC)

    # The plugin draws it: one chart for m's cluster, with m's line.
    from mzflow.airflow.ui import data, pages

    view = data.catalog_view(str(conn.config.home))
    assert [(r["object"], r["cluster"]) for r in view["lag_history"]] == [
        ("m", "default"), ("m", "default")]
    assert view["lag_history"][0]["lag_s"] >= 1.5
    page = pages.catalog_page(view)
    assert "<h4>cluster default</h4><svg" in page and "<polyline" in page
