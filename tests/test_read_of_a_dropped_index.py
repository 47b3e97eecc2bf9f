"""A read, or a tick, of an index dropped after its snapshot was taken (issue 39's soak:
a serializable read of a view planned just before a blue/green swap's clean-up dropped
the index serving it). The read waited for the index's lock behind a tick, then caught
the dropped index up at the old time: its shard made again, empty, and a recompute at a
time compaction had passed, so the read failed with InvalidTimestamp. Now a tick of an
index the catalog no longer names makes nothing and says it was dropped, and a read
planned on such an index is planned again on the catalog as it is."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.errors import UnknownObject
from mzflow.maintain import ticks
from mzflow.read import reads
from mzflow.storage import paths

ROWS = [(i, i % 3, i * 7 % 50) for i in range(40)]
OLD = "SELECT 1 AS gen, k, count(*) AS n, sum(v) AS sv FROM t GROUP BY k"
NEW = "SELECT 2 AS gen, k, count(*) AS n, max(v) AS sv FROM t GROUP BY k"


def _home(tmp_path: Path) -> mzflow.Connection:
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE CLUSTER c SIZE 'small'")
    conn.execute("CREATE TABLE t (id int, k int, v int)")
    conn.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {k}, {v})" for i, k, v in ROWS))
    conn.execute(f"CREATE MATERIALIZED VIEW mv IN CLUSTER c AS {OLD}")
    return conn


def _index(snap: mzflow.catalog.model.Snapshot) -> mzflow.catalog.model.Item:
    return snap.indexes_on(snap.resolve("mv").id)[0]


def test_a_tick_of_a_dropped_index_makes_nothing(tmp_path: Path) -> None:
    conn = _home(tmp_path)
    old = conn.store.snapshot()
    index = _index(old)
    conn.execute("DROP MATERIALIZED VIEW mv")
    assert not any(p.exists() for p in paths.of_item(conn.config.warehouse, index.id))
    with pytest.raises(UnknownObject, match="was dropped while it ticked"):
        ticks.tick_index(old, conn.config.warehouse, index, old.read_ts,
                         named=lambda: any(i.id == index.id
                                           for i in conn.store.snapshot().items),
                         store=conn.store)
    # No shard made again for it (nothing would ever remove one no catalog names).
    assert not any(p.exists() for p in paths.of_item(conn.config.warehouse, index.id))
    conn.close()


def _replace_and_compact(home: str) -> None:
    """On another connection: a new definition replaces the view and is hydrated, then
    its input's history is compacted past the old index's time (the soak's retention of
    a second), as a blue/green apply and the compactor do."""
    with mzflow.connect(home) as other:
        other.execute("ALTER SYSTEM SET retain_history = '1s'")
        other.execute("DROP MATERIALIZED VIEW mv")
        other.execute(f"CREATE MATERIALIZED VIEW mv IN CLUSTER c AS {NEW}")
        other.execute("INSERT INTO t VALUES (100, 1, 99)")
        other.tick()
        time.sleep(1.2)
        other.execute("INSERT INTO t VALUES (101, 2, 1)")
        other.compact()


@pytest.mark.slow
@pytest.mark.spark  # ticks
def test_a_read_of_an_index_dropped_while_it_read_reads_what_serves_the_view_now(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _home(tmp_path)
    conn.execute("SET cluster = c")
    conn.execute("SET transaction_isolation = 'serializable'")
    conn.tick()
    assert {r[0] for r in conn.execute("SELECT * FROM mv").rows} == {1}
    old_index = _index(conn.store.snapshot())
    planned: list[list[str]] = []
    run_spark = reads.run_spark

    def racing(snap: Any, p: reads.Plan, *args: Any, **kwargs: Any) -> Any:
        planned.append([index.id for _, index in p.indexes])
        if len(planned) == 1:  # the view replaced while this read reads
            _replace_and_compact(str(tmp_path / "home"))
        return run_spark(snap, p, *args, **kwargs)

    monkeypatch.setattr(reads, "run_spark", racing)
    got = conn.execute("SELECT * FROM mv").rows
    new_index = _index(conn.store.snapshot())
    # Planned on the old index, then again on the new one.
    assert planned == [[old_index.id], [new_index.id]]
    oracle = duckdb.sql(
        "SELECT 2 AS gen, k, count(*), max(v) FROM (VALUES "
        + ", ".join(f"({i}, {k}, {v})" for i, k, v in ROWS + [(100, 1, 99)])
        + ") t(id, k, v) GROUP BY k").fetchall()
    # What the new index holds (ticked before the last insert): the new definition.
    assert sorted(got) == sorted(oracle)
    assert not any(p.exists() for p in paths.of_item(conn.config.warehouse, old_index.id))
    conn.close()
